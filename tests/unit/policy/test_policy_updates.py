"""UPDATEs of a TrainJob under an Enforce policy (issue 10 item 8): the policy's scheduling labels cannot be removed
or changed, a job without them cannot be unsuspended, a selector escape through the TrainJob's own labels does not
step out of the policy, and an update cannot introduce a limit violation. Kueue's own updates keep working."""

from __future__ import annotations

import copy

import pytest

from policy_helpers import NOW, policy, runtime, trainjob
from trainguard.webhook.policy.pipeline import validate_trainjob
from trainguard.webhook.policy.verdict import AdmissionInput, ClusterSnapshot

QUEUE = "kueue.x-k8s.io/queue-name"
PRIORITY = "kueue.x-k8s.io/priority-class"
KAI = "kai.scheduler/queue"
KUEUE = {"kueue": {"queueName": "team-gpu", "priorityClass": "standard"}}
ADMITTED = {QUEUE: "team-gpu", PRIORITY: "standard", "team": "a"}


def snap(*policies) -> ClusterSnapshot:
    return ClusterSnapshot(cluster_training_runtimes={"torch-distributed": runtime()},
                           policies={p["metadata"]["name"]: p for p in policies})


def update(old, new, *policies):
    return validate_trainjob(AdmissionInput("UPDATE", new, old, NOW), snap(*policies))


def edited(obj, *, labels=None, drop=(), suspend="keep", patches=None):
    out = copy.deepcopy(obj)
    meta_labels = out["metadata"].setdefault("labels", {})
    for k in drop:
        meta_labels.pop(k, None)
    meta_labels.update(labels or {})
    if suspend != "keep":
        if suspend is None:
            out["spec"].pop("suspend", None)
        else:
            out["spec"]["suspend"] = suspend
    if patches is not None:
        out["spec"]["runtimePatches"] = patches
    return out


OLD = trainjob(labels=dict(ADMITTED), suspend=True)
ENFORCE = policy("gpu-teams", scheduling=KUEUE)
AUDIT = policy("gpu-teams", mode="Audit", scheduling=KUEUE)
BY_LABEL = policy("gpu-teams", scheduling=KUEUE, selector={"trainJobSelector": {"matchLabels": {"team": "a"}}})

CASES = [
    # (case, new object, policy, expected message prefix or None)
    ("remove the queue label", edited(OLD, drop=[QUEUE]), ENFORCE,
     f"metadata.labels[{QUEUE}]: Forbidden: cannot be removed while TrainJobPolicy \"gpu-teams\" selects this job "
     "(it was 'team-gpu')"),
    ("change the queue label", edited(OLD, labels={QUEUE: "free-for-all"}), ENFORCE,
     f"metadata.labels[{QUEUE}]: Forbidden: cannot be changed to 'free-for-all' while TrainJobPolicy \"gpu-teams\""),
    ("remove the priority label", edited(OLD, drop=[PRIORITY]), ENFORCE,
     f"metadata.labels[{PRIORITY}]: Forbidden: cannot be removed"),
    ("remove the label and unsuspend in one go", edited(OLD, drop=[QUEUE], suspend=False), ENFORCE,
     f"metadata.labels[{QUEUE}]: Forbidden: cannot be removed"),
    ("escape the trainJobSelector while removing the label", edited(OLD, drop=[QUEUE, "team"]), BY_LABEL,
     f"metadata.labels[{QUEUE}]: Forbidden: cannot be removed"),
    ("unsuspend a job that never had the label", edited(trainjob(suspend=True), suspend=False), ENFORCE,
     f"[metadata.labels[{QUEUE}]: Required value: TrainJobPolicy \"gpu-teams\" schedules this job through "
     "'team-gpu'; a job without the label cannot be unsuspended"),
    ("unsuspend by dropping the field", edited(trainjob(suspend=True), suspend=None), ENFORCE,
     f"[metadata.labels[{QUEUE}]: Required value"),
    # The legitimate neighbours.
    ("Kueue unsuspends an admitted job", edited(OLD, suspend=False), ENFORCE, None),
    ("Kueue adds its runtimePatch", edited(OLD, suspend=False, patches=[{"manager": "kueue.x-k8s.io/manager",
     "trainingRuntimeSpec": {"template": {"spec": {"replicatedJobs": [{"name": "node", "template": {"spec": {
         "template": {"spec": {"nodeSelector": {"pool": "a"}}}}}}]}}}}]), ENFORCE, None),
    ("an unrelated label edit", edited(OLD, labels={"note": "x"}), ENFORCE, None),
    ("adding the label to an old job", edited(trainjob(suspend=True), labels={QUEUE: "team-gpu"}), ENFORCE, None),
    ("a suspended job without the label stays editable", edited(trainjob(suspend=True), labels={"x": "y"}), ENFORCE,
     None),
    ("no policy sets a queue", edited(OLD, drop=[QUEUE], suspend=False), policy("other", limits={"maxNodes": 8}),
     None),
]


UNLABELLED = trainjob(suspend=True)  # created before the policy existed
OLD_OF = {"unsuspend a job that never had the label": UNLABELLED, "unsuspend by dropping the field": UNLABELLED,
          "adding the label to an old job": UNLABELLED, "a suspended job without the label stays editable": UNLABELLED}


@pytest.mark.parametrize(("case", "new", "p", "message"), CASES, ids=[c[0] for c in CASES])
def test_scheduling_labels_on_update(case, new, p, message):
    v = update(OLD_OF.get(case, OLD), new, p)
    assert v.allowed is (message is None), v.message
    if message:
        assert v.message.startswith(message), v.message
        assert v.reason == "PolicyScheduling"


def test_audit_policy_warns_instead():
    v = update(OLD, edited(OLD, drop=[QUEUE]), AUDIT)
    assert v.allowed
    assert v.warnings[-1].startswith(f"metadata.labels[{QUEUE}]: Forbidden: cannot be removed")
    assert v.warnings[-1].endswith('(TrainJobPolicy "gpu-teams" is in Audit mode: allowed)')


NODE_SELECTOR_PATCH = {"manager": "acme.io/me", "trainingRuntimeSpec": {"template": {"spec": {"replicatedJobs": [
    {"name": "node", "template": {"spec": {"template": {"spec": {"nodeSelector": {"gpu": "h200"}}}}}}]}}}}


def test_an_update_cannot_introduce_a_limit_violation_but_old_ones_are_not_rejudged():
    strict = policy("gpu-teams", limits={"maxNodes": 2}, scheduling=KUEUE)
    big = trainjob(labels=dict(ADMITTED), suspend=True, trainer={"numNodes": 8})
    # Admitted before the policy was tightened: Kueue may still unsuspend it.
    assert update(big, edited(big, suspend=False), strict).allowed
    # A patch that changes nothing a limit measures passes (tests/unit/policy/test_shadowing.py: one that does).
    images = policy("gpu-teams", limits={"allowedImagePrefixes": ["python:"]})
    ok = trainjob(suspend=True)
    assert update(ok, edited(ok, patches=[NODE_SELECTOR_PATCH]), images).allowed
