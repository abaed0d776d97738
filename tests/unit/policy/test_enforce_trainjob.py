"""``enforce_trainjob``: the controller's "would an Enforce policy deny this TrainJob now?" check, against the runtime
the controller passes (not the snapshot's live one), sharing its implementation with the validating webhook."""

from __future__ import annotations

import pytest

from policy_helpers import GPU_LEVELS, NOW, policy, rjob, runtime, trainjob
from trainguard.webhook.policy import enforce_trainjob, validate_trainjob
from trainguard.webhook.policy.verdict import AdmissionInput, ClusterSnapshot

GPU = {"limits": {"nvidia.com/gpu": 8}, "requests": {"cpu": "16"}}
QUEUE = "kueue.x-k8s.io/queue-name"
PRIORITY = "kueue.x-k8s.io/priority-class"
KAI = "kai.scheduler/queue"
GPU_NS = {"team-a": {"trainguard.io/tier": "gpu"}}
TIER = {"namespaceSelector": {"matchLabels": {"trainguard.io/tier": "gpu"}}}


def snap(*policies, **kw) -> ClusterSnapshot:
    return ClusterSnapshot(policies={p["metadata"]["name"]: p for p in policies}, namespace_labels=GPU_NS, **kw)


LABELS = {QUEUE: "team-gpu", PRIORITY: "standard"}
KUEUE = {"kueue": {"queueName": "team-gpu", "priorityClass": "standard"}}

CASES = [
    # (case, policy spec, trainjob kwargs, runtime, expected message prefix or None, reason)
    ("within limits", dict(limits={"maxNodes": 4}), dict(trainer={"numNodes": 4, "resourcesPerNode": GPU}),
     runtime(), None, None),
    ("too many nodes", dict(limits={"maxNodes": 4}), dict(trainer={"numNodes": 100, "resourcesPerNode": GPU}),
     runtime(), 'spec.trainer.numNodes: Invalid value: 100: 100 nodes exceed maxNodes 4 of TrainJobPolicy "p"',
     "PolicyLimits"),
    ("foreign image in the runtime passed in", dict(limits={"allowedImagePrefixes": ["ghcr.io/acme/"]}), {},
     runtime(rjob("node", ancestor="trainer")), 'spec.runtimeRef: Invalid value: "python:3.12": image of container',
     "PolicyLimits"),
    ("fits no topology level", dict(topology={"levels": GPU_LEVELS[:1], "placement": "Required"}),
     dict(trainer={"numNodes": 2, "resourcesPerNode": GPU}), runtime(),
     'spec.trainer: Invalid value: {"numNodes":2}: fits no topology level of TrainJobPolicy "p"', "Topology"),
    ("queue labels present", dict(scheduling=KUEUE), dict(labels=LABELS), runtime(), None, None),
    ("queue label missing", dict(scheduling=KUEUE), dict(labels={PRIORITY: "standard"}), runtime(),
     f'metadata.labels[{QUEUE}]: Required value: TrainJobPolicy "p" schedules this job through \'team-gpu\'',
     "PolicyScheduling"),
    ("both Kueue labels missing", dict(scheduling=KUEUE), {}, runtime(),
     f"[metadata.labels[{QUEUE}]: Required value", "PolicyScheduling"),
    ("KAI queue missing", dict(scheduling={"kai": {"queue": "research"}}), {}, runtime(),
     f"metadata.labels[{KAI}]: Required value", "PolicyScheduling"),
    # Issue 22: the controller refuses what admission would deny, pinned values included.
    ("a user's own queue value is refused", dict(scheduling=KUEUE), dict(labels={QUEUE: "mine", PRIORITY: "standard"}),
     runtime(), f'metadata.labels[{QUEUE}]: Invalid value: "mine": TrainJobPolicy "p" allows only ["team-gpu"]',
     "PolicyScheduling"),
    ("an allowed alternative queue is accepted",
     dict(scheduling={"kueue": dict(KUEUE["kueue"], allowedQueueNames=["mine"])}),
     dict(labels={QUEUE: "mine", PRIORITY: "standard"}), runtime(), None, None),
    ("a runtime's own scheduler is refused", dict(scheduling={"schedulerName": "kai-scheduler"}),
     dict(annotations={"trainguard.io/scheduler-name": "kai-scheduler"}),
     runtime(rjob("node", ancestor="trainer", schedulerName="other")),
     'spec.runtimeRef: Invalid value: "other": ClusterTrainingRuntime "torch-distributed" sets it at '
     "spec.template.spec.replicatedJobs[node].template.spec.template.spec.schedulerName", "PolicyScheduling"),
    ("pods without the pinned scheduler are refused", dict(scheduling={"schedulerName": "kai-scheduler"}), {},
     runtime(), "metadata.annotations[trainguard.io/scheduler-name]: Required value: TrainJobPolicy \"p\" allows "
     'only ["kai-scheduler"] (spec.scheduling.schedulerName): the pods of replicatedJob node would run with the '
     "default scheduler", "PolicyScheduling"),
    ("Audit finds but does not enforce", dict(mode="Audit", limits={"maxNodes": 1}, scheduling=KUEUE),
     dict(trainer={"numNodes": 100}), runtime(), None, None),
]


@pytest.mark.parametrize(("case", "spec", "job", "rt", "message", "reason"), CASES, ids=[c[0] for c in CASES])
def test_enforce_trainjob(case, spec, job, rt, message, reason):
    v = enforce_trainjob(trainjob(**job), rt, "team-a", snap(policy("p", selector=TIER, **spec)))
    assert v.allowed is (message is None), v.message
    if message:
        assert v.message.startswith(message), v.message
        assert v.reason == reason
    assert v.warnings == ()


def test_policy_not_selecting_the_namespace_does_not_apply():
    v = enforce_trainjob(trainjob(trainer={"numNodes": 100}), runtime(), "other",
                         snap(policy("p", selector=TIER, limits={"maxNodes": 1})))
    assert v.allowed


def test_it_judges_the_runtime_passed_in_not_the_live_one():
    """The controller builds from its runtime snapshot: an admin loosening the live runtime changes nothing."""
    foreign = runtime(rjob("node", ancestor="trainer"))  # image python:3.12
    live = {"torch-distributed": runtime()}
    p = policy("p", selector=TIER, limits={"allowedImagePrefixes": ["python:"]})
    assert enforce_trainjob(trainjob(), foreign, "team-a", snap(p, cluster_training_runtimes=live)).allowed
    q = policy("p", selector=TIER, limits={"allowedImagePrefixes": ["ghcr.io/acme/"]})
    assert not enforce_trainjob(trainjob(), foreign, "team-a", snap(q, cluster_training_runtimes=live)).allowed


def test_unbuildable_job_is_refused_when_a_policy_limits_it():
    # An MPI implementation the framework cannot build (the webhook denies it first; the controller's snapshot
    # might still carry it).
    broken = runtime(rjob("launcher", ancestor="trainer"), rjob("node", ancestor="trainer"),
                     ml_policy={"numNodes": 1, "mpi": {"mpiImplementation": "Intel"}})
    v = enforce_trainjob(trainjob(), broken, "team-a", snap(policy("p", selector=TIER, limits={"maxNodes": 4})))
    assert not v.allowed and "cannot be built from this runtime" in v.message
    assert enforce_trainjob(trainjob(), broken, "team-a", snap(policy("p", selector=TIER, scheduling=KUEUE))).message \
        .startswith(f"[metadata.labels[{QUEUE}]")


def test_the_webhook_and_the_controller_agree_on_create():
    """One implementation: the validating webhook's policy denial on CREATE is exactly enforce_trainjob's."""
    p = policy("p", selector=TIER, limits={"maxNodes": 4, "allowedImagePrefixes": ["ghcr.io/acme/"]}, scheduling=KUEUE)
    rt = runtime()
    job = trainjob(trainer={"numNodes": 100, "image": "docker.io/evil:1"})
    s = snap(p, cluster_training_runtimes={"torch-distributed": rt})
    webhook = validate_trainjob(AdmissionInput("CREATE", job, None, NOW), s)
    controller = enforce_trainjob(job, rt, "team-a", s)
    assert not webhook.allowed and (webhook.message, webhook.reason) == (controller.message, controller.reason)
