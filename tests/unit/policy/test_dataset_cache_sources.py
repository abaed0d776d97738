"""Where a DatasetCache may read from (issue 10, attack 9): the admin's ``DatasetCacheSources``, the path rules, the
validating webhook's verdicts, the flags that carry the setting, and ``trainguard render`` with those flags."""

from __future__ import annotations

import argparse
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest
import yaml

from trainguard.webhook.admission.main import with_dataset_cache_sources
from trainguard.webhook.dataset_cache_flags import add_dataset_cache_source_flags, dataset_cache_sources
from trainguard.webhook.policy.dataset_cache import (
    HOST_PATH_FIELD,
    DatasetCacheSources,
    UncleanPath,
    clean_host_path,
    is_below,
    source_errors,
)
from trainguard.webhook.policy.pipeline import validate_dataset_cache
from trainguard.webhook.policy.verdict import AdmissionInput, ClusterSnapshot

NOW = datetime(2026, 9, 1, 12, 0, tzinfo=timezone.utc)
DATA = DatasetCacheSources.of(["/data"])


def cache(source: dict[str, Any], name: str = "imagenet") -> dict[str, Any]:
    return {"apiVersion": "trainguard.io/v1alpha1", "kind": "DatasetCache",
            "metadata": {"name": name, "namespace": "team-a"},
            "spec": {"source": {**source, "shards": "*.arrow"}, "memoryBudget": "1Gi"}}


def host(path: str, name: str = "imagenet") -> dict[str, Any]:
    return cache({"hostPath": {"path": path}}, name)


PVC = cache({"persistentVolumeClaim": {"claimName": "datasets", "path": "imagenet"}})


def review(obj: dict[str, Any], sources: DatasetCacheSources, *, operation: str = "CREATE",
           old: dict[str, Any] | None = None):  # type: ignore[no-untyped-def]
    return validate_dataset_cache(AdmissionInput(operation, obj, old, NOW, namespace="team-a"),  # type: ignore[arg-type]
                                  ClusterSnapshot(dataset_cache_sources=sources))


# --- paths --------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("path, cleaned", [
    ("/", "/"),
    ("/data", "/data"),
    ("/data/", "/data"),
    ("//data//datasets/./x/", "/data/datasets/x"),
    ("/./", "/"),
])
def test_clean_paths(path: str, cleaned: str) -> None:
    assert clean_host_path(path) == cleaned


@pytest.mark.parametrize("path, why", [
    ("data", "absolute"),
    ("", "absolute"),
    ("/data/../etc", "'..'"),
    ("/..", "'..'"),
    ("/data/x/..", "'..'"),
    ("/data\x00/x", "NUL"),
])
def test_unclean_paths_are_refused_not_resolved(path: str, why: str) -> None:
    with pytest.raises(UncleanPath, match=why):
        clean_host_path(path)


@pytest.mark.parametrize("path, root, below", [
    ("/data", "/data", True),
    ("/data/x", "/data", True),
    ("/data/datasets/x", "/data/datasets", True),
    ("/database", "/data", False),
    ("/data-evil/x", "/data", False),
    ("/", "/data", False),
    ("/dat", "/data", False),
    ("/anything", "/", True),  # an admin who allows "/" allows everything, deliberately
])
def test_roots_match_whole_components(path: str, root: str, below: bool) -> None:
    assert is_below(path, root) is below


def test_setting_cleans_and_deduplicates_roots_and_refuses_unclean_ones() -> None:
    assert DatasetCacheSources.of(["/data/", "//data", "/mnt/./ds"]).allowed_host_path_roots == ("/data", "/mnt/ds")
    with pytest.raises(UncleanPath, match="root '/data/../etc'"):
        DatasetCacheSources.of(["/data/../etc"])
    with pytest.raises(UncleanPath, match="absolute"):
        DatasetCacheSources.of(["data"])


def test_the_default_setting_refuses_hostpath_and_allows_pvcs() -> None:
    assert DatasetCacheSources() == DatasetCacheSources.of([])
    assert source_errors(host("/data/x"), DatasetCacheSources())
    assert source_errors(PVC, DatasetCacheSources()) == []


# --- the validating webhook ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("path, detail", [
    ("/", "must be one of, or lie below one of, the hostPath roots the cluster admin allows: /data"),
    ("/etc", "must be one of, or lie below one of, the hostPath roots the cluster admin allows: /data"),
    ("/database", "must be one of, or lie below one of, the hostPath roots the cluster admin allows: /data"),
    ("/data/../etc", "must not contain '..' components"),
    ("/data/datasets/../../etc", "must not contain '..' components"),
], ids=["root", "etc", "sibling-prefix", "dotdot", "dotdot-deep"])
def test_hostpaths_outside_the_allowed_roots_are_denied_naming_the_field(path: str, detail: str) -> None:
    v = review(host(path), DATA)
    assert not v.allowed and v.reason == "DatasetCacheValidation"
    assert v.message is not None and v.message.startswith(f'{HOST_PATH_FIELD}: Invalid value: "{path}": {detail}')


@pytest.mark.parametrize("path", ["/data", "/data/datasets/x", "//data/./datasets/x/"])
def test_hostpaths_below_an_allowed_root_are_admitted(path: str) -> None:
    v = review(host(path), DATA)
    assert v.allowed and v.warnings == (), v.message


def test_several_roots() -> None:
    sources = DatasetCacheSources.of(["/data", "/mnt/datasets"])
    assert review(host("/mnt/datasets/coco"), sources).allowed
    v = review(host("/mnt/other"), sources)
    assert not v.allowed and "allows: /data, /mnt/datasets (--dataset-cache-allowed-host-path" in (v.message or "")


def test_with_no_roots_configured_every_hostpath_is_denied_and_says_how_to_get_one() -> None:
    v = review(host("/data/datasets/x"), DatasetCacheSources())
    assert not v.allowed
    assert v.message == (
        f'{HOST_PATH_FIELD}: Invalid value: "/data/datasets/x": hostPath sources are not allowed on this cluster: the '
        "cluster admin has allowed no hostPath roots (--dataset-cache-allowed-host-path (Helm value "
        "datasetCache.allowedHostPathRoots)); use a persistentVolumeClaim source or ask for a root")


@pytest.mark.parametrize("sources, allowed", [
    (DatasetCacheSources(), True),
    (DatasetCacheSources.of(["/data"], allow_persistent_volume_claims=False), False),
], ids=["default-allowed", "admin-refuses"])
def test_pvc_sources_follow_the_setting(sources: DatasetCacheSources, allowed: bool) -> None:
    v = review(PVC, sources)
    assert v.allowed is allowed
    if not allowed:
        assert v.message == ("spec.source.persistentVolumeClaim: Forbidden: PersistentVolumeClaim sources are not "
                             "allowed on this cluster (--dataset-cache-allow-pvc (Helm value "
                             "datasetCache.allowPersistentVolumeClaims))")


def test_a_bad_name_and_a_bad_source_are_reported_together() -> None:
    v = review(host("/etc") | {"metadata": {"name": "Bad.Name", "namespace": "team-a"}}, DATA)
    assert not v.allowed and v.message is not None
    assert v.message.startswith('[metadata.name: Invalid value: "Bad.Name"') and HOST_PATH_FIELD in v.message


def test_update_that_moves_the_source_out_of_the_roots_is_denied() -> None:
    v = review(host("/etc"), DATA, operation="UPDATE", old=host("/data/x"))
    assert not v.allowed and HOST_PATH_FIELD in (v.message or "")


def test_update_that_keeps_a_source_the_admin_has_since_disallowed_is_admitted_with_a_warning() -> None:
    # e.g. a label edit, or the garbage collector removing a finalizer, after the admin narrowed the roots: the
    # controller already runs no agents for it; denying would only wedge the object.
    old = host("/old/datasets")
    new = host("/old/datasets") | {"metadata": {"name": "imagenet", "namespace": "team-a", "labels": {"a": "b"}}}
    v = review(new, DATA, operation="UPDATE", old=old)
    assert v.allowed
    assert len(v.warnings) == 1 and v.warnings[0].startswith(
        'DatasetCache "imagenet": its source is no longer allowed, so no cache agents run for it: '
        f'{HOST_PATH_FIELD}: Invalid value: "/old/datasets"')


@pytest.mark.parametrize("operation", ["DELETE", "CONNECT"])
def test_delete_is_never_refused(operation: str) -> None:
    assert review(host("/"), DatasetCacheSources(), operation=operation).allowed


# --- the flags (webhook, controller, render) ----------------------------------------------------------------------


def parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser(exit_on_error=False)
    add_dataset_cache_source_flags(parser)
    return parser.parse_args(list(argv))


@pytest.mark.parametrize("argv, expected", [
    ((), DatasetCacheSources((), True)),
    (("--dataset-cache-allowed-host-path", "/data/datasets", "--dataset-cache-allowed-host-path=/mnt/x/"),
     DatasetCacheSources(("/data/datasets", "/mnt/x"), True)),
    (("--no-dataset-cache-allow-pvc",), DatasetCacheSources((), False)),
    (("--dataset-cache-allow-pvc",), DatasetCacheSources((), True)),
])
def test_flags(argv: tuple[str, ...], expected: DatasetCacheSources) -> None:
    assert dataset_cache_sources(parse(*argv)) == expected


@pytest.mark.parametrize("root", ["data", "/data/../etc"])
def test_an_unclean_root_flag_is_a_usage_error(root: str) -> None:
    with pytest.raises(argparse.ArgumentError, match="hostPath root"):
        parse("--dataset-cache-allowed-host-path", root)


def test_the_webhook_fills_the_setting_into_every_snapshot_without_copying_per_request() -> None:
    bases = [ClusterSnapshot(), ClusterSnapshot(policies={"p": {}})]
    current = {"i": 0}
    snapshot = with_dataset_cache_sources(lambda: bases[current["i"]], DATA)
    first = snapshot()
    assert first.dataset_cache_sources == DATA and snapshot() is first  # same base: same object
    current["i"] = 1
    second = snapshot()
    assert second is not first and second.policies == {"p": {}} and second.dataset_cache_sources == DATA


@pytest.mark.parametrize("extra, code, err", [
    ((), 1, f'DatasetCache \'root\' ({{file}}:1) denied: {HOST_PATH_FIELD}: Invalid value: "/": hostPath sources are '
            "not allowed on this cluster"),
    (("--dataset-cache-allowed-host-path", "/data"), 1, f'{HOST_PATH_FIELD}: Invalid value: "/": must be one of'),
    (("--dataset-cache-allowed-host-path", "/"), 0, ""),
], ids=["default", "data-only", "admin-allows-root"])
def test_render_takes_the_same_flags(tmp_path: Path, capsys: pytest.CaptureFixture[str], extra: tuple[str, ...],
                                    code: int, err: str) -> None:
    from trainguard.webhook.cli import build_parser

    path = tmp_path / "cache.yaml"
    path.write_text(yaml.safe_dump(host("/", name="root")))
    args = build_parser().parse_args(["render", "-f", str(path), "--now", "2026-09-01T12:00:00Z", *extra])
    assert args.run(args) == code
    assert err.replace("{file}", str(path)) in capsys.readouterr().err
