"""Issue 22: a scheduling value a TrainJobPolicy sets (Kueue queue and priority, KAI queue, schedulerName) is the only
one a selected TrainJob may run with, wherever it takes effect, unless the policy lists alternatives. Enforce
denies naming the field and the allowed values, Audit warns with the same message; the mutating webhook still only
defaults. Each case runs the real pipeline: mutate (the stored object), then validate."""

from __future__ import annotations

import copy

import pytest

from policy_helpers import NOW, policy, rjob, runtime, trainjob
from trainguard.webhook.policy.pipeline import mutate_trainjob, validate_trainjob, validate_trainjob_policy
from trainguard.webhook.policy.verdict import AdmissionInput, ClusterSnapshot

QUEUE = "kueue.x-k8s.io/queue-name"
PRIORITY = "kueue.x-k8s.io/priority-class"
KAI = "kai.scheduler/queue"
SCHED = "trainguard.io/scheduler-name"
SCHEDULING = {"kueue": {"queueName": "team-gpu", "priorityClass": "standard"}, "kai": {"queue": "team-kai"},
              "schedulerName": "kai-scheduler"}
PIN = policy("gpu-teams", scheduling=SCHEDULING)
AUDIT = policy("gpu-teams", mode="Audit", scheduling=SCHEDULING)
WITH_ALTERNATIVES = policy("gpu-teams", scheduling={
    "kueue": {"queueName": "team-gpu", "allowedQueueNames": ["team-gpu-spot"],
              "priorityClass": "standard", "allowedPriorityClasses": ["low"]},
    "kai": {"queue": "team-kai", "allowedQueues": ["team-kai-b"]},
    "schedulerName": "kai-scheduler", "allowedSchedulerNames": ["volcano"]})
TR = runtime(kind="TrainingRuntime", name="mine", namespace="team-a")


def snap(*policies, rt=None) -> ClusterSnapshot:
    rt = rt or runtime()
    key = rt["metadata"]["name"]
    if rt["kind"] == "TrainingRuntime":
        return ClusterSnapshot(training_runtimes={("team-a", key): rt},
                               policies={p["metadata"]["name"]: p for p in policies})
    return ClusterSnapshot(cluster_training_runtimes={key: rt}, policies={p["metadata"]["name"]: p for p in policies})


def mutate(obj, snapshot, operation="CREATE", old=None):
    verdict = mutate_trainjob(AdmissionInput(operation, obj, old, NOW), snapshot)
    assert verdict.allowed, verdict.message
    return verdict.obj


def create(obj, snapshot):
    """What kubectl create does: mutate, then validate the mutated object."""
    stored = mutate(obj, snapshot)
    return validate_trainjob(AdmissionInput("CREATE", stored, None, NOW), snapshot), stored


def user_patch(manager="acme.io/user", *, jobset_labels=None, job_labels=None, pod_labels=None, pod_spec=None):
    job: dict = {"name": "node"}
    if job_labels:
        job.setdefault("template", {})["metadata"] = {"labels": job_labels}
    pod: dict = {}
    if pod_labels:
        pod["metadata"] = {"labels": pod_labels}
    if pod_spec:
        pod["spec"] = pod_spec
    if pod:
        job.setdefault("template", {})["spec"] = {"template": pod}
    template: dict = {}
    if jobset_labels:
        template["metadata"] = {"labels": jobset_labels}
    if len(job) > 1:
        template["spec"] = {"replicatedJobs": [job]}
    return {"manager": manager, "trainingRuntimeSpec": {"template": template}}


PATCH = "spec.runtimePatches[acme.io/user].trainingRuntimeSpec.template"
NODE = "spec.replicatedJobs[node].template"
RUNTIME = 'spec.runtimeRef: Invalid value: "{value}": {kind} "{name}" sets it at spec.template.{where}; '

# (case, trainjob, runtime, message the denial starts with)
DENIED = [
    ("priority-class label", trainjob(labels={PRIORITY: "highest"}), None,
     f'metadata.labels[{PRIORITY}]: Invalid value: "highest": TrainJobPolicy "gpu-teams" allows only ["standard"] '
     '(spec.scheduling.kueue.priorityClass); leave the label out to get "standard"'),
    ("queue label", trainjob(labels={QUEUE: "other-team"}), None,
     f'metadata.labels[{QUEUE}]: Invalid value: "other-team": TrainJobPolicy "gpu-teams" allows only ["team-gpu"] '
     "(spec.scheduling.kueue.queueName)"),
    ("KAI queue label on the TrainJob", trainjob(labels={KAI: "other"}), None,
     f'metadata.labels[{KAI}]: Invalid value: "other": TrainJobPolicy "gpu-teams" allows only ["team-kai"] '
     "(spec.scheduling.kai.queue)"),
    ("scheduler-name annotation", trainjob(annotations={SCHED: "default-scheduler"}), None,
     f'metadata.annotations[{SCHED}]: Invalid value: "default-scheduler": TrainJobPolicy "gpu-teams" allows only '
     '["kai-scheduler"] (spec.scheduling.schedulerName); leave the annotation out to get "kai-scheduler"'),
    ("KAI queue on the JobSet through a runtimePatch", trainjob(patches=[user_patch(jobset_labels={KAI: "other"})]),
     None, f'{PATCH}.metadata.labels[{KAI}]: Invalid value: "other": TrainJobPolicy "gpu-teams" allows only '
     '["team-kai"] (spec.scheduling.kai.queue); remove it from the patch or use an allowed value'),
    ("KAI queue on the job template through a runtimePatch",
     trainjob(patches=[user_patch(job_labels={KAI: "other"})]), None,
     f'{PATCH}.{NODE}.metadata.labels[{KAI}]: Invalid value: "other"'),
    ("KAI queue on the pods through a runtimePatch", trainjob(patches=[user_patch(pod_labels={KAI: "other"})]), None,
     f'{PATCH}.{NODE}.spec.template.metadata.labels[{KAI}]: Invalid value: "other"'),
    ("Kueue queue on the JobSet through a runtimePatch",
     trainjob(patches=[user_patch(jobset_labels={QUEUE: "other-team"})]), None,
     f'{PATCH}.metadata.labels[{QUEUE}]: Invalid value: "other-team"'),
    ("schedulerName through a runtimePatch", trainjob(patches=[user_patch(pod_spec={"schedulerName": "mine"})]), None,
     f'{PATCH}.{NODE}.spec.template.spec.schedulerName: Invalid value: "mine": TrainJobPolicy "gpu-teams" allows '
     'only ["kai-scheduler"]'),
    ("a patch that only calls itself Kueue's", trainjob(patches=[user_patch("kueue.x-k8s.io/manager",
                                                                            pod_labels={KAI: "other"})]), None,
     f'spec.runtimePatches[kueue.x-k8s.io/manager].trainingRuntimeSpec.template.{NODE}.spec.template.metadata.'
     f'labels[{KAI}]: Invalid value: "other"'),
    ("a user's TrainingRuntime with its own schedulerName", trainjob(kind="TrainingRuntime", runtime_name="mine"),
     runtime(rjob("node", ancestor="trainer", schedulerName="other"), kind="TrainingRuntime", name="mine",
             namespace="team-a"),
     RUNTIME.format(value="other", kind="TrainingRuntime", name="mine",
                    where=f"{NODE}.spec.template.spec.schedulerName")
     + 'TrainJobPolicy "gpu-teams" allows only ["kai-scheduler"] (spec.scheduling.schedulerName); change the '
       "runtime or reference another"),
    ("a user's TrainingRuntime with KAI pod labels", trainjob(kind="TrainingRuntime", runtime_name="mine"),
     runtime({"name": "node", "template": {"metadata": {"labels": {"trainer.kubeflow.org/trainjob-ancestor-step":
                                                                  "trainer"}},
                                           "spec": {"template": {"metadata": {"labels": {KAI: "other"}},
                                                                 "spec": {"containers": [{"name": "node",
                                                                                          "image": "x"}]}}}}},
             kind="TrainingRuntime", name="mine", namespace="team-a"),
     RUNTIME.format(value="other", kind="TrainingRuntime", name="mine",
                    where=f"{NODE}.spec.template.metadata.labels[{KAI}]")),
    ("a runtime's JobSet labels", trainjob(), {**runtime(), "spec": {**runtime()["spec"], "template": {
        **runtime()["spec"]["template"], "metadata": {"labels": {PRIORITY: "highest"}}}}},
     RUNTIME.format(value="highest", kind="ClusterTrainingRuntime", name="torch-distributed",
                    where=f"metadata.labels[{PRIORITY}]")),
]


@pytest.mark.parametrize(("case", "job", "rt", "message"), DENIED, ids=[c[0] for c in DENIED])
def test_enforce_denies_a_value_the_policy_does_not_allow(case, job, rt, message):
    verdict, stored = create(job, snap(PIN, rt=rt))
    assert not verdict.allowed, case
    assert verdict.reason == "PolicyScheduling"
    assert message in verdict.message, verdict.message
    # The mutating webhook defaulted around the user's value and never overwrote it.
    for key, value in (job["metadata"].get("labels") or {}).items():
        assert stored["metadata"]["labels"][key] == value
    for key, value in (job["metadata"].get("annotations") or {}).items():
        assert stored["metadata"]["annotations"][key] == value


@pytest.mark.parametrize(("case", "job", "rt", "message"), DENIED, ids=[c[0] for c in DENIED])
def test_audit_admits_with_the_same_message_as_a_warning(case, job, rt, message):
    verdict, _ = create(job, snap(AUDIT, rt=rt))
    assert verdict.allowed, verdict.message
    assert any(message in w and w.endswith('(TrainJobPolicy "gpu-teams" is in Audit mode: allowed)')
               for w in verdict.warnings), verdict.warnings


ALTERNATIVES = [
    ("an allowed queue", trainjob(labels={QUEUE: "team-gpu-spot"})),
    ("an allowed priority class", trainjob(labels={PRIORITY: "low"})),
    ("an allowed KAI queue, on the TrainJob and in a patch",
     trainjob(labels={KAI: "team-kai-b"}, patches=[user_patch(pod_labels={KAI: "team-kai-b"})])),
    ("an allowed scheduler, annotation and patch",
     trainjob(annotations={SCHED: "volcano"}, patches=[user_patch(pod_spec={"schedulerName": "volcano"})])),
]


@pytest.mark.parametrize(("case", "job"), ALTERNATIVES, ids=[c[0] for c in ALTERNATIVES])
def test_listed_alternatives_pass_and_are_denied_without_the_list(case, job):
    verdict, _ = create(copy.deepcopy(job), snap(WITH_ALTERNATIVES))
    assert verdict.allowed and not verdict.warnings, verdict.message
    assert not create(copy.deepcopy(job), snap(PIN))[0].allowed, case


def test_the_policys_own_values_pass_wherever_they_are_written():
    job = trainjob(labels={QUEUE: "team-gpu", PRIORITY: "standard", KAI: "team-kai"},
                   annotations={SCHED: "kai-scheduler"},
                   patches=[user_patch(jobset_labels={KAI: "team-kai"}, pod_labels={KAI: "team-kai"},
                                       pod_spec={"schedulerName": "kai-scheduler"})])
    rt = runtime(rjob("node", ancestor="trainer", schedulerName="kai-scheduler"))
    verdict, _ = create(job, snap(PIN, rt=rt))
    assert verdict.allowed and not verdict.warnings, verdict.message


def test_defaulting_writes_the_policys_values_once_and_is_idempotent():
    snapshot = snap(PIN)
    once = mutate(trainjob(), snapshot)
    assert once["metadata"]["labels"] == {QUEUE: "team-gpu", PRIORITY: "standard", KAI: "team-kai"}
    assert once["metadata"]["annotations"] == {SCHED: "kai-scheduler"}
    assert mutate(copy.deepcopy(once), snapshot) == once
    assert validate_trainjob(AdmissionInput("CREATE", once, None, NOW), snapshot).allowed
    # A user's value is kept as written (defaulting never overwrites it), and so stays denied, also on reinvocation.
    mine = mutate(trainjob(labels={PRIORITY: "highest"}), snapshot)
    assert mine["metadata"]["labels"][PRIORITY] == "highest"
    assert mutate(copy.deepcopy(mine), snapshot) == mine


def test_pods_the_runtime_leaves_unscheduled_get_the_policys_scheduler():
    """A runtime that names the pinned scheduler on one job only: the annotation is still written, so the other job's
    pods get it too; without it they would run with the default scheduler, which is denied."""
    rt = runtime(rjob("node", ancestor="trainer", schedulerName="kai-scheduler"), rjob("launcher"))
    verdict, stored = create(trainjob(), snap(PIN, rt=rt))
    assert stored["metadata"]["annotations"][SCHED] == "kai-scheduler"
    assert verdict.allowed, verdict.message
    bare = copy.deepcopy(stored)
    del bare["metadata"]["annotations"]
    denied = validate_trainjob(AdmissionInput("CREATE", bare, None, NOW), snap(PIN, rt=rt))
    assert not denied.allowed
    assert (f'metadata.annotations[{SCHED}]: Required value: TrainJobPolicy "gpu-teams" allows only ["kai-scheduler"] '
            "(spec.scheduling.schedulerName): the pods of replicatedJob launcher would run with the default scheduler"
            in denied.message), denied.message


def test_the_first_policy_in_order_pins_under_its_own_mode():
    """The pin belongs to the policy whose value is the default: a higher-priority team policy decides over a
    cluster-wide one, whose own value is then not required."""
    team = policy("team", priority=10, scheduling={"kueue": {"queueName": "team-gpu"}})
    cluster = policy("cluster", scheduling={"kueue": {"queueName": "default"}})
    verdict, stored = create(trainjob(), snap(team, cluster))
    assert stored["metadata"]["labels"][QUEUE] == "team-gpu" and verdict.allowed, verdict.message
    denied, _ = create(trainjob(labels={QUEUE: "default"}), snap(team, cluster))
    assert not denied.allowed and 'TrainJobPolicy "team" allows only ["team-gpu"]' in denied.message


# --- UPDATE ---------------------------------------------------------------------------------------------------------


def admitted(snapshot, **kw):
    stored = mutate(trainjob(suspend=True, **kw), snapshot)
    assert validate_trainjob(AdmissionInput("CREATE", stored, None, NOW), snapshot).allowed
    return stored


def update(old, new, snapshot):
    stored = mutate(new, snapshot, "UPDATE", old)
    return validate_trainjob(AdmissionInput("UPDATE", stored, old, NOW), snapshot)


def edited(obj, edit):
    out = copy.deepcopy(obj)
    edit(out)
    return out


UPDATES = [
    ("remove the scheduler-name annotation", lambda o: o["metadata"].pop("annotations"),
     f"metadata.annotations[{SCHED}]: Forbidden: cannot be removed while TrainJobPolicy \"gpu-teams\" selects this "
     "job (it was 'kai-scheduler')"),
    ("change the scheduler-name annotation", lambda o: o["metadata"]["annotations"].update({SCHED: "mine"}),
     f"metadata.annotations[{SCHED}]: Forbidden: cannot be changed to 'mine'"),
    ("change the priority class", lambda o: o["metadata"]["labels"].update({PRIORITY: "highest"}),
     f"metadata.labels[{PRIORITY}]: Forbidden: cannot be changed to 'highest'"),
    ("add a patch with another KAI queue",
     lambda o: o["spec"]["runtimePatches"].append(user_patch(pod_labels={KAI: "other"})),
     f'{PATCH}.{NODE}.spec.template.metadata.labels[{KAI}]: Invalid value: "other"'),
    ("add a patch with another scheduler",
     lambda o: o["spec"]["runtimePatches"].append(user_patch(pod_spec={"schedulerName": "mine"})),
     f'{PATCH}.{NODE}.spec.template.spec.schedulerName: Invalid value: "mine"'),
]


@pytest.mark.parametrize(("case", "edit", "message"), UPDATES, ids=[c[0] for c in UPDATES])
def test_update_cannot_bring_in_another_value(case, edit, message):
    snapshot = snap(PIN)
    old = admitted(snapshot)
    verdict = update(old, edited(old, edit), snapshot)
    assert not verdict.allowed, case
    assert message in verdict.message, verdict.message
    assert verdict.message.count(message.split(":")[0] + ":") == 1, verdict.message  # one finding per path
    audit = snap(AUDIT)
    warned = update(old, edited(old, edit), audit)
    assert warned.allowed and any(message in w for w in warned.warnings), warned.warnings


def test_update_adding_a_label_the_job_lacked_must_use_an_allowed_value():
    snapshot = snap(PIN)
    legacy = trainjob(suspend=True)  # created before the policy (or in an exempted namespace)
    bad = update(legacy, edited(legacy, lambda o: o["metadata"].update(labels={PRIORITY: "highest"})), snapshot)
    assert not bad.allowed and f'metadata.labels[{PRIORITY}]: Invalid value: "highest"' in bad.message
    good = update(legacy, edited(legacy, lambda o: o["metadata"].update(labels={PRIORITY: "standard"})), snapshot)
    assert good.allowed, good.message


def test_relabelling_out_of_the_selector_does_not_escape_the_pin():
    by_label = policy("gpu-teams", scheduling=SCHEDULING, selector={"trainJobSelector": {"matchLabels": {"team": "a"}}})
    snapshot = snap(by_label)
    old = admitted(snapshot, labels={"team": "a"})

    def escape(o):
        del o["metadata"]["labels"]["team"]
        o["spec"]["runtimePatches"].append(user_patch(jobset_labels={KAI: "other"}))

    verdict = update(old, edited(old, escape), snapshot)
    assert not verdict.allowed and f'{PATCH}.metadata.labels[{KAI}]: Invalid value: "other"' in verdict.message


def test_kueue_admitting_the_job_passes():
    """What Kueue v0.17 writes when it admits (its runtimePatch: podset label, topology annotation, nodeSelector,
    tolerations, scheduling gates; then the unsuspend) carries no scheduling value and passes."""
    snapshot = snap(PIN)
    old = admitted(snapshot)
    kueue = {"manager": "kueue.x-k8s.io/manager", "trainingRuntimeSpec": {"template": {"spec": {"replicatedJobs": [
        {"name": "node", "template": {"spec": {"template": {
            "metadata": {"labels": {"kueue.x-k8s.io/podset": "node"},
                         "annotations": {"kueue.x-k8s.io/podset-unconstrained-topology": "true"}},
            "spec": {"nodeSelector": {"pool": "h100"}, "tolerations": [{"key": "gpu", "operator": "Exists"}],
                     "schedulingGates": [{"name": "kueue.x-k8s.io/topology"}]}}}}}]}}}}
    with_patch = edited(old, lambda o: o["spec"]["runtimePatches"].append(kueue))
    assert update(old, with_patch, snapshot).allowed
    running = edited(with_patch, lambda o: o["spec"].update(suspend=False))
    verdict = update(with_patch, running, snapshot)
    assert verdict.allowed, verdict.message


def test_a_job_admitted_before_the_pin_keeps_its_status_updates():
    """A value admitted before the policy pinned it is not re-judged on an unrelated update (the controller's check
    still refuses to run it)."""
    snapshot = snap(PIN)
    old = mutate(trainjob(suspend=True, labels={PRIORITY: "highest"}), snap(AUDIT))
    verdict = update(old, edited(old, lambda o: o["metadata"]["labels"].update(note="x")), snapshot)
    assert verdict.allowed, verdict.message


# --- the policy object ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("scheduling", "message"), [
    ({"kueue": {"allowedQueueNames": ["a"]}},
     "spec.scheduling.kueue.allowedQueueNames: Forbidden: needs spec.scheduling.kueue.queueName"),
    ({"kueue": {"queueName": "q", "allowedPriorityClasses": ["a"]}},
     "spec.scheduling.kueue.allowedPriorityClasses: Forbidden: needs spec.scheduling.kueue.priorityClass"),
    ({"kai": {"allowedQueues": ["a"]}},
     "spec.scheduling.kai.allowedQueues: Forbidden: needs spec.scheduling.kai.queue"),
    ({"allowedSchedulerNames": ["a"]},
     "spec.scheduling.allowedSchedulerNames: Forbidden: needs spec.scheduling.schedulerName"),
    ({"schedulerName": "s", "allowedSchedulerNames": [""]},
     'spec.scheduling.allowedSchedulerNames[0]: Invalid value: "": must not be empty'),
])
def test_alternatives_need_the_value_they_add_to(scheduling, message):
    verdict = validate_trainjob_policy(AdmissionInput("CREATE", policy("p", scheduling=scheduling), None, NOW),
                                       ClusterSnapshot())
    assert not verdict.allowed and message in verdict.message, verdict.message


def test_equal_priority_overlapping_policies_must_agree_on_alternatives():
    one = policy("a", scheduling={"kueue": {"queueName": "q", "allowedQueueNames": ["x"]}})
    two = policy("b", scheduling={"kueue": {"queueName": "q", "allowedQueueNames": ["y"]}})
    verdict = validate_trainjob_policy(AdmissionInput("CREATE", two, None, NOW), ClusterSnapshot(policies={"a": one}))
    assert not verdict.allowed and "spec.scheduling.kueue.allowedQueueNames" in verdict.message, verdict.message
    assert validate_trainjob_policy(AdmissionInput("CREATE", policy("b", scheduling=WITH_ALTERNATIVES["spec"][
        "scheduling"]), None, NOW), ClusterSnapshot()).allowed
