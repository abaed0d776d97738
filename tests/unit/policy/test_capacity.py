"""Capacity at the door (``trainguard.webhook.policy.capacity``): a TrainJob its Kueue ClusterQueue could never admit
is denied under Enforce and warned under Audit at apply, with the numbers; never a job Kueue might admit."""

from __future__ import annotations

import pytest

from policy_helpers import NOW, policy, runtime, trainjob
from trainguard.webhook.policy.pipeline import mutate_trainjob, validate_trainjob
from trainguard.webhook.policy.verdict import AdmissionInput, ClusterSnapshot

QUEUE = "kueue.x-k8s.io/queue-name"
SELECT_ALL = {"namespaceSelector": {}}


def queue_policy(mode: str = "Enforce", queue: str = "team-gpu", name: str = "queues", **spec) -> dict:
    return policy(name, mode=mode, selector=SELECT_ALL, scheduling={"kueue": {"queueName": queue}}, **spec)


def quotas(cohort: str | None = None, **flavors: tuple) -> dict:
    """flavor=(nominal, borrowingLimit or None) of nvidia.com/gpu."""
    return {"cohort": cohort, "flavors": {f: {"nvidia.com/gpu": q, "cpu": ("512", None)} for f, q in flavors.items()}}


def snap(*policies: dict, cluster_queue: dict | None = None, local_queue: str = "team-gpu") -> ClusterSnapshot:
    rt = runtime()
    return ClusterSnapshot(
        cluster_training_runtimes={rt["metadata"]["name"]: rt},
        policies={p["metadata"]["name"]: p for p in policies}, namespace_labels={"team-a": {}},
        kueue_local_queues={("team-a", local_queue): "cq-gpu"},
        kueue_quotas={"cq-gpu": cluster_queue} if cluster_queue is not None else {})


def gpu_trainjob(nodes: int, gpus: int, **kw) -> dict:
    return trainjob(trainer={"numNodes": nodes, "resourcesPerNode": {"limits": {"nvidia.com/gpu": str(gpus)}}}, **kw)


def apply(snapshot: ClusterSnapshot, obj: dict, operation: str = "CREATE", old: dict | None = None):
    """The two webhooks as the apiserver calls them: mutate (the policy sets the queue label), then validate."""
    mutated = mutate_trainjob(AdmissionInput(operation, obj, old, NOW, namespace="team-a"), snapshot)
    assert mutated.allowed, mutated.message
    stored = mutated.obj or obj
    return validate_trainjob(AdmissionInput(operation, stored, old, NOW, namespace="team-a"), snapshot), stored


@pytest.mark.parametrize(("case", "cq", "nodes", "gpus", "fits"), [
    ("64 GPUs against 48", quotas(h100=("48", None)), 8, 8, False),
    ("48 against 48", quotas(h100=("48", None)), 6, 8, True),
    ("borrowing counts", quotas("org", h100=("48", "16")), 8, 8, True),
    ("borrowing counts, still short", quotas("org", h100=("48", "8")), 8, 8, False),
    ("unbounded borrowing in a cohort: Kueue might admit it", quotas("org", h100=("48", None)), 8, 8, True),
    ("one pod set cannot span two flavors", quotas(h100=("32", None), a100=("32", None)), 8, 8, False),
    ("the largest flavor holds it", quotas(h100=("32", None), a100=("64", None)), 8, 8, True),
    ("no GPU quota at all", {"cohort": None, "flavors": {"cpu-only": {"cpu": ("64", None)}}}, 1, 1, False),
    ("a fraction of a GPU holds none", quotas(h100=("1500m", None)), 1, 2, False),
    ("an unreadable quota is Kueue's to report", quotas(h100=("many", None)), 8, 8, True),
    ("a CPU job is not counted", quotas(h100=("0", None)), 4, 0, True),
], ids=lambda v: v if isinstance(v, str) else None)
def test_enforce_denies_only_what_kueue_could_never_admit(case, cq, nodes, gpus, fits):
    verdict, stored = apply(snap(queue_policy(), cluster_queue=cq), gpu_trainjob(nodes, gpus))
    assert stored["metadata"]["labels"][QUEUE] == "team-gpu"
    assert verdict.allowed is fits, (case, verdict.message)
    if not fits:
        assert verdict.reason == "QueueCapacity"
        assert verdict.message.startswith("admission webhook") is False
        assert "spec.trainer: Invalid value:" in verdict.message and "Kueue can never admit this job" in verdict.message
        assert 'ClusterQueue "cq-gpu" (LocalQueue "team-gpu")' in verdict.message
        assert 'TrainJobPolicy "queues"' in verdict.message


def test_the_denial_gives_the_numbers():
    verdict, _ = apply(snap(queue_policy(), cluster_queue=quotas(h100=("48", None))), gpu_trainjob(8, 8))
    assert ('replicated job "node" needs 64 nvidia.com/gpu in one flavor, and the largest flavor of ClusterQueue '
            '"cq-gpu" (LocalQueue "team-gpu") holds 48 ("h100": nominal 48 + borrowing 0)') in verdict.message
    assert '{"numNodes":8,"nvidia.com/gpu":64}' in verdict.message.replace(" ", "")


def test_audit_warns_with_the_same_message_and_admits():
    verdict, _ = apply(snap(queue_policy("Audit"), cluster_queue=quotas(h100=("48", None))), gpu_trainjob(8, 8))
    assert verdict.allowed
    assert any("Kueue can never admit this job" in w and "holds 48" in w for w in verdict.warnings), verdict.warnings


@pytest.mark.parametrize(("case", "snapshot"), [
    ("Kueue not installed", ClusterSnapshot(
        cluster_training_runtimes={"torch-distributed": runtime()}, namespace_labels={"team-a": {}},
        policies={"queues": queue_policy()})),
    ("no such ClusterQueue", snap(queue_policy(), cluster_queue=None)),
    ("the policy's queue is not a LocalQueue here", snap(queue_policy(), cluster_queue=quotas(h100=("8", None)),
                                                         local_queue="other")),
    ("no policy sets the queue", snap(policy("limits", mode="Enforce", selector=SELECT_ALL, limits={"maxNodes": 64}),
                                      cluster_queue=quotas(h100=("8", None)))),
])
def test_nothing_is_checked_without_what_it_needs(case, snapshot):
    verdict, _ = apply(snapshot, gpu_trainjob(8, 8, labels={QUEUE: "team-gpu"}))
    assert verdict.allowed, (case, verdict.message)


def test_an_update_that_grows_the_job_past_the_queue_is_denied_too():
    """CREATE fits; a suspended job's UPDATE to 8 x 8 GPUs is what the update introduces: denied the same way."""
    snapshot = snap(queue_policy(), cluster_queue=quotas(h100=("48", None)))
    created, stored = apply(snapshot, gpu_trainjob(2, 8, suspend=True))
    assert created.allowed, created.message
    grown = {**stored, "spec": {**stored["spec"], "trainer": {
        "numNodes": 8, "resourcesPerNode": {"limits": {"nvidia.com/gpu": "8"}}}}}
    verdict = validate_trainjob(AdmissionInput("UPDATE", grown, stored, NOW, namespace="team-a"), snapshot)
    assert not verdict.allowed and verdict.reason == "QueueCapacity", verdict.message


def test_a_user_cannot_step_around_it_with_their_own_queue_label():
    """The policy's queue is pinned: a user-written label for another LocalQueue is the policy's to refuse, and
    with the policy's label the capacity check runs."""
    snapshot = snap(queue_policy(), cluster_queue=quotas(h100=("48", None)))
    verdict, stored = apply(snapshot, gpu_trainjob(8, 8, labels={QUEUE: "team-gpu"}))
    assert not verdict.allowed and verdict.reason == "QueueCapacity"
