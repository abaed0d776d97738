"""Issue 10 item 9: a namespace user cannot make trainguard mount an arbitrary node directory.

The attack: the user (who may create DatasetCaches in their namespace, and nothing on pods) creates a DatasetCache
whose source is ``hostPath: /``; the controller, not the user, creates the agent DaemonSet, so the node's root
filesystem would be mounted past Pod Security and served by the agent to the user's pods.

The defence, as the cluster admin configures it here: DatasetCaches may read below ``/data`` only (the webhook's and
the controller's ``--dataset-cache-allowed-host-path``; Helm value ``datasetCache.allowedHostPathRoots``).

1. At ``kubectl apply``, as the user: ``/``, ``/etc``, ``/data/../etc`` and ``/database`` are denied by the real
   ``trainguard webhook``, naming ``spec.source.hostPath.path`` and the allowed root, and nothing is stored;
   ``/data/datasets/x`` and a PVC source are admitted.
2. With no webhook registered (down, or ``failurePolicy: Ignore``), the ``/`` cache is stored, but the real
   ``trainguard controller`` creates no DaemonSet and no agent RBAC for it, and says why (``Ready=False``, reason
   ``SourceNotAllowed``, and a Warning event); the allowed neighbour gets its agents.
3. When the admin narrows the roots, an agent DaemonSet built under the old setting is deleted.
4. The chart passes the same setting to both, and the flags it renders parse into that setting.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any, Iterator

import pytest
import yaml

from tests.integration.conftest import WebhookProcess, register, start_webhook, unregister
from tests.integration.reconcile.reconcile_harness import ControllerProcess, wait_for
from trainguard.webhook.dataset_cache_flags import dataset_cache_sources
from trainguard.webhook.policy.dataset_cache import DatasetCacheSources

ALLOWED_ROOT = "/data"
ALLOW_DATA = [f"--dataset-cache-allowed-host-path={ALLOWED_ROOT}"]
VALIDATOR = "validator.datasetcache.trainguard.io"
FIELD = "spec.source.hostPath.path"
REPO = Path(__file__).resolve().parents[2]


def cache(name: str, source: dict[str, Any]) -> str:
    return json.dumps({"apiVersion": "trainguard.io/v1alpha1", "kind": "DatasetCache", "metadata": {"name": name},
                       "spec": {"source": {**source, "shards": "*.arrow"}, "memoryBudget": "1Gi"}})


def host(path: str) -> dict[str, Any]:
    return {"hostPath": {"path": path}}


def agent(name: str) -> str:
    return f"trainguard-cache-{name}"


def exists(cluster: Any, namespace: str, kind: str, name: str) -> bool:
    return cluster.kubectl("get", kind, name, "-n", namespace, "-o", "name", check=False).returncode == 0


def ready_condition(cluster: Any, namespace: str, name: str) -> dict[str, Any] | None:
    out = cluster.kubectl("get", "datasetcache", name, "-n", namespace, "-o", "json", check=False)
    if out.returncode != 0:
        return None
    status = json.loads(out.stdout).get("status") or {}
    return next((c for c in status.get("conditions") or [] if c.get("type") == "Ready"), None)


def refused(cluster: Any, namespace: str, name: str) -> dict[str, Any] | None:
    condition = ready_condition(cluster, namespace, name)
    return condition if condition and condition.get("reason") == "SourceNotAllowed" else None


def events(cluster: Any, namespace: str, name: str, reason: str) -> list[dict[str, Any]]:
    items = json.loads(cluster.kubectl("get", "events.events.k8s.io", "-n", namespace, "-o", "json").stdout)["items"]
    return [e for e in items if e.get("reason") == reason and (e.get("regarding") or {}).get("name") == name]


# ---- fixtures ---------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def admin_webhook(cluster: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[WebhookProcess]:
    """The real ``trainguard webhook``, configured by the admin to allow DatasetCaches below /data only."""
    server = start_webhook(cluster, tmp_path_factory.mktemp("dataset-cache-webhook"), extra=ALLOW_DATA)
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def registered(cluster: Any, namespace: str, admin_webhook: WebhookProcess) -> Iterator[None]:
    reg = register(cluster, admin_webhook, namespace)
    try:
        yield
    finally:
        unregister(cluster, reg)


@pytest.fixture
def controllers(cluster: Any) -> Iterator[list[ControllerProcess]]:
    started: list[ControllerProcess] = []
    yield started
    for proc in started:
        proc.kill()


def start_controller(controllers: list[ControllerProcess], cluster: Any, namespace: str, tmp_path: Path,
                     identity: str, roots: list[str]) -> ControllerProcess:
    proc = ControllerProcess(cluster.kubeconfig, namespace, identity, tmp_path,
                             extra=[f"--dataset-cache-allowed-host-path={r}" for r in roots])
    controllers.append(proc)
    return proc.start()


# ---- 1. at kubectl apply ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("path, detail", [
    ("/", f"must be one of, or lie below one of, the hostPath roots the cluster admin allows: {ALLOWED_ROOT}"),
    ("/etc", f"must be one of, or lie below one of, the hostPath roots the cluster admin allows: {ALLOWED_ROOT}"),
    ("/data/../etc", "must not contain '..' components"),
    ("/database", f"must be one of, or lie below one of, the hostPath roots the cluster admin allows: {ALLOWED_ROOT}"),
], ids=["root", "etc", "dotdot", "sibling-prefix"])
def test_a_hostpath_outside_the_allowed_roots_is_denied_at_apply(cluster: Any, namespace: str, namespace_user: Any,
                                                                 registered: None, path: str, detail: str) -> None:
    proc = namespace_user.kubectl("apply", "-f", "-", input=cache("attack", host(path)), check=False)
    assert proc.returncode != 0, proc.stdout
    assert f'admission webhook "{VALIDATOR}" denied the request: {FIELD}: Invalid value: "{path}": {detail}' \
        in proc.stderr, proc.stderr
    assert not exists(cluster, namespace, "datasetcache", "attack")  # nothing stored


@pytest.mark.parametrize("source", [host("/data/datasets/x"), host(ALLOWED_ROOT),
                                    {"persistentVolumeClaim": {"claimName": "datasets"}}],
                         ids=["below-root", "the-root", "pvc"])
def test_the_legitimate_neighbour_is_admitted(cluster: Any, namespace: str, namespace_user: Any, registered: None,
                                              source: dict[str, Any]) -> None:
    proc = namespace_user.kubectl("apply", "-f", "-", input=cache("shards", source))
    assert "Warning" not in proc.stderr, proc.stderr
    assert exists(cluster, namespace, "datasetcache", "shards")


# ---- 2. the controller, with no webhook in the way ----------------------------------------------------------------
def test_without_the_webhook_the_controller_builds_nothing_for_root_and_says_why(
        cluster: Any, namespace: str, namespace_user: Any, controllers: list[ControllerProcess], tmp_path: Path) -> None:
    # No webhook is registered for this namespace: the CRD alone accepts "/" (an absolute path).
    namespace_user.kubectl("apply", "-f", "-", input=cache("rootfs", host("/")))
    namespace_user.kubectl("apply", "-f", "-", input=cache("shards", host("/data/datasets/x")))
    start_controller(controllers, cluster, namespace, tmp_path, "sources", [ALLOWED_ROOT])

    # The neighbour proves the controller is reconciling this namespace: its agents exist.
    wait_for("the allowed cache's agent DaemonSet", lambda: exists(cluster, namespace, "daemonset", agent("shards")))
    condition = wait_for("status naming the refusal", lambda: refused(cluster, namespace, "rootfs"))
    assert condition["status"] == "False"
    assert condition["message"].startswith("no cache agents run for this source: ")
    assert f'{FIELD}: Invalid value: "/": must be one of, or lie below one of, the hostPath roots the cluster admin ' \
           f"allows: {ALLOWED_ROOT}" in condition["message"]
    warning = wait_for("a SourceNotAllowed event", lambda: events(cluster, namespace, "rootfs", "SourceNotAllowed"))
    assert warning[0]["type"] == "Warning" and '"/"' in warning[0]["note"]
    for kind in ("daemonset", "serviceaccount", "role", "rolebinding"):
        assert not exists(cluster, namespace, kind, agent("rootfs")), kind
    stored = json.loads(cluster.kubectl("get", "datasetcache", "rootfs", "-n", namespace, "-o", "json").stdout)
    assert (stored["status"]["nodesDesired"], stored["status"]["nodesReady"]) == (0, 0)


# ---- 3. the admin narrows the setting -----------------------------------------------------------------------------
def test_narrowing_the_roots_deletes_agents_built_under_the_old_setting(
        cluster: Any, namespace: str, namespace_user: Any, controllers: list[ControllerProcess], tmp_path: Path) -> None:
    namespace_user.kubectl("apply", "-f", "-", input=cache("legacy", host("/srv/datasets/imagenet")))
    namespace_user.kubectl("apply", "-f", "-", input=cache("shards", host("/data/datasets/x")))
    before = start_controller(controllers, cluster, namespace, tmp_path, "wide", [ALLOWED_ROOT, "/srv/datasets"])
    for name in ("legacy", "shards"):
        wait_for(f"{name}'s agent DaemonSet", lambda name=name: exists(cluster, namespace, "daemonset", agent(name)))
    assert before.terminate() == 0

    start_controller(controllers, cluster, namespace, tmp_path, "narrow", [ALLOWED_ROOT])
    wait_for("the legacy DaemonSet deleted", lambda: not exists(cluster, namespace, "daemonset", agent("legacy")))
    assert wait_for("legacy refused", lambda: refused(cluster, namespace, "legacy"))
    note = wait_for("the event", lambda: events(cluster, namespace, "legacy", "SourceNotAllowed"))[0]["note"]
    assert note.endswith(f"the agent DaemonSet {agent('legacy')} was deleted")
    assert exists(cluster, namespace, "daemonset", agent("shards"))  # still allowed: untouched


# ---- 4. the chart ----------------------------------------------------------------------------------------------
def chart_args(cluster: Any, *sets: str) -> dict[str, list[str]]:
    cmd = [str(cluster.bin_dir / "helm"), "template", "tg", str(REPO / "charts" / "trainguard"), "--namespace",
           "trainguard-system", "--kube-version", "1.35.4"]
    for s in sets:
        cmd += ["--set", s]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return {d["spec"]["template"]["spec"]["containers"][0]["name"]: d["spec"]["template"]["spec"]["containers"][0]["args"]
            for d in yaml.safe_load_all(out.stdout) if d and d.get("kind") == "Deployment"}


@pytest.mark.parametrize("sets, expected", [
    ((), DatasetCacheSources((), True)),
    (("datasetCache.allowedHostPathRoots={/data/datasets,/mnt/shared data}",
      "datasetCache.allowPersistentVolumeClaims=false"),
     DatasetCacheSources(("/data/datasets", "/mnt/shared data"), False)),
], ids=["defaults", "roots-no-pvc"])
def test_the_chart_gives_webhook_and_controller_the_same_setting(cluster: Any, sets: tuple[str, ...],
                                                                 expected: DatasetCacheSources) -> None:
    from trainguard.webhook.cli import build_parser

    args = chart_args(cluster, *sets)
    assert set(args) == {"webhook", "controller"}
    for container, argv in args.items():
        parsed = build_parser().parse_args(argv)
        assert dataset_cache_sources(parsed) == expected, (container, argv)
