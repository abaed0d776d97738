"""What a DatasetCache may ask for its agents (issue 22 part 3): the admin's ``DatasetCacheAgents``, the validating
webhook's verdicts per field on CREATE and UPDATE, the shard glob's bound, the flags and ``trainguard render``.

The attack: a namespace user who may not create pods writes a DatasetCache with ``priorityClassName:
system-node-critical``, ``tolerations: [{operator: Exists}]`` and a huge ``memoryBudget``; the controller, not the
user, creates the agent DaemonSet, which copied all three."""

from __future__ import annotations

import argparse
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest
import yaml

from trainguard.webhook.dataset_cache_flags import add_dataset_cache_flags, dataset_cache_agents
from trainguard.webhook.policy.dataset_cache_agents import (
    AGENT_GPU_TOLERATION,
    DEFAULT_NODE_SELECTOR_KEYS,
    DatasetCacheAgents,
    agent_errors,
)
from trainguard.webhook.policy.pipeline import validate_dataset_cache
from trainguard.webhook.policy.verdict import AdmissionInput, ClusterSnapshot

NOW = datetime(2026, 9, 1, 12, 0, tzinfo=timezone.utc)
DEFAULTS = DatasetCacheAgents()
ADMIN = DatasetCacheAgents.of(priority_classes=["dataset-cache"], toleration_keys=["dedicated"],
                              node_selector_keys=["pool"], required_node_selector={"nvidia.com/gpu.present": "true"},
                              max_memory_budget="16Gi")


def cache(name: str = "imagenet", **spec: Any) -> dict[str, Any]:
    return {"apiVersion": "trainguard.io/v1alpha1", "kind": "DatasetCache",
            "metadata": {"name": name, "namespace": "team-a"},
            "spec": {"source": {"persistentVolumeClaim": {"claimName": "datasets"}, "shards": "*.arrow"},
                     "memoryBudget": "1Gi", **spec}}


def review(obj: dict[str, Any], agents: DatasetCacheAgents, *, old: dict[str, Any] | None = None):  # type: ignore[no-untyped-def]
    operation = "CREATE" if old is None else "UPDATE"
    return validate_dataset_cache(AdmissionInput(operation, obj, old, NOW, namespace="team-a"),  # type: ignore[arg-type]
                                  ClusterSnapshot(dataset_cache_agents=agents))


PRIORITY = ("spec.priorityClassName: Unsupported value: \"system-node-critical\": ")
SETTING_PRIORITY = "(--dataset-cache-allowed-priority-classes (Helm value datasetCache.allowedPriorityClasses))"
SETTING_TOLERATION = "(--dataset-cache-allowed-toleration-keys (Helm value datasetCache.allowedTolerationKeys))"

# (spec fields, admin setting, the denial's text): each attack, and each message naming the field and what is allowed.
DENIED = [
    ({"priorityClassName": "system-node-critical"}, DEFAULTS,
     f"{PRIORITY}the cluster admin allows no priority class for cache agents {SETTING_PRIORITY}; remove it"),
    ({"priorityClassName": "system-node-critical"}, ADMIN,
     f"{PRIORITY}cache agents may use only the priority classes the cluster admin allows: dataset-cache "
     f"{SETTING_PRIORITY}"),
    ({"priorityClassName": "system-cluster-critical"}, DatasetCacheAgents.of(priority_classes=["system-node-critical"]),
     'spec.priorityClassName: Unsupported value: "system-cluster-critical"'),
    ({"tolerations": [{"operator": "Exists"}]}, ADMIN,
     "spec.tolerations[0]: Forbidden: a toleration without a key tolerates every taint, the control plane's "
     f"included; cache agents may tolerate only the taint keys the cluster admin allows: dedicated {SETTING_TOLERATION}"),
    ({"tolerations": [{"operator": "Exists", "effect": "NoExecute"}]}, DEFAULTS,
     "spec.tolerations[0]: Forbidden: a toleration without a key tolerates every taint"),
    ({"tolerations": [AGENT_GPU_TOLERATION, {"key": "node-role.kubernetes.io/control-plane", "operator": "Exists",
                                             "effect": "NoSchedule"}]}, DEFAULTS,
     'spec.tolerations[1].key: Unsupported value: "node-role.kubernetes.io/control-plane": cache agents may tolerate '
     f"only the taint keys the cluster admin allows: none {SETTING_TOLERATION}"),
    ({"tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists"}]}, DEFAULTS,  # wider than the agents' own
     'spec.tolerations[0].key: Unsupported value: "nvidia.com/gpu"'),
    ({"nodeSelector": {"node-role.kubernetes.io/control-plane": ""}}, DEFAULTS,
     "spec.nodeSelector[node-role.kubernetes.io/control-plane]: Forbidden: cache agents may select nodes only by the "
     f"label keys the cluster admin allows: {', '.join(DEFAULT_NODE_SELECTOR_KEYS)} (--dataset-cache-allowed-node-"
     "selector-keys (Helm value datasetCache.allowedNodeSelectorKeys))"),
    ({"nodeSelector": {"nvidia.com/gpu.present": "false"}}, ADMIN,
     'spec.nodeSelector[nvidia.com/gpu.present]: Invalid value: "false": the cluster admin requires '
     "nvidia.com/gpu.present=true for every cache agent (--dataset-cache-required-node-selector (Helm value "
     "datasetCache.requiredNodeSelector))"),
    ({"memoryBudget": "65Gi"}, DEFAULTS,
     'spec.memoryBudget: Invalid value: "65Gi": must be at most 64Gi, the most node memory the cluster admin allows '
     "a DatasetCache (--dataset-cache-max-memory-budget (Helm value datasetCache.maxMemoryBudget))"),
    ({"memoryBudget": "18G"}, ADMIN, 'spec.memoryBudget: Invalid value: "18G": must be at most 16Gi'),  # 18e9 > 16 * 2**30
    ({"memoryBudget": 2**40}, DEFAULTS, "spec.memoryBudget: Invalid value: 1099511627776: must be at most 64Gi"),
]


@pytest.mark.parametrize("spec, agents, message", DENIED)
def test_create_is_denied_naming_the_field_and_what_is_allowed(spec: dict, agents: DatasetCacheAgents,
                                                                message: str) -> None:
    verdict = review(cache(**spec), agents)
    assert not verdict.allowed
    assert message in verdict.message, verdict.message


@pytest.mark.parametrize("spec, agents, message", DENIED)
def test_an_update_that_introduces_it_is_denied_too(spec: dict, agents: DatasetCacheAgents, message: str) -> None:
    verdict = review(cache(**spec), agents, old=cache())
    assert not verdict.allowed
    assert message in verdict.message, verdict.message


@pytest.mark.parametrize("spec, agents", [
    ({}, DEFAULTS),
    ({"memoryBudget": "64Gi"}, DEFAULTS),  # the cap itself
    ({"tolerations": [AGENT_GPU_TOLERATION]}, DEFAULTS),  # what every agent gets anyway
    ({"nodeSelector": {"nvidia.com/gpu.product": "H100", "kubernetes.io/hostname": "gpu-1"}}, DEFAULTS),
    ({"priorityClassName": "dataset-cache", "memoryBudget": "16Gi",
      "tolerations": [{"key": "dedicated", "operator": "Equal", "value": "ml", "effect": "NoExecute"}],
      "nodeSelector": {"pool": "a100", "nvidia.com/gpu.present": "true"}}, ADMIN),
    ({"priorityClassName": "system-node-critical"}, DatasetCacheAgents.of(priority_classes=["system-node-critical"])),
    ({"priorityClassName": ""}, DEFAULTS),  # empty: none
], ids=["plain", "at-the-cap", "gpu-toleration", "well-known-labels", "admin-allows", "admin-lists-system",
        "empty-priority-class"])
def test_what_the_admin_allows_is_admitted_without_warnings(spec: dict, agents: DatasetCacheAgents) -> None:
    verdict = review(cache(**spec), agents)
    assert verdict.allowed, verdict.message
    assert not verdict.warnings
    assert agent_errors(cache(**spec), agents) == []


def test_an_update_that_keeps_what_the_admin_has_since_disallowed_is_warned_not_denied() -> None:
    """As for sources: the controller already runs no agents for it, and a label edit or the garbage collector's
    finalizer removal must not be blocked."""
    old = cache(priorityClassName="system-node-critical", memoryBudget="1Ti")
    new = cache(priorityClassName="system-node-critical", memoryBudget="1Ti") | {
        "metadata": {"name": "imagenet", "namespace": "team-a", "labels": {"team": "a"}}}
    verdict = review(new, DEFAULTS, old=old)
    assert verdict.allowed
    [warning] = verdict.warnings
    assert warning.startswith('DatasetCache "imagenet": no cache agents run for it while it asks for what the cluster '
                              "admin no longer allows: [spec.priorityClassName: Unsupported value: ")
    assert 'spec.memoryBudget: Invalid value: "1Ti"' in warning
    # Changing one of them is judged as on CREATE: the changed field is denied, the kept one still only warned.
    verdict = review(cache(priorityClassName="system-node-critical", memoryBudget="2Ti"), DEFAULTS, old=old)
    assert not verdict.allowed and 'spec.memoryBudget: Invalid value: "2Ti"' in verdict.message
    assert "priorityClassName" not in verdict.message and "priorityClassName" in verdict.warnings[0]


def test_every_toleration_is_judged() -> None:
    tolerations = [{"key": f"k{i}", "operator": "Exists"} for i in range(64)]
    errors = agent_errors(cache(tolerations=tolerations), DatasetCacheAgents.of(toleration_keys=["k7"]))
    assert [e.path for e in errors] == [f"spec.tolerations[{i}].key" for i in range(64) if i != 7]


# --- the shard glob's bound (issue 22 part 4) --------------------------------------------------------------------


@pytest.mark.parametrize("shards, message", [
    ("*a*a*a*a*a*a*a*a*b", 'spec.source.shards: Invalid value: "*a*a*a*a*a*a*a*a*b": must contain at most 8 \'*\' '
                           "characters (it has 9)"),
    ("a" * 257, "spec.source.shards: Too long: may not be more than 256 characters"),
])
def test_a_glob_past_its_bound_is_denied(shards: str, message: str) -> None:
    obj = cache()
    obj["spec"]["source"]["shards"] = shards
    verdict = review(obj, DEFAULTS)
    assert not verdict.allowed and message in verdict.message, verdict.message


@pytest.mark.parametrize("shards", ["*a*a*a*a*a*a*a*b", "**/*.arrow", "train-*-of-*.tar", "a" * 256])
def test_a_glob_within_its_bound_is_admitted(shards: str) -> None:
    obj = cache()
    obj["spec"]["source"]["shards"] = shards
    assert review(obj, DEFAULTS).allowed


# --- the flags (webhook, controller, render) -----------------------------------------------------------------------


def parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser(exit_on_error=False)
    add_dataset_cache_flags(parser)
    return parser.parse_args(list(argv))


@pytest.mark.parametrize("argv, expected", [
    ((), DatasetCacheAgents()),
    (("--dataset-cache-allowed-priority-classes=dataset-cache",
      "--dataset-cache-allowed-toleration-keys=dedicated",
      "--dataset-cache-allowed-node-selector-keys=pool",
      "--dataset-cache-required-node-selector=nvidia.com/gpu.present=true",
      "--dataset-cache-max-memory-budget=16Gi"), ADMIN),
    (("--dataset-cache-allowed-node-selector-keys=",), DatasetCacheAgents(allowed_node_selector_keys=())),
    (("--dataset-cache-allowed-priority-classes=a, b,,a",), DatasetCacheAgents(allowed_priority_classes=("a", "b"))),
    (("--dataset-cache-required-node-selector=b=2,a=",),
     DatasetCacheAgents(required_node_selector=(("a", ""), ("b", "2")))),
], ids=["defaults", "admin", "no-selector-keys", "list", "selector"])
def test_flags(argv: tuple[str, ...], expected: DatasetCacheAgents) -> None:
    assert dataset_cache_agents(parse(*argv)) == expected


@pytest.mark.parametrize("argv, message", [
    (("--dataset-cache-max-memory-budget=lots",), "max memory budget 'lots'"),
    (("--dataset-cache-max-memory-budget=0",), "must be greater than zero"),
    (("--dataset-cache-required-node-selector=pool",), "must be KEY=VALUE"),
])
def test_a_bad_flag_is_a_usage_error(argv: tuple[str, ...], message: str) -> None:
    with pytest.raises(argparse.ArgumentError, match=message):
        parse(*argv)


def test_the_default_is_64gi() -> None:
    assert DatasetCacheAgents().max_memory_budget_bytes == 64 * 2**30


@pytest.mark.parametrize("extra, code, err", [
    ((), 1, "DatasetCache 'attack' ({file}:1) denied: [spec.priorityClassName: Unsupported value: "
            '"system-node-critical"'),
    (("--dataset-cache-allowed-priority-classes=system-node-critical",
      "--dataset-cache-allowed-toleration-keys=dedicated"), 0, ""),
], ids=["default", "admin-allows"])
def test_render_takes_the_same_flags(tmp_path: Path, capsys: pytest.CaptureFixture[str], extra: tuple[str, ...],
                                    code: int, err: str) -> None:
    from trainguard.webhook.cli import build_parser

    path = tmp_path / "cache.yaml"
    path.write_text(yaml.safe_dump(cache("attack", priorityClassName="system-node-critical",
                                         tolerations=[{"key": "dedicated", "operator": "Exists"}])))
    args = build_parser().parse_args(["render", "-f", str(path), "--now", "2026-09-01T12:00:00Z", *extra])
    assert args.run(args) == code
    assert err.replace("{file}", str(path)) in capsys.readouterr().err
