"""MultiKueue and policies (``trainguard.webhook.policy.multikueue``): the manager finishes Kueue's defaulting for a queue a
policy set; a worker takes MultiKueue's copy as the manager's policies left it, and only from MultiKueue's user."""

from __future__ import annotations

import copy
from dataclasses import replace

import pytest

from policy_helpers import NOW, policy, runtime, trainjob
from trainguard.webhook.policy.defaults import POLICY_MANAGER
from trainguard.webhook.policy.multikueue import ORIGIN_LABEL, default_managed_by, dispatches, is_dispatched_copy
from trainguard.webhook.policy.pipeline import mutate_trainjob, validate_trainjob
from trainguard.webhook.policy.verdict import AdmissionInput, ClusterSnapshot

QUEUE = "kueue.x-k8s.io/queue-name"
MULTIKUEUE = "kueue.x-k8s.io/multikueue"
TRAINER = "trainer.kubeflow.org/trainjob-controller"
PROVISIONING = "kueue.x-k8s.io/provisioning-request"
DISPATCHER = "system:serviceaccount:kueue-system:multikueue"

# team-a/dispatch -> cq-mk (a MultiKueue check and a provisioning check); team-a/local -> cq-local (provisioning
# only); team-a/plain -> cq-plain (no checks); team-a/dangling -> a ClusterQueue that does not exist;
# team-a/missing-check -> cq-missing, whose check does not exist.
KUEUE_STATE = dict(
    kueue_local_queues={("team-a", "dispatch"): "cq-mk", ("team-a", "local"): "cq-local",
                        ("team-a", "plain"): "cq-plain", ("team-a", "dangling"): "cq-gone",
                        ("team-a", "missing-check"): "cq-missing", ("team-b", "elsewhere"): "cq-mk"},
    kueue_cluster_queues={"cq-mk": ("provision", "multikueue"), "cq-local": ("provision",), "cq-plain": (),
                          "cq-missing": ("no-such-check",)},
    kueue_admission_checks={"multikueue": MULTIKUEUE, "provision": PROVISIONING},
)


def snap(*policies, dispatchers=()) -> ClusterSnapshot:
    rt = runtime()
    return ClusterSnapshot(cluster_training_runtimes={rt["metadata"]["name"]: rt},
                           policies={p["metadata"]["name"]: p for p in policies},
                           multikueue_dispatchers=frozenset(dispatchers), **KUEUE_STATE)


def queued(queue: str, **spec) -> dict:
    return trainjob(labels={QUEUE: queue}, **spec)


@pytest.mark.parametrize(("case", "job", "managed_by"), [
    ("MultiKueue check on the LocalQueue's ClusterQueue", queued("dispatch"), MULTIKUEUE),
    ("managedBy the trainer's default (as the CRD defaults it)", queued("dispatch", managedBy=TRAINER), MULTIKUEUE),
    ("already MultiKueue's: unchanged", queued("dispatch", managedBy=MULTIKUEUE), MULTIKUEUE),
    ("only a provisioning check", queued("local"), None),
    ("no admission checks", queued("plain"), None),
    ("ClusterQueue not found", queued("dangling"), None),
    ("the named AdmissionCheck not found", queued("missing-check"), None),
    ("no such LocalQueue", queued("nope"), None),
    ("the LocalQueue is another namespace's", queued("elsewhere"), None),
    ("no queue label", trainjob(), None),
    ("empty queue label", queued(""), None),
])
def test_default_managed_by(case, job, managed_by):
    before = copy.deepcopy(job)
    out = default_managed_by(job, "team-a", snap())
    assert out["spec"].get("managedBy") == managed_by, case
    assert job == before, "the input is not modified"
    assert default_managed_by(out, "team-a", snap()) == out, "idempotent"


def test_dispatches_reads_only_the_snapshot():
    assert dispatches("team-a", "dispatch", snap())
    assert not dispatches("team-a", "dispatch", ClusterSnapshot())  # Kueue not installed: empty caches


# --- manager: a policy sets the queue ---------------------------------------------------------------------------

def review(obj, operation="CREATE", old=None, username="alice@example.com"):
    return AdmissionInput(operation, obj, old, NOW, namespace="team-a", username=username)


def mutated(snapshot, obj, operation="CREATE", old=None, username="alice@example.com") -> dict:
    verdict = mutate_trainjob(review(obj, operation, old, username), snapshot)
    assert verdict.allowed, verdict.message
    return verdict.obj if verdict.obj is not None else obj


SELECTOR = {"nodeSelector": {"pool": "a100"}}
MANAGER_POLICY = policy("manager", scheduling={"kueue": {"queueName": "dispatch"}}, defaults=SELECTOR)


@pytest.mark.parametrize(("case", "queue", "written", "managed_by"), [
    ("queue dispatches to workers", "dispatch", TRAINER, MULTIKUEUE),
    ("queue runs locally", "local", TRAINER, TRAINER),
    ("the user wrote MultiKueue's managedBy", "local", MULTIKUEUE, MULTIKUEUE),
])
def test_policy_queue_gets_what_kueue_would_have_set(case, queue, written, managed_by):
    pol = policy("q", scheduling={"kueue": {"queueName": queue}})
    out = mutated(snap(pol), trainjob(managedBy=written))
    assert out["metadata"]["labels"][QUEUE] == queue, case
    assert out["spec"]["managedBy"] == managed_by, case
    # Kueue suspends every job with a queue name, MultiKueue's included (the manager's Kueue admits it).
    assert out["spec"]["suspend"] is True, case


def test_admitting_the_admitted_job_again_changes_nothing():
    s = snap(MANAGER_POLICY)
    once = mutated(s, trainjob(managedBy=TRAINER))
    assert once["spec"]["managedBy"] == MULTIKUEUE
    assert mutated(s, copy.deepcopy(once)) == once
    assert mutated(s, copy.deepcopy(once), "UPDATE", once) == once


def test_update_never_flips_managed_by():
    """managedBy is immutable: an existing job whose queue starts dispatching keeps its controller."""
    old = trainjob(managedBy=TRAINER, labels={QUEUE: "local"}, suspend=True)
    new = trainjob(managedBy=TRAINER, labels={QUEUE: "dispatch"}, suspend=True)
    assert mutated(snap(MANAGER_POLICY), new, "UPDATE", old)["spec"]["managedBy"] == TRAINER


def test_no_matching_policy_leaves_managed_by_to_kueue():
    """The user named the queue and no policy selects the job: Kueue's own defaulter has decided already."""
    job = queued("dispatch", managedBy=TRAINER)
    assert mutated(snap(), job)["spec"]["managedBy"] == TRAINER


# --- worker: MultiKueue's copy ------------------------------------------------------------------------------------

# The worker's own users get worker-q; MultiKueue's copies come through the manager's "dispatch" queue, which the
# worker's pin must allow (issue 22: a pinned queue holds for copies too).
WORKER_POLICY = policy("worker", scheduling={"kueue": {"queueName": "worker-q", "allowedQueueNames": ["dispatch"]}},
                       defaults={"nodeSelector": {"pool": "h100"}, "labels": {"team": "ml"}, "activeDeadlineSeconds": 60},
                       limits={"maxNodes": 4})


def manager_copy(nodes: int = 2) -> dict:
    """What MultiKueue creates on a worker: the manager's admitted job, origin and prebuilt-workload labels added,
    managedBy cleared (the worker's CRD defaults it), Kueue's own runtimePatch removed."""
    admitted = mutated(snap(MANAGER_POLICY), trainjob(managedBy=TRAINER, trainer={"numNodes": nodes}))
    job = copy.deepcopy(admitted)
    job["metadata"]["labels"].update({ORIGIN_LABEL: "manager-1", "kueue.x-k8s.io/prebuilt-workload-name": "wl-1"})
    job["spec"]["managedBy"] = TRAINER
    return job


def policy_patch(obj) -> dict | None:
    return next((p for p in obj["spec"].get("runtimePatches") or [] if p["manager"] == POLICY_MANAGER), None)


@pytest.mark.parametrize(("case", "username", "dispatchers", "origin", "operation", "copy_"), [
    ("MultiKueue's user creates a labelled job", DISPATCHER, {DISPATCHER}, True, "CREATE", True),
    ("a namespace user adds the origin label", "alice@example.com", {DISPATCHER}, True, "CREATE", False),
    ("MultiKueue's user without the origin label", DISPATCHER, {DISPATCHER}, False, "CREATE", False),
    ("no dispatcher configured on this cluster", DISPATCHER, set(), True, "CREATE", False),
    ("the requester is unknown (empty username)", "", {""}, True, "CREATE", False),
    ("an update is never a copy", DISPATCHER, {DISPATCHER}, True, "UPDATE", False),
])
def test_what_is_a_copy(case, username, dispatchers, origin, operation, copy_):
    job = manager_copy()
    if not origin:
        del job["metadata"]["labels"][ORIGIN_LABEL]
    r = review(job, operation, job if operation == "UPDATE" else None, username)
    assert is_dispatched_copy(r, snap(dispatchers=dispatchers)) is copy_, case


def test_worker_keeps_the_managers_decisions_on_a_copy():
    """Manager/worker rule: the copy's shape is the one the manager's Kueue admitted; the worker's policy defaults
    (labels, deadline, its own trainguard.io/policy patch) are not applied to it."""
    job = manager_copy()
    worker = snap(WORKER_POLICY, dispatchers={DISPATCHER})
    out = mutated(worker, copy.deepcopy(job), username=DISPATCHER)
    assert policy_patch(out) == policy_patch(job)
    assert out["metadata"]["labels"] == job["metadata"]["labels"]
    assert "activeDeadlineSeconds" not in out["spec"]
    assert out["spec"]["runtimePatches"] == job["spec"]["runtimePatches"]


def test_namespace_user_forging_the_origin_label_gets_the_workers_policy():
    """Played by the user: the origin label is theirs to write, so it switches nothing; the worker's policy
    rewrites the manager-looking patch and adds its defaults, exactly as for any job."""
    job = manager_copy()
    worker = snap(WORKER_POLICY, dispatchers={DISPATCHER})
    out = mutated(worker, copy.deepcopy(job), username="alice@example.com")
    assert policy_patch(out) != policy_patch(job)
    pod = policy_patch(out)["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]
    assert pod["spec"]["nodeSelector"] == {"pool": "h100"}
    assert out["metadata"]["labels"]["team"] == "ml"
    assert out["spec"]["activeDeadlineSeconds"] == 60


@pytest.mark.parametrize(("case", "nodes", "allowed"), [
    ("within the worker's limits", 2, True),
    ("over the worker's maxNodes", 8, False),
])
def test_worker_still_enforces_its_limits_on_a_copy(case, nodes, allowed):
    job = manager_copy(nodes)
    worker = snap(WORKER_POLICY, dispatchers={DISPATCHER})
    stored = mutated(worker, copy.deepcopy(job), username=DISPATCHER)
    verdict = validate_trainjob(review(stored, username=DISPATCHER), worker)
    assert verdict.allowed is allowed, (case, verdict.message)
    if not allowed:
        assert "spec.trainer.numNodes" in verdict.message and '"worker"' in verdict.message


def test_worker_pin_without_the_managers_queue_denies_the_copy():
    """A worker pinning a queue that does not allow the one the manager dispatches through refuses the copy (the
    job stays pending on the manager), naming the queue to allow."""
    pinned = copy.deepcopy(WORKER_POLICY)
    del pinned["spec"]["scheduling"]["kueue"]["allowedQueueNames"]
    worker = snap(pinned, dispatchers={DISPATCHER})
    stored = mutated(worker, copy.deepcopy(manager_copy()), username=DISPATCHER)
    verdict = validate_trainjob(review(stored, username=DISPATCHER), worker)
    assert not verdict.allowed
    assert verdict.message.startswith(f'metadata.labels[{QUEUE}]: Invalid value: "dispatch": TrainJobPolicy "worker" '
                                      'allows only ["worker-q"]'), verdict.message


def test_copy_mode_is_the_snapshots_setting_not_the_objects():
    """The same review flips only with the admin's dispatcher setting."""
    job = manager_copy()
    base = snap(WORKER_POLICY)
    plain = mutated(base, copy.deepcopy(job), username=DISPATCHER)
    as_copy = mutated(replace(base, multikueue_dispatchers=frozenset({DISPATCHER})), copy.deepcopy(job),
                      username=DISPATCHER)
    assert policy_patch(plain) != policy_patch(job) and policy_patch(as_copy) == policy_patch(job)
