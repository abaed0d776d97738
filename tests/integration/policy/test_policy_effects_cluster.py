"""Family 2: what a TrainJobPolicy does to ``kubectl apply`` of a TrainJob, through the real apiserver.

Kueue / KAI defaults (a user's label is kept when the policy lists it, denied otherwise: issue 22), Kueue-managed jobs created suspended, GPU topology hints in ONE runtimePatch
owned by ``trainguard.io/policy`` (stable across UPDATEs and re-creates), a job too large for any topology level
(Enforce: 403 with the numbers; Audit: admitted with the warning), limits naming field, value and policy, and the
namespace selector (a namespace outside it is untouched).
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass, field
from typing import Any

import pytest

from policy_cluster import (
    POLICY_MANAGER,
    TRAINJOB_VALIDATOR,
    Admitted,
    Denied,
    Kube,
    check,
    marker,
    patch,
    policy,
    runtime,
    trainjob,
    unique,
)

QUEUE = "kueue.x-k8s.io/queue-name"
PRIORITY = "kueue.x-k8s.io/priority-class"
KAI_QUEUE = "kai.scheduler/queue"
SCHEDULER_NAME = "trainguard.io/scheduler-name"
PREFERRED = "kueue.x-k8s.io/podset-preferred-topology"
REQUIRED = "kueue.x-k8s.io/podset-required-topology"
SLICE = "kueue.x-k8s.io/podset-slice-required-topology"
SLICE_SIZE = "kueue.x-k8s.io/podset-slice-size"
HOST, CLIQUE, BLOCK = "kubernetes.io/hostname", "nvidia.com/gpu.clique", "cloud.google.com/gce-topology-block"
LEVELS = [{"nodeLabel": HOST, "gpusPerDomain": 8}, {"nodeLabel": CLIQUE, "gpusPerDomain": 72},
          {"nodeLabel": BLOCK, "gpusPerDomain": 1024}]


def gpus(nodes: int, per_node: int, **extra: Any) -> dict[str, Any]:
    q = {"nvidia.com/gpu": str(per_node)}
    return {"numNodes": nodes, "resourcesPerNode": {"requests": dict(q), "limits": dict(q)}, **extra}


def policy_patches(obj: dict[str, Any]) -> list[dict[str, Any]]:
    return [p for p in obj["spec"].get("runtimePatches") or [] if p["manager"] == POLICY_MANAGER]


def pod_annotations(p: dict[str, Any], job: str = "node") -> dict[str, str]:
    for rj in p["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"]:
        if rj["name"] == job:
            return rj["template"]["spec"]["template"]["metadata"]["annotations"]
    raise AssertionError(f"no replicatedJob {job} in {p}")


@dataclass
class Setup:
    kube: Kube
    namespace: str
    runtime: str
    policy: str

    def probe(self) -> dict[str, Any]:
        return trainjob(unique("probe"), self.namespace, self.runtime)


def setup(kube: Kube, namespace: str, spec: dict[str, Any]) -> Setup:
    rt, name = unique("rt"), unique("pol")
    kube.create(runtime(rt, namespace))
    check(kube.apply(policy(name, namespace, spec)), Admitted())
    s = Setup(kube, namespace, rt, name)
    kube.wait_policy(s.probe(), name)
    return s


# --- scheduling defaults ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class LabelCase:
    id: str
    user_labels: dict[str, str]
    expected_labels: dict[str, str]
    suspend: bool | None  # expected spec.suspend (None: absent)
    user_suspend: bool | None = None


KUEUE_POLICY = {"scheduling": {"kueue": {"queueName": "team-q", "allowedQueueNames": ["mine"],
                                         "priorityClass": "high", "allowedPriorityClasses": ["low"]}}}
LABEL_CASES = [
    LabelCase("policy-sets-queue-and-priority", {}, {QUEUE: "team-q", PRIORITY: "high"}, True),
    LabelCase("user-queue-listed-is-kept", {QUEUE: "mine"}, {QUEUE: "mine", PRIORITY: "high"}, True),
    LabelCase("user-priority-listed-is-kept", {PRIORITY: "low"}, {QUEUE: "team-q", PRIORITY: "low"}, True),
    LabelCase("kueue-job-suspended-even-if-user-says-false", {}, {QUEUE: "team-q"}, True, user_suspend=False),
]


@pytest.mark.parametrize("case", LABEL_CASES, ids=lambda c: c.id)
def test_kueue_defaults(kube: Kube, namespace: str, case: LabelCase) -> None:
    s = setup(kube, namespace, KUEUE_POLICY)
    proc = kube.apply(trainjob(unique("tj"), namespace, s.runtime, labels=case.user_labels or None,
                               suspend=case.user_suspend))
    check(proc, Admitted())
    stored = json.loads(proc.stdout)
    labels = stored["metadata"]["labels"]
    for k, v in case.expected_labels.items():
        assert labels.get(k) == v, labels
    assert labels[marker(s.policy)] == "on"
    assert stored["spec"].get("suspend") is case.suspend
    assert policy_patches(stored) == []  # nothing to patch: no topology, KAI or pod defaults


def test_a_queue_the_policy_does_not_list_is_denied(kube: Kube, namespace: str) -> None:
    s = setup(kube, namespace, KUEUE_POLICY)
    proc = kube.apply(trainjob(unique("tj"), namespace, s.runtime, labels={PRIORITY: "highest"}))
    check(proc, Denied(TRAINJOB_VALIDATOR, (
        f'metadata.labels[{PRIORITY}]: Invalid value: "highest": TrainJobPolicy "{s.policy}" allows only '
        '["high", "low"] (spec.scheduling.kueue.priorityClass, spec.scheduling.kueue.allowedPriorityClasses)',)))


def test_kai_queue_and_scheduler_name(kube: Kube, namespace: str) -> None:
    s = setup(kube, namespace, {"scheduling": {"kai": {"queue": "research", "allowedQueues": ["mine"]},
                                               "schedulerName": "kai-scheduler",
                                               "allowedSchedulerNames": ["default-scheduler"]}})
    proc = kube.apply(trainjob(unique("tj"), namespace, s.runtime))
    check(proc, Admitted())
    stored = json.loads(proc.stdout)
    assert stored["metadata"]["labels"][KAI_QUEUE] == "research"
    assert stored["metadata"]["annotations"][SCHEDULER_NAME] == "kai-scheduler"
    assert QUEUE not in stored["metadata"]["labels"] and not stored["spec"].get("suspend")
    [own] = policy_patches(stored)
    assert own["trainingRuntimeSpec"]["template"]["metadata"]["labels"] == {KAI_QUEUE: "research"}
    assert own["time"].endswith("Z")
    # The user's own KAI queue label and scheduler annotation are kept where the policy lists them (issue 22).
    mine = kube.apply(trainjob(unique("tj"), namespace, s.runtime, labels={KAI_QUEUE: "mine"},
                               annotations={SCHEDULER_NAME: "default-scheduler"}))
    check(mine, Admitted())
    stored = json.loads(mine.stdout)
    assert stored["metadata"]["labels"][KAI_QUEUE] == "mine"
    assert stored["metadata"]["annotations"][SCHEDULER_NAME] == "default-scheduler"
    other = kube.apply(trainjob(unique("tj"), namespace, s.runtime, labels={KAI_QUEUE: "other"}))
    check(other, Denied(TRAINJOB_VALIDATOR, (f'metadata.labels[{KAI_QUEUE}]: Invalid value: "other": TrainJobPolicy '
                                             f'"{s.policy}" allows only ["research", "mine"]',)))


# --- topology hints ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class TopologyCase:
    id: str
    trainer: dict[str, Any]
    annotations: dict[str, str] | None  # expected pod annotations in the policy patch; None: no policy patch
    placement: str = "Preferred"


TOPOLOGY_CASES = [
    TopologyCase("one-gpu-one-host", gpus(1, 1), {PREFERRED: HOST}),
    TopologyCase("eight-gpus-one-host", gpus(1, 8), {PREFERRED: HOST}),
    TopologyCase("64-gpus-one-nvlink-domain", gpus(8, 8), {PREFERRED: CLIQUE}),
    TopologyCase("1024-gpus-across-cliques-in-a-block", gpus(128, 8), {PREFERRED: BLOCK, SLICE: CLIQUE, SLICE_SIZE: "8"}),
    TopologyCase("required-placement", gpus(2, 8), {REQUIRED: CLIQUE}, placement="Required"),
    TopologyCase("cpu-only-job-no-hint", {"numNodes": 2}, None),
]


@pytest.mark.parametrize("case", TOPOLOGY_CASES, ids=lambda c: c.id)
def test_topology_hints(kube: Kube, namespace: str, case: TopologyCase) -> None:
    s = setup(kube, namespace, {"topology": {"levels": LEVELS, "placement": case.placement}})
    proc = kube.apply(trainjob(unique("tj"), namespace, s.runtime, trainer=case.trainer))
    check(proc, Admitted())
    own = policy_patches(json.loads(proc.stdout))
    if case.annotations is None:
        assert own == []
        return
    assert len(own) == 1
    assert pod_annotations(own[0]) == case.annotations


@pytest.mark.parametrize("suspend", [True, False], ids=["suspended", "running"])
def test_topology_patch_is_one_entry_and_stable(kube: Kube, namespace: str, suspend: bool) -> None:
    """Create, re-apply the manifest with a changed label (kubectl's three-way JSON merge patch REPLACES the
    runtimePatches list with the manifest's, which lacks the policy's entry), replace with the stored object, and
    re-create a copy of the stored object: always exactly one trainguard.io/policy patch, identical, time included.
    For a running job the re-apply must not turn into "RuntimePatches can only be modified when suspended"."""
    s = setup(kube, namespace, {"topology": {"levels": LEVELS}})
    name = unique("tj")
    user_patch = patch("acme.io/tweaks", labels={"team": "a"})
    manifest = trainjob(name, namespace, s.runtime, trainer=gpus(8, 8), patches=[user_patch], suspend=suspend)
    check(first := kube.apply(manifest), Admitted())
    stored = json.loads(first.stdout)
    [own] = policy_patches(stored)
    assert [p["manager"] for p in stored["spec"]["runtimePatches"]] == [POLICY_MANAGER, "acme.io/tweaks"]
    assert pod_annotations(own) == {PREFERRED: CLIQUE}

    manifest["metadata"]["labels"] = {"round": "2"}  # a real UPDATE through both webhooks
    check(second := kube.apply(manifest), Admitted())
    after = json.loads(second.stdout)
    assert after["metadata"]["labels"]["round"] == "2"
    assert policy_patches(after) == [own]

    replaced = kube.cluster.kubectl("replace", "-o", "json", "-f", "-", input=json.dumps(after), check=False)
    check(replaced, Admitted())
    assert policy_patches(json.loads(replaced.stdout)) == [own]

    copy = json.loads(json.dumps(after))
    copy["metadata"] = {"name": unique("tj"), "namespace": namespace, "labels": after["metadata"]["labels"]}
    check(recreated := kube.apply(copy), Admitted())
    again = json.loads(recreated.stdout)
    assert policy_patches(again) == [own]  # CREATE rewrites its own entry in place, never duplicates it
    assert [p["manager"] for p in again["spec"]["runtimePatches"]] == [POLICY_MANAGER, "acme.io/tweaks"]


def test_topology_respects_a_patch_that_already_places_the_job(kube: Kube, namespace: str) -> None:
    s = setup(kube, namespace, {"topology": {"levels": LEVELS}})
    theirs = patch("kueue.x-k8s.io/manager", [{"name": "node", "template": {"spec": {"template": {
        "metadata": {"annotations": {REQUIRED: HOST}}}}}}])
    proc = kube.apply(trainjob(unique("tj"), namespace, s.runtime, trainer=gpus(8, 8), patches=[theirs], suspend=True))
    check(proc, Admitted())
    stored = json.loads(proc.stdout)
    assert policy_patches(stored) == []
    assert pod_annotations(stored["spec"]["runtimePatches"][0]) == {REQUIRED: HOST}


@pytest.mark.parametrize("mode", ["Enforce", "Audit"])
def test_job_too_large_for_any_level(kube: Kube, namespace: str, mode: str) -> None:
    s = setup(kube, namespace, {"mode": mode, "topology": {"levels": LEVELS}})
    reason = (f'spec.trainer: Invalid value: {{"numNodes":200}}: fits no topology level of TrainJobPolicy "{s.policy}": '
              f"the job needs 1600 GPUs (200 nodes x 8 GPUs) but the widest topology level {BLOCK} holds 1024 GPUs "
              "(128 such nodes) per domain")
    proc = kube.apply(trainjob(unique("tj"), namespace, s.runtime, trainer=gpus(200, 8)))
    if mode == "Enforce":
        check(proc, Denied(TRAINJOB_VALIDATOR, (reason,)))
    else:
        check(proc, Admitted((f'{reason} (TrainJobPolicy "{s.policy}" is in Audit mode: allowed)',)))
        assert policy_patches(json.loads(proc.stdout)) == []  # no level, no hint


# --- limits -----------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class LimitCase:
    id: str
    limits: dict[str, Any]
    job: dict[str, Any]          # kwargs of trainjob (besides names)
    message: str                 # the field error; {rt}/{p} replaced
    within: dict[str, Any] = field(default_factory=dict)  # a job inside the limit (admitted without warnings)


LIMIT_CASES = [
    LimitCase("max-nodes", {"maxNodes": 2}, {"trainer": {"numNodes": 3}},
              'spec.trainer.numNodes: Invalid value: 3: 3 nodes exceed maxNodes 2 of TrainJobPolicy "{p}"',
              {"trainer": {"numNodes": 2}}),
    LimitCase("max-gpus-per-node", {"maxGpusPerNode": 4}, {"trainer": gpus(1, 8)},
              'spec.trainer.resourcesPerNode: Invalid value: 8: 8 nvidia.com/gpu per node exceed maxGpusPerNode 4 of '
              'TrainJobPolicy "{p}"', {"trainer": gpus(2, 4)}),
    LimitCase("max-total-gpus", {"maxTotalGpus": 16}, {"trainer": gpus(4, 8)},
              'the job requests 32 nvidia.com/gpu in total (4 nodes x 8), more than maxTotalGpus 16 of TrainJobPolicy "{p}"',
              {"trainer": gpus(2, 8)}),
    LimitCase("allowed-runtimes", {"allowedRuntimes": ["approved-runtime"]}, {},
              'spec.runtimeRef.name: Invalid value: "{rt}": ClusterTrainingRuntime "{rt}" is not allowed by '
              'TrainJobPolicy "{p}"; allowed: ClusterTrainingRuntime/approved-runtime'),
    LimitCase("allowed-image-prefixes", {"allowedImagePrefixes": ["ghcr.io/acme/"]},
              {"trainer": {"image": "docker.io/evil/train:1"}},
              'spec.trainer.image: Invalid value: "docker.io/evil/train:1": image of container node in replicatedJob '
              'node must start with one of [ghcr.io/acme/] (TrainJobPolicy "{p}")',
              {"trainer": {"image": "ghcr.io/acme/train:2"}}),
    LimitCase("required-resource-requests", {"requiredResourceRequests": ["memory"]}, {"trainer": {"numNodes": 1}},
              "spec.trainer.resourcesPerNode.requests: Required value: trainer pods of replicatedJob node must request "
              'memory (TrainJobPolicy "{p}" requires it; set it here or in the runtime)',
              {"trainer": {"resourcesPerNode": {"requests": {"memory": "1Gi"}}}}),
]


@pytest.mark.parametrize("mode", ["Enforce", "Audit"])
@pytest.mark.parametrize("case", LIMIT_CASES, ids=lambda c: c.id)
def test_limits(kube: Kube, namespace: str, case: LimitCase, mode: str) -> None:
    s = setup(kube, namespace, {"mode": mode, "limits": case.limits})
    message = case.message.replace("{rt}", s.runtime).replace("{p}", s.policy)
    proc = kube.apply(trainjob(unique("tj"), namespace, s.runtime, **case.job))
    if mode == "Enforce":
        check(proc, Denied(TRAINJOB_VALIDATOR, (message,)))
        assert kube.cluster.kubectl("get", "trainjobs", "-n", namespace, "-o", "name").stdout == ""
    else:
        check(proc, Admitted((f'{message} (TrainJobPolicy "{s.policy}" is in Audit mode: allowed)',)))
    if case.within:
        check(kube.apply(trainjob(unique("ok"), namespace, s.runtime, **case.within)), Admitted())


# --- namespace selector -----------------------------------------------------------------------------------------


def _integration_conftest(request: pytest.FixtureRequest) -> Any:
    """tests/integration/conftest.py as loaded by pytest (its ``register``/``unregister`` helpers)."""
    for plugin in request.config.pluginmanager.get_plugins():
        path = str(getattr(plugin, "__file__", "") or "")
        if path.endswith("integration/conftest.py") and hasattr(plugin, "register"):
            return plugin
    raise AssertionError("tests/integration/conftest.py not loaded")


def test_namespace_outside_the_selector_is_untouched(kube: Kube, namespace: str, webhook_server,
                                                     request: pytest.FixtureRequest) -> None:
    s = setup(kube, namespace, {"scheduling": {"kueue": {"queueName": "team-q"}}, "limits": {"maxNodes": 1},
                                "topology": {"levels": LEVELS}})
    other = f"outside-{uuid.uuid4().hex[:8]}"
    kube.cluster.kubectl("create", "namespace", other)
    helpers = _integration_conftest(request)
    registered = helpers.register(kube.cluster, webhook_server, other)  # the webhook IS called there too
    try:
        big = dict(trainer=gpus(3, 8))
        check(kube.apply(trainjob(unique("tj"), namespace, s.runtime, **big)), Denied(
            TRAINJOB_VALIDATOR, (f'3 nodes exceed maxNodes 1 of TrainJobPolicy "{s.policy}"',)))
        proc = kube.apply(trainjob(unique("tj"), other, s.runtime, **big))
        check(proc, Admitted())
        stored = json.loads(proc.stdout)
        assert not (stored["metadata"].get("labels") or {}), stored["metadata"]
        assert "suspend" not in stored["spec"] or stored["spec"]["suspend"] is False
        assert policy_patches(stored) == []
        # The webhook did run in the other namespace: the upstream rules still apply there.
        check(kube.apply(trainjob(unique("tj"), other, "no-such-runtime"), wait_cache=False), Denied(
            TRAINJOB_VALIDATOR, ("specified clusterTrainingRuntime must be created before",)))
    finally:
        helpers.unregister(kube.cluster, registered)
        kube.cluster.kubectl("delete", "namespace", other, "--wait=false", check=False)
