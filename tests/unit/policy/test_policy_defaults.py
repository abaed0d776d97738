"""The mutating pipeline's policy effects: Kueue, KAI, defaults and the one ``trainguard.io/policy`` runtimePatch."""

from __future__ import annotations

import copy

import pytest

from policy_helpers import GPU_LEVELS, NOW, policy, rjob, runtime, trainjob
from trainguard.webhook.policy.defaults import POLICY_MANAGER
from trainguard.webhook.policy.pipeline import mutate_trainjob
from trainguard.webhook.policy.verdict import AdmissionInput, ClusterSnapshot

QUEUE = "kueue.x-k8s.io/queue-name"
PRIORITY = "kueue.x-k8s.io/priority-class"
GPU8 = {"numNodes": 8, "resourcesPerNode": {"limits": {"nvidia.com/gpu": 8}}}
TOPOLOGY = {"levels": GPU_LEVELS, "placement": "Required"}


def snap(*policies, rt=None, namespaces=None):
    rt = rt or runtime()
    return ClusterSnapshot(cluster_training_runtimes={rt["metadata"]["name"]: rt},
                           policies={p["metadata"]["name"]: p for p in policies}, namespace_labels=namespaces or {})


def mutate(obj, snapshot, operation="CREATE", old=None):
    verdict = mutate_trainjob(AdmissionInput(operation, obj, old, NOW), snapshot)
    assert verdict.allowed
    return verdict.obj


def labels(obj):
    return obj["metadata"].get("labels") or {}


def policy_patches(obj):
    return [p for p in obj["spec"].get("runtimePatches") or [] if p["manager"] == POLICY_MANAGER]


def pod_annotations(patch, job="node"):
    rj = next(r for r in patch["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"] if r["name"] == job)
    return rj["template"]["spec"]["template"]["metadata"]["annotations"]


KUEUE = policy("kueue", scheduling={"kueue": {"queueName": "team-q", "priorityClass": "high"}})


@pytest.mark.parametrize(
    ("case", "job", "rt", "expected_labels", "suspended"),
    [
        ("policy sets both labels and suspends", trainjob(), None, {QUEUE: "team-q", PRIORITY: "high"}, True),
        ("user labels win", trainjob(labels={QUEUE: "mine", PRIORITY: "low"}), None, {QUEUE: "mine", PRIORITY: "low"}, True),
        ("runtime declares a default the policy lacks",
         trainjob(), runtime(annotations={PRIORITY: "from-runtime"}), {QUEUE: "team-q", PRIORITY: "high"}, True),
    ],
)
def test_kueue_labels(case, job, rt, expected_labels, suspended):
    out = mutate(job, snap(KUEUE, rt=rt))
    assert labels(out) == expected_labels, case
    assert out["spec"].get("suspend") is suspended


def test_runtime_declared_kueue_defaults_apply_without_a_policy_value():
    rt = runtime(labels={QUEUE: "rt-queue"})
    out = mutate(trainjob(), snap(policy("other", defaults={"activeDeadlineSeconds": 60}), rt=rt))
    assert labels(out)[QUEUE] == "rt-queue"
    assert out["spec"]["suspend"] is True and out["spec"]["activeDeadlineSeconds"] == 60


def test_not_kueue_managed_is_not_suspended():
    out = mutate(trainjob(), snap(policy("kai", scheduling={"kai": {"queue": "research"}, "schedulerName": "kai-scheduler"})))
    assert "suspend" not in out["spec"]
    assert labels(out) == {"kai.scheduler/queue": "research"}
    assert out["metadata"]["annotations"] == {"trainguard.io/scheduler-name": "kai-scheduler"}


def test_scheduler_name_not_recorded_when_runtime_sets_one():
    rt = runtime(rjob("node", ancestor="trainer", schedulerName="volcano"))
    out = mutate(trainjob(), snap(policy("kai", scheduling={"schedulerName": "kai-scheduler"}), rt=rt))
    assert "annotations" not in out["metadata"]


def test_no_matching_policy_changes_nothing_but_times():
    job = trainjob(trainer=GPU8)
    p = policy("elsewhere", selector={"namespaceSelector": {"matchLabels": {"team": "b"}}}, topology=TOPOLOGY)
    assert mutate(job, snap(p, namespaces={"team-a": {"team": "a"}})) == job


def test_topology_patch_written_once_first_and_rewritten_in_place():
    user_patch = {"manager": "acme.io/platform", "trainingRuntimeSpec": {"template": {"spec": {"replicatedJobs": [
        {"name": "node", "template": {"spec": {"template": {"spec": {"nodeSelector": {"pool": "a"}}}}}}]}}}}
    out = mutate(trainjob(trainer=GPU8, patches=[user_patch]), snap(policy("topo", topology=TOPOLOGY)))
    managers = [p["manager"] for p in out["spec"]["runtimePatches"]]
    assert managers == [POLICY_MANAGER, "acme.io/platform"]
    assert pod_annotations(out["spec"]["runtimePatches"][0]) == {
        "kueue.x-k8s.io/podset-required-topology": "nvidia.com/gpu.clique"}
    # A stale policy entry in the middle is rewritten where it is, not duplicated.
    stale = copy.deepcopy(out)
    stale["spec"]["runtimePatches"].reverse()
    stale["spec"]["runtimePatches"][1]["trainingRuntimeSpec"] = {"template": {"metadata": {"labels": {"x": "y"}}}}
    again = mutate(stale, snap(policy("topo", topology=TOPOLOGY)))
    assert [p["manager"] for p in again["spec"]["runtimePatches"]] == ["acme.io/platform", POLICY_MANAGER]
    assert len(policy_patches(again)) == 1
    assert pod_annotations(policy_patches(again)[0])["kueue.x-k8s.io/podset-required-topology"] == "nvidia.com/gpu.clique"


PREFERRED_HOST = {"kueue.x-k8s.io/podset-preferred-topology": "kubernetes.io/hostname"}
MULTI_LAYER = {"kueue.x-k8s.io/podset-slice-required-topology-constraints":
               '[{"topology": "nvidia.com/gpu.clique", "size": 4}, {"topology": "kubernetes.io/hostname", "size": 2}]'}


@pytest.mark.parametrize(
    ("case", "where", "ann"),
    [
        ("user patch declares Kueue topology", "patch", PREFERRED_HOST),
        ("runtime declares Kueue topology", "runtime", PREFERRED_HOST),
        # Kueue 0.17 multi-layer slices: its webhook denies them beside podset-slice-required-topology / -size (found
        # by tests/e2e/test_kueue_topology.py against the real Kueue), so trainguard must not add its own.
        ("user patch declares Kueue multi-layer slices", "patch", MULTI_LAYER),
        ("runtime declares Kueue multi-layer slices", "runtime", MULTI_LAYER),
    ],
)
def test_declared_topology_wins(case, where, ann):
    rt, patches = runtime(), None
    if where == "runtime":
        rt = runtime({"name": "node", "template": {"metadata": {"labels": {
            "trainer.kubeflow.org/trainjob-ancestor-step": "trainer"}}, "spec": {"template": {
                "metadata": {"annotations": ann}, "spec": {"containers": [{"name": "node", "image": "x"}]}}}}})
    else:
        patches = [{"manager": "acme.io/user", "trainingRuntimeSpec": {"template": {"spec": {"replicatedJobs": [
            {"name": "node", "template": {"spec": {"template": {"metadata": {"annotations": ann}}}}}]}}}}]
    out = mutate(trainjob(trainer=GPU8, patches=patches), snap(policy("topo", topology=TOPOLOGY), rt=rt))
    assert policy_patches(out) == [], case


def test_kueue_manager_patch_is_never_touched():
    kueue_patch = {"manager": "kueue.x-k8s.io/manager", "time": "2026-01-01T00:00:00Z"}
    out = mutate(trainjob(trainer=GPU8, patches=[kueue_patch]), snap(KUEUE, policy("topo", topology=TOPOLOGY)))
    assert out["spec"]["runtimePatches"][-1] == kueue_patch


def test_tolerations_and_node_selector_merge_with_runtime():
    rt = runtime(rjob("node", ancestor="trainer", tolerations=[{"key": "a", "operator": "Exists"}],
                      nodeSelector={"pool": "rt"}))
    p = policy("d", defaults={"tolerations": [{"key": "gpu", "operator": "Exists"}],
                              "nodeSelector": {"pool": "policy", "zone": "z1"}})
    out = mutate(trainjob(), snap(p, rt=rt))
    spec = policy_patches(out)[0]["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]
    assert spec == {"nodeSelector": {"zone": "z1"},
                    "tolerations": [{"key": "a", "operator": "Exists"}, {"key": "gpu", "operator": "Exists"}]}


def test_policy_order_is_priority_then_name_not_list_order():
    low = policy("a-low", priority=1, scheduling={"kueue": {"queueName": "low"}})
    high = policy("z-high", priority=5, scheduling={"kueue": {"queueName": "high"}})
    tie = policy("b-tie", priority=5, scheduling={"kueue": {"queueName": "tie"}})
    for order in ([low, high, tie], [tie, low, high], [high, tie, low]):
        assert labels(mutate(trainjob(), snap(*order)))[QUEUE] == "tie"  # priority 5, and "b-tie" < "z-high"


def test_update_applies_no_policy_effects():
    old = mutate(trainjob(trainer=GPU8), snap())
    new = copy.deepcopy(old)
    new["metadata"]["labels"] = {"x": "y"}
    out = mutate(new, snap(KUEUE, policy("topo", topology=TOPOLOGY)), "UPDATE", old)
    assert out == new


def test_runtime_selector_and_trainjob_selector():
    torch_only = policy("t", selector={"runtimeSelector": {"labelSelector": {"matchLabels": {
        "trainer.kubeflow.org/framework": "torch"}}}}, scheduling={"kueue": {"queueName": "q"}})
    labelled = runtime(labels={"trainer.kubeflow.org/framework": "torch"})
    assert QUEUE in labels(mutate(trainjob(), snap(torch_only, rt=labelled)))
    assert QUEUE not in labels(mutate(trainjob(), snap(torch_only)))
    by_label = policy("l", selector={"trainJobSelector": {"matchLabels": {"tier": "prod"}}},
                      scheduling={"kueue": {"queueName": "q"}})
    assert labels(mutate(trainjob(labels={"tier": "prod"}), snap(by_label)))[QUEUE] == "q"
    assert QUEUE not in labels(mutate(trainjob(), snap(by_label)))


@pytest.mark.parametrize("suspend", [True, False])
def test_update_that_drops_the_policy_patch_gets_it_back(suspend):
    """kubectl apply of the user's manifest replaces runtimePatches with the manifest's list (no policy entry):
    the old entry comes back unchanged, so the decision stays and a running job's update is not a patch change."""
    from trainguard.webhook.policy.pipeline import validate_trainjob

    user = {"manager": "acme.io/tweaks", "trainingRuntimeSpec": {"template": {"metadata": {"labels": {"t": "a"}}}}}
    snapshot = snap(policy("topo", topology=TOPOLOGY))
    old = mutate(trainjob(trainer=GPU8, patches=[user], suspend=suspend), snapshot)
    [own] = policy_patches(old)
    new = copy.deepcopy(old)
    new["metadata"]["labels"] = {"x": "y"}
    new["spec"]["runtimePatches"] = [dict(user, time=old["spec"]["runtimePatches"][1]["time"])]
    out = mutate(new, snapshot, "UPDATE", old)
    assert out["spec"]["runtimePatches"] == old["spec"]["runtimePatches"]
    assert policy_patches(out) == [own]
    assert validate_trainjob(AdmissionInput("UPDATE", out, old, NOW), snapshot).allowed
    # Without the fix the same update was refused for a running job.
    if not suspend:
        assert not validate_trainjob(AdmissionInput("UPDATE", new, old, NOW), snapshot).allowed
    # An update that keeps (or edits) the entry is left alone.
    edited = copy.deepcopy(old)
    edited["spec"]["runtimePatches"][0]["trainingRuntimeSpec"]["template"]["metadata"] = {"labels": {"e": "1"}}
    assert policy_patches(mutate(copy.deepcopy(edited), snapshot, "UPDATE", old))[0]["trainingRuntimeSpec"] == \
        edited["spec"]["runtimePatches"][0]["trainingRuntimeSpec"]
