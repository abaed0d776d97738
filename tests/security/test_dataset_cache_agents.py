"""Issue 22 parts 3 and 4: a namespace user cannot escalate through a DatasetCache's agents, nor stall them with a glob.

The attack: the user (who may create DatasetCaches in their namespace, and nothing on pods) writes a DatasetCache
with ``priorityClassName: system-node-critical``, ``tolerations: [{operator: Exists}]`` (or the control plane's
taint) and a ``memoryBudget`` of a terabyte. The controller, not the user, creates the agent DaemonSet, which copied
all three: node-critical pods on every node, the control plane included, each reserving the budget. Or a CRD-valid
glob with many ``*`` that the agent's backtracking matcher never finished.

The defence, as the cluster admin configures it here: no priority class, the taint key ``dedicated`` only, at most
64Gi (the defaults, plus one toleration key; Helm values ``datasetCache.*``, flags ``--dataset-cache-*`` of the
webhook and the controller).

1. At ``kubectl apply``, as the user, on CREATE and on UPDATE of an admitted cache: each is denied by the real
   ``trainguard webhook`` naming the field and what is allowed, and nothing is stored or changed; the legitimate
   neighbour (a ``dedicated`` toleration, a budget at the cap) is admitted.
2. With no webhook registered, the caches are stored, but the real ``trainguard controller`` creates no DaemonSet for
   them and says why (``Ready=False``, reason ``AgentSettingsNotAllowed``, a Warning event); the neighbour's agents
   get the admin's CPU and memory (limit = budget + overhead).
3. A glob with more than 8 ``*`` is refused by the CRD itself, webhook or not.
4. The chart passes the same setting to both, and the flags it renders parse into it.
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
from tests.security.test_dataset_cache_sources import agent, events, exists, ready_condition
from trainguard.webhook.dataset_cache_flags import dataset_cache_agents
from trainguard.webhook.policy.dataset_cache_agents import DatasetCacheAgents

ADMIN = ["--dataset-cache-allowed-toleration-keys=dedicated"]
VALIDATOR = "validator.datasetcache.trainguard.io"
REPO = Path(__file__).resolve().parents[2]
TOLERATIONS = "--dataset-cache-allowed-toleration-keys (Helm value datasetCache.allowedTolerationKeys)"

# (id, spec fields, the webhook's denial after 'denied the request: ')
ATTACKS = [
    ("node-critical", {"priorityClassName": "system-node-critical"},
     'spec.priorityClassName: Unsupported value: "system-node-critical": the cluster admin allows no priority class '
     "for cache agents (--dataset-cache-allowed-priority-classes (Helm value datasetCache.allowedPriorityClasses)); "
     "remove it"),
    ("tolerate-everything", {"tolerations": [{"operator": "Exists"}]},
     "spec.tolerations[0]: Forbidden: a toleration without a key tolerates every taint, the control plane's "
     f"included; cache agents may tolerate only the taint keys the cluster admin allows: dedicated ({TOLERATIONS})"),
    ("control-plane", {"tolerations": [{"key": "node-role.kubernetes.io/control-plane", "operator": "Exists",
                                        "effect": "NoSchedule"}]},
     'spec.tolerations[0].key: Unsupported value: "node-role.kubernetes.io/control-plane": cache agents may tolerate '
     f"only the taint keys the cluster admin allows: dedicated ({TOLERATIONS})"),
    ("budget", {"memoryBudget": "1Ti"},
     'spec.memoryBudget: Invalid value: "1Ti": must be at most 64Gi, the most node memory the cluster admin allows a '
     "DatasetCache (--dataset-cache-max-memory-budget (Helm value datasetCache.maxMemoryBudget))"),
]
NEIGHBOUR = {"memoryBudget": "64Gi",
             "tolerations": [{"key": "dedicated", "operator": "Equal", "value": "ml", "effect": "NoSchedule"}]}


def cache(name: str, shards: str = "*.arrow", **spec: Any) -> str:
    return json.dumps({"apiVersion": "trainguard.io/v1alpha1", "kind": "DatasetCache", "metadata": {"name": name},
                       "spec": {"source": {"persistentVolumeClaim": {"claimName": "datasets"}, "shards": shards},
                                "memoryBudget": "1Gi", **spec}})


def stored_spec(cluster: Any, namespace: str, name: str) -> dict[str, Any]:
    return json.loads(cluster.kubectl("get", "datasetcache", name, "-n", namespace, "-o", "json").stdout)["spec"]


# ---- fixtures ---------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def admin_webhook(cluster: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[WebhookProcess]:
    server = start_webhook(cluster, tmp_path_factory.mktemp("dataset-cache-agents-webhook"), extra=ADMIN)
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


# ---- 1. at kubectl apply ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("spec, detail", [a[1:] for a in ATTACKS], ids=[a[0] for a in ATTACKS])
def test_create_is_denied_naming_the_field(cluster: Any, namespace: str, namespace_user: Any, registered: None,
                                           spec: dict[str, Any], detail: str) -> None:
    proc = namespace_user.kubectl("apply", "-f", "-", input=cache("attack", **spec), check=False)
    assert proc.returncode != 0, proc.stdout
    assert f'admission webhook "{VALIDATOR}" denied the request: {detail}' in proc.stderr, proc.stderr
    assert not exists(cluster, namespace, "datasetcache", "attack")  # nothing stored


@pytest.mark.parametrize("spec, detail", [a[1:] for a in ATTACKS], ids=[a[0] for a in ATTACKS])
def test_update_is_denied_naming_the_field(cluster: Any, namespace: str, namespace_user: Any, registered: None,
                                           spec: dict[str, Any], detail: str) -> None:
    namespace_user.kubectl("apply", "-f", "-", input=cache("shards"))
    before = stored_spec(cluster, namespace, "shards")
    proc = namespace_user.kubectl("apply", "-f", "-", input=cache("shards", **spec), check=False)
    assert proc.returncode != 0, proc.stdout
    assert f'admission webhook "{VALIDATOR}" denied the request: {detail}' in proc.stderr, proc.stderr
    assert stored_spec(cluster, namespace, "shards") == before  # nothing changed


def test_the_legitimate_neighbour_is_admitted(cluster: Any, namespace: str, namespace_user: Any,
                                              registered: None) -> None:
    proc = namespace_user.kubectl("apply", "-f", "-", input=cache("shards", **NEIGHBOUR))
    assert "Warning" not in proc.stderr, proc.stderr
    assert stored_spec(cluster, namespace, "shards")["tolerations"] == NEIGHBOUR["tolerations"]


# ---- 2. the controller, with no webhook in the way ----------------------------------------------------------------
def test_without_the_webhook_the_controller_builds_nothing_and_says_why(
        cluster: Any, namespace: str, namespace_user: Any, controllers: list[ControllerProcess], tmp_path: Path) -> None:
    # No webhook is registered for this namespace: the CRD alone accepts all of these.
    for name, spec, _ in ATTACKS:
        namespace_user.kubectl("apply", "-f", "-", input=cache(name, **spec))
    namespace_user.kubectl("apply", "-f", "-", input=cache("shards", **NEIGHBOUR))
    proc = ControllerProcess(cluster.kubeconfig, namespace, "agents", tmp_path,
                             extra=[*ADMIN, "--cache-agent-cpu-limit=2", "--cache-agent-memory-overhead=256Mi"])
    controllers.append(proc.start())

    # The neighbour proves the controller is reconciling this namespace; its agents get the admin's resources.
    daemonset = wait_for("the allowed cache's agent DaemonSet", lambda: json.loads(cluster.kubectl(
        "get", "daemonset", agent("shards"), "-n", namespace, "-o", "json", check=False).stdout or "null"))
    pod = daemonset["spec"]["template"]["spec"]
    memory = str(64 * 2**30 + 256 * 2**20)  # budget + overhead: the page cache is charged to the agent's cgroup
    assert pod["containers"][0]["resources"] == {"requests": {"cpu": "100m", "memory": memory},
                                                 "limits": {"cpu": "2", "memory": memory}}
    assert {t["key"] for t in pod["tolerations"]} == {"nvidia.com/gpu", "dedicated"}
    assert "priorityClassName" not in pod

    for name, _, detail in ATTACKS:
        condition = wait_for(f"{name}'s refusal in status", lambda name=name: (
            c if (c := ready_condition(cluster, namespace, name)) and c.get("reason") == "AgentSettingsNotAllowed"
            else None))
        assert condition["status"] == "False"
        assert condition["message"] == f"no cache agents run with these agent settings: {detail}"
        warning = wait_for(f"{name}'s event", lambda name=name: events(cluster, namespace, name,
                                                                        "AgentSettingsNotAllowed"))
        assert warning[0]["type"] == "Warning" and detail in warning[0]["note"]
        assert not exists(cluster, namespace, "daemonset", agent(name)), name


# ---- 3. the glob ---------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("with_webhook", [False, True], ids=["crd-alone", "webhook-registered"])
def test_a_glob_with_more_than_8_stars_is_refused(cluster: Any, namespace: str, namespace_user: Any,
                                                  admin_webhook: WebhookProcess, with_webhook: bool) -> None:
    reg = register(cluster, admin_webhook, namespace) if with_webhook else None
    try:
        proc = namespace_user.kubectl("apply", "-f", "-", input=cache("glob", shards="*a*a*a*a*a*a*a*a*b"),
                                      check=False)
        assert proc.returncode != 0, proc.stdout
        assert "spec.source.shards: Invalid value: \"*a*a*a*a*a*a*a*a*b\": shards must contain at most 8 '*' " \
               "characters" in proc.stderr, proc.stderr
        assert not exists(cluster, namespace, "datasetcache", "glob")
        # Eight, the bound, is admitted: the agent matches it in linear time (tests/unit/cache/test_shard_glob.py).
        namespace_user.kubectl("apply", "-f", "-", input=cache("glob", shards="*a*a*a*a*a*a*a*b"))
    finally:
        if reg is not None:
            unregister(cluster, reg)


# ---- 4. the chart ----------------------------------------------------------------------------------------------
def chart_args(cluster: Any, *flags: str) -> dict[str, list[str]]:
    cmd = [str(cluster.bin_dir / "helm"), "template", "tg", str(REPO / "charts" / "trainguard"), "--namespace",
           "trainguard-system", "--kube-version", "1.35.4", *flags]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return {d["spec"]["template"]["spec"]["containers"][0]["name"]: d["spec"]["template"]["spec"]["containers"][0]["args"]
            for d in yaml.safe_load_all(out.stdout) if d and d.get("kind") == "Deployment"}


@pytest.mark.parametrize("flags, expected", [
    ((), DatasetCacheAgents()),
    (("--set", "datasetCache.allowedPriorityClasses={dataset-cache}",
      "--set", "datasetCache.allowedTolerationKeys={dedicated,pool}",
      "--set-json", "datasetCache.allowedNodeSelectorKeys=[]", "--set", "datasetCache.requiredNodeSelector.pool=gpu",
      "--set", "datasetCache.maxMemoryBudget=16Gi"),
     DatasetCacheAgents.of(priority_classes=["dataset-cache"], toleration_keys=["dedicated", "pool"],
                           node_selector_keys=[], required_node_selector={"pool": "gpu"}, max_memory_budget="16Gi")),
], ids=["defaults", "admin"])
def test_the_chart_gives_webhook_and_controller_the_same_setting(cluster: Any, flags: tuple[str, ...],
                                                                 expected: DatasetCacheAgents) -> None:
    from trainguard.controller.reconcile.cache_daemonset import AgentResources
    from trainguard.controller.reconcile.main import agent_resources
    from trainguard.webhook.cli import build_parser

    args = chart_args(cluster, *flags, "--set", "cacheAgent.resources.cpuLimit=3")
    assert set(args) == {"webhook", "controller"}
    for container, argv in args.items():
        parsed = build_parser().parse_args(argv)
        assert dataset_cache_agents(parsed) == expected, (container, argv)
    controller = build_parser().parse_args(args["controller"])
    assert agent_resources(controller) == AgentResources(cpu_request="100m", cpu_limit="3", memory_overhead="128Mi")
