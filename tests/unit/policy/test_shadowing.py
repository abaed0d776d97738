"""Policy limits that a runtime cannot step around (issue 10 item 7): ``allowedRuntimes`` by kind and name, and
images / GPUs measured on every container of every replicatedJob the merged job builds."""

from __future__ import annotations

import pytest

from policy_helpers import NOW, policy, rjob, runtime, trainjob
from trainguard.webhook.policy.pipeline import validate_trainjob, validate_trainjob_policy
from trainguard.webhook.policy.runtime_ref import allowed_runtime_entry
from trainguard.webhook.policy.verdict import AdmissionInput, ClusterSnapshot

CTR, TR = "ClusterTrainingRuntime", "TrainingRuntime"


def snap(p, *, ctr=None, tr=None) -> ClusterSnapshot:
    return ClusterSnapshot(
        cluster_training_runtimes={"torch-distributed": ctr or runtime()},
        training_runtimes={("team-a", "torch-distributed"): tr or runtime(kind=TR, namespace="team-a")},
        policies={p["metadata"]["name"]: p})


def create(obj, snapshot):
    return validate_trainjob(AdmissionInput("CREATE", obj, None, NOW), snapshot)


@pytest.mark.parametrize(("entry", "parsed"), [
    ("torch-distributed", (CTR, "torch-distributed")),
    ("ClusterTrainingRuntime/torch-distributed", (CTR, "torch-distributed")),
    ("TrainingRuntime/my-rt", (TR, "my-rt")),
    ("Runtime/x", None),
    ("TrainingRuntime/", None),
    ("TrainingRuntime/a/b", None),
])
def test_allowed_runtime_syntax(entry, parsed):
    assert allowed_runtime_entry(entry) == parsed


RUNTIME_CASES = [
    # (case, allowedRuntimes, kind the TrainJob references, expected message or None)
    ("plain name allows the ClusterTrainingRuntime", ["torch-distributed"], None, None),
    ("plain name does not allow a same-named TrainingRuntime", ["torch-distributed"], TR,
     'spec.runtimeRef.kind: Invalid value: "TrainingRuntime": TrainingRuntime "torch-distributed" is not allowed by '
     'TrainJobPolicy "p"; allowed: ClusterTrainingRuntime/torch-distributed'),
    ("explicit cluster kind", ["ClusterTrainingRuntime/torch-distributed"], CTR, None),
    ("explicit cluster kind refuses the namespaced one", ["ClusterTrainingRuntime/torch-distributed"], TR,
     "spec.runtimeRef.kind: Invalid value"),
    ("TrainingRuntime listed as such", ["TrainingRuntime/torch-distributed"], TR, None),
    ("TrainingRuntime listed does not allow the cluster one", ["TrainingRuntime/torch-distributed"], CTR,
     "spec.runtimeRef.kind: Invalid value"),
    ("other name", ["deepspeed"], TR,
     'spec.runtimeRef.name: Invalid value: "torch-distributed": TrainingRuntime "torch-distributed" is not allowed'),
]


@pytest.mark.parametrize(("case", "allowed", "kind", "message"), RUNTIME_CASES, ids=[c[0] for c in RUNTIME_CASES])
def test_allowed_runtimes_match_kind_and_name(case, allowed, kind, message):
    v = create(trainjob(kind=kind), snap(policy("p", limits={"allowedRuntimes": allowed})))
    assert v.allowed is (message is None), v.message
    if message:
        assert v.message.startswith(message), v.message


def test_bad_allowed_runtime_entry_is_denied_at_policy_apply():
    p = policy("p", limits={"allowedRuntimes": ["torch-distributed", "Runtime/x"]})
    v = validate_trainjob_policy(AdmissionInput("CREATE", p, None, NOW), ClusterSnapshot())
    assert not v.allowed
    assert v.message == ('spec.limits.allowedRuntimes[1]: Invalid value: "Runtime/x": must be <name> (a '
                         "ClusterTrainingRuntime), ClusterTrainingRuntime/<name> or TrainingRuntime/<name>")


PRIVILEGED_SIDE_JOB = rjob("sidecar", containers=("pwn",), hostPID=True)
PRIVILEGED_SIDE_JOB["template"]["spec"]["template"]["spec"]["containers"][0]["image"] = "docker.io/evil/root:1"
INIT_JOB = rjob("node", ancestor="trainer")
INIT_JOB["template"]["spec"]["template"]["spec"]["initContainers"] = [{"name": "fetch", "image": "quay.io/x/y:1"}]
GPU_SIDE_JOB = rjob("helper", containers=("h",))
GPU_SIDE_JOB["template"]["spec"]["template"]["spec"]["containers"][0].update(
    image="ghcr.io/acme/h:1", resources={"limits": {"nvidia.com/gpu": 64}})
ACME_NODE = rjob("node", ancestor="trainer")
ACME_NODE["template"]["spec"]["template"]["spec"]["containers"][0]["image"] = "ghcr.io/acme/train:1"

EVERY_CONTAINER_CASES = [
    ("a side job of a namespaced runtime", runtime(ACME_NODE, PRIVILEGED_SIDE_JOB, kind=TR, namespace="team-a"),
     {"allowedImagePrefixes": ["ghcr.io/acme/"]},
     'spec.runtimeRef: Invalid value: "docker.io/evil/root:1": image of container pwn in replicatedJob sidecar'),
    ("an initContainer of the trainer job", runtime(INIT_JOB, kind=TR, namespace="team-a"),
     {"allowedImagePrefixes": ["python:"]},
     'spec.runtimeRef: Invalid value: "quay.io/x/y:1": image of initContainer fetch in replicatedJob node'),
    ("GPUs of a side job's pod", runtime(ACME_NODE, GPU_SIDE_JOB, kind=TR, namespace="team-a"),
     {"maxGpusPerNode": 8},
     'spec.runtimeRef: Invalid value: "torch-distributed": pods of replicatedJob helper request 64 nvidia.com/gpu '
     'each, more than maxGpusPerNode 8 of TrainJobPolicy "p"'),
    ("the neighbour within limits", runtime(ACME_NODE, kind=TR, namespace="team-a"),
     {"allowedImagePrefixes": ["ghcr.io/acme/"], "maxGpusPerNode": 8}, None),
]


@pytest.mark.parametrize(("case", "rt", "limits", "message"), EVERY_CONTAINER_CASES,
                         ids=[c[0] for c in EVERY_CONTAINER_CASES])
def test_limits_measure_every_container_of_every_job(case, rt, limits, message):
    v = create(trainjob(kind=TR), snap(policy("p", limits=limits), tr=rt))
    assert v.allowed is (message is None), v.message
    if message:
        assert message in v.message, v.message


# --- podSecurity: Baseline (optional policy field) ---------------------------------------------------------------

def _pod(job):
    return job["template"]["spec"]["template"]["spec"]


def pss_job(**pod):
    job = rjob("sidecar", containers=("s",))
    _pod(job).update(pod)
    return job


def pss_container(**container):
    job = rjob("sidecar", containers=("s",))
    _pod(job)["containers"][0].update(container)
    return job


BASE = "replicatedJobs[sidecar].template.spec.template.spec"
PSS_CASES = [
    ("hostPID", pss_job(hostPID=True), f"{BASE}.hostPID: Forbidden: hostPID: true is not allowed by the Baseline"),
    ("hostNetwork", pss_job(hostNetwork=True), f"{BASE}.hostNetwork: Forbidden"),
    ("hostPath /", pss_job(volumes=[{"name": "root", "hostPath": {"path": "/"}}]),
     f"{BASE}.volumes[root].hostPath: Forbidden: a hostPath volume ('/') is not allowed"),
    ("privileged", pss_container(securityContext={"privileged": True}),
     f"{BASE}.containers[s].securityContext.privileged: Forbidden: a privileged container"),
    ("privileged init container", pss_job(initContainers=[{"name": "i", "image": "x", "securityContext": {"privileged": True}}]),
     f"{BASE}.initContainers[i].securityContext.privileged: Forbidden"),
    ("SYS_ADMIN", pss_container(securityContext={"capabilities": {"add": ["SYS_ADMIN", "CHOWN"]}}),
     f"{BASE}.containers[s].securityContext.capabilities.add: Forbidden: adding capabilities ['SYS_ADMIN']"),
    ("hostPort", pss_container(ports=[{"containerPort": 80, "hostPort": 80}]), f"{BASE}.containers[s].ports[80].hostPort"),
    ("baseline capability and an emptyDir are fine",
     pss_container(securityContext={"capabilities": {"add": ["NET_BIND_SERVICE"]}, "runAsNonRoot": True}), None),
]


@pytest.mark.parametrize(("case", "job", "message"), PSS_CASES, ids=[c[0] for c in PSS_CASES])
def test_pod_security_baseline(case, job, message):
    rt = runtime(ACME_NODE, job, kind=TR, namespace="team-a")
    v = create(trainjob(kind=TR), snap(policy("p", limits={"podSecurity": "Baseline"}), tr=rt))
    assert v.allowed is (message is None), v.message
    if message:
        assert v.message.startswith(message), v.message
        assert v.message.endswith('(TrainJobPolicy "p")'), v.message


def test_pod_security_unset_checks_nothing():
    rt = runtime(ACME_NODE, pss_job(hostPID=True), kind=TR, namespace="team-a")
    assert create(trainjob(kind=TR), snap(policy("p", limits={"maxNodes": 8}), tr=rt)).allowed


def test_a_runtime_patch_added_by_update_cannot_make_a_container_privileged():
    """runtimePatches stay mutable: an UPDATE that adds a privileged securityContext is a new violation."""
    p = policy("p", limits={"podSecurity": "Baseline"})
    old = trainjob(kind=TR, suspend=True)
    new = trainjob(kind=TR, suspend=True, patches=[{"manager": "acme.io/me", "trainingRuntimeSpec": {"template": {
        "spec": {"replicatedJobs": [{"name": "node", "template": {"spec": {"template": {"spec": {
            "containers": [{"name": "node", "securityContext": {"privileged": True}}]}}}}}]}}}}])
    s = snap(p, tr=runtime(ACME_NODE, kind=TR, namespace="team-a"))
    v = validate_trainjob(AdmissionInput("UPDATE", new, old, NOW), s)
    assert not v.allowed and v.reason == "PolicyLimits"
    assert v.message.startswith("replicatedJobs[node].template.spec.template.spec.containers[node].securityContext"
                                ".privileged: Forbidden"), v.message
    assert validate_trainjob(AdmissionInput("UPDATE", old, old, NOW), s).allowed
