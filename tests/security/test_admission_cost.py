"""Issue 10, items 4 and 11: malformed input and admission cost, performed as a namespace user against the real
apiserver and the real ``trainguard webhook`` (the example ``gpu-teams`` policy selecting the namespace, so the
policy path is live).

4. One TrainJob with 60,000 ``spec.trainer.env`` entries held the webhook's event loop for 96 s: the mutating
   webhook runs before the CRD's ``maxItems`` applies, and merging the env list was quadratic. Other users' applies
   failed with ``failed calling webhook`` meanwhile. Now the door check (``webhook/policy/well_formed.py``) denies
   it from the list's length, naming the field and the limit, and a neighbour's applies keep succeeding during it
   (the 60,000-entry review is sent to the webhook directly, see the test; 6,000 entries go through the apiserver).
11. Malformed specs (``runtimeRef`` as a string, a GPU quantity ``"8 "``, ...) were answered with an
   AdmissionReview code 500 (``AttributeError``, ``QuantityError``). Now each is a 403 denial naming the field, on
   CREATE and on UPDATE; a well-formed neighbour is admitted and defaulted.

Issue 22 part 5: a 70 KB TrainJob whose runtimePatches name 1,500 jobs the runtime lacks ran past
``--policy-timeout`` (an InternalError); a TrainingRuntime of 3,000 jobs with ``dependsOn`` was stored. Now the first
is a 403 quoting 8 KiB of the list, the second is denied at the door naming trainguard's cap.

The only timing is a generous failure bound on the attack (it must not take the webhook's 5 s timeout, let alone
96 s); figures are in ``bench/admission_cost_bench.py``.
"""

from __future__ import annotations

import copy
import http.client
import json
import ssl
import threading
import time
import urllib.request
import uuid
from pathlib import Path
from typing import Any, Iterator

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
QUEUE = "kueue.x-k8s.io/queue-name"
REQUESTS = {"requests": {"cpu": "4", "memory": "16Gi"}, "limits": {"nvidia.com/gpu": 8}}
DENIED = "denied the request"
# A failure bound, not a speed requirement: well below the 96 s the attack used to take.
ATTACK_BOUND_S = 30.0


def example(path: str, kind: str) -> dict[str, Any]:
    docs = yaml.safe_load_all((REPO / "examples" / path).read_text())
    return copy.deepcopy(next(d for d in docs if d and d["kind"] == kind))


def trainjob(name: str, runtime: str, **trainer: Any) -> dict[str, Any]:
    return {"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob", "metadata": {"name": name},
            "spec": {"runtimeRef": {"name": runtime},
                     "trainer": {"image": "ghcr.io/acme/train:1.0", "numNodes": 2, "resourcesPerNode": copy.deepcopy(REQUESTS),
                                 **trainer}}}


def create(user, obj: dict[str, Any], *extra: str):
    return user.kubectl("create", *extra, "-f", "-", input=json.dumps(obj), check=False, timeout=120)


@pytest.fixture
def gpu_teams(cluster, namespace: str, admission) -> Iterator[str]:
    """The example runtime and Enforce policy (selecting the test namespace, labelled by the admin); yields the
    runtime's name once the webhook enforces the policy."""
    runtime = example("torch-distributed-gpu.yaml", "ClusterTrainingRuntime")
    runtime["metadata"]["name"] = f"torch-{uuid.uuid4().hex[:6]}"
    policy = example("gpu-topology-policy.yaml", "TrainJobPolicy")
    policy["metadata"]["name"] = f"gpu-teams-{uuid.uuid4().hex[:6]}"
    cluster.kubectl("label", "namespace", namespace, "trainguard.io/tier=gpu")
    cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump_all([runtime, policy]))
    probe = trainjob("probe", runtime["metadata"]["name"], numNodes=100)
    deadline = time.monotonic() + 30
    while "maxTotalGpus" not in cluster.kubectl("create", "--dry-run=server", "-n", namespace, "-f", "-",
                                                input=json.dumps(probe), check=False).stderr:
        assert time.monotonic() < deadline, "the webhook never enforced the policy"
        time.sleep(0.2)
    try:
        yield runtime["metadata"]["name"]
    finally:
        cluster.kubectl("delete", "trainjobpolicy", policy["metadata"]["name"], "--ignore-not-found", check=False)
        cluster.kubectl("delete", "clustertrainingruntime", runtime["metadata"]["name"], "--ignore-not-found", check=False)


class Neighbour(threading.Thread):
    """Another user's ordinary apply, repeated (server-side dry run: admission runs, nothing is stored)."""

    def __init__(self, user, runtime: str) -> None:
        super().__init__(daemon=True)
        self.user, self.runtime = user, runtime
        self.stop = threading.Event()
        self.results: list[tuple[int, str]] = []

    def run(self) -> None:
        while not self.stop.is_set():
            proc = create(self.user, trainjob(f"neighbour-{uuid.uuid4().hex[:6]}", self.runtime), "--dry-run=server")
            self.results.append((proc.returncode, proc.stderr))


# --- 4: a huge object is refused at the door, cheaply ---------------------------------------------------------------


def post_review(server, path: str, obj: dict[str, Any]) -> tuple[dict[str, Any], float]:
    """POST an AdmissionReview to the webhook as the apiserver would (HTTPS, the webhook's CA); returns the
    response and the seconds it took."""
    body = json.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
        "uid": str(uuid.uuid4()), "operation": "CREATE", "object": obj, "namespace": obj["metadata"]["namespace"],
        "name": obj["metadata"]["name"], "userInfo": {"username": "system:serviceaccount:x:team-member"},
        "kind": {"group": "trainer.kubeflow.org", "version": "v1alpha1", "kind": "TrainJob"},
        "resource": {"group": "trainer.kubeflow.org", "version": "v1alpha1", "resource": "trainjobs"}}}).encode()
    ctx = ssl.create_default_context(cadata=server.ca_pem.decode())
    request = urllib.request.Request(server.url_base + path, data=body, headers={"Content-Type": "application/json"})
    start = time.monotonic()
    with urllib.request.urlopen(request, context=ctx, timeout=120) as resp:
        out = json.loads(resp.read())
    return out["response"], time.monotonic() - start


def test_60000_env_entries_are_denied_at_the_door_while_a_neighbour_keeps_applying(
        cluster, namespace, namespace_user, gpu_teams, webhook_server):
    """The 60,000-entry review reaches the webhook directly, byte for byte what the apiserver forwards: on this
    2-core machine kube-apiserver 1.35 itself needs ~35 s for such a create (field management of a 60,000-entry
    list-map) and times out before calling any webhook, with or without trainguard. Through the apiserver, as the
    namespace user, the same attack with 6,000 entries (47x the limit) is denied by trainguard's webhook."""
    env = [{"name": f"V{i}", "value": "x"} for i in range(60_000)]
    attack = trainjob("env-bomb", gpu_teams, env=env)
    attack["metadata"].update(namespace=namespace, creationTimestamp=None)
    neighbour = Neighbour(namespace_user, gpu_teams)
    neighbour.start()
    try:
        while not neighbour.results:  # the neighbour is really applying before the attack starts
            time.sleep(0.1)
        for path in ("/mutate-trainer-kubeflow-org-v1alpha1-trainjob",
                     "/validate-trainer-kubeflow-org-v1alpha1-trainjob") * 2:
            response, elapsed = post_review(webhook_server, path, attack)
            assert response["allowed"] is False and response["status"]["code"] == 403, response
            assert response["status"]["message"] == "spec.trainer.env: Too many: 60000: must have at most 128 items"
            assert elapsed < ATTACK_BOUND_S, f"{path}: {elapsed:.1f}s"

        start = time.monotonic()
        proc = create(namespace_user, trainjob("env-bomb", gpu_teams, env=env[:6_000]))
        elapsed = time.monotonic() - start
        assert proc.returncode != 0
        assert "Error from server (Forbidden)" in proc.stderr and DENIED in proc.stderr, \
            (f"after {elapsed:.1f}s", proc.stderr[-2000:], webhook_server.log_tail(10))
        assert "spec.trainer.env: Too many: 6000: must have at most 128 items" in proc.stderr, proc.stderr[-2000:]
        assert elapsed < ATTACK_BOUND_S, f"{elapsed:.1f}s"
        seen = len(neighbour.results)
        while len(neighbour.results) < seen + 2:  # and after it
            time.sleep(0.1)
    finally:
        neighbour.stop.set()
        neighbour.join(timeout=120)
    failures = [err for rc, err in neighbour.results if rc != 0]
    assert not failures, failures[:3]
    assert len(neighbour.results) >= 3
    assert cluster.kubectl("get", "trainjob", "env-bomb", "-n", namespace, check=False).returncode != 0

    # The neighbour of the attack itself: a job at the CRD's limit of 128 entries is admitted and defaulted.
    ok = trainjob("env-at-limit", gpu_teams, env=env[:128])
    assert create(namespace_user, ok).returncode == 0
    stored = json.loads(cluster.kubectl("get", "trainjob", "env-at-limit", "-n", namespace, "-o", "json").stdout)
    assert len(stored["spec"]["trainer"]["env"]) == 128 and stored["metadata"]["labels"][QUEUE] == "team-gpu"


# --- 11: malformed specs are denials naming the field, never internal errors ----------------------------------------


MALFORMED = [
    ("runtimeRef as a string", lambda job: job["spec"].__setitem__("runtimeRef", "torch-distributed"),
     'spec.runtimeRef: Invalid value: "torch-distributed": must be of type object'),
    ("GPU quantity with a trailing blank",
     lambda job: job["spec"]["trainer"]["resourcesPerNode"]["limits"].__setitem__("nvidia.com/gpu", "8 "),
     'spec.trainer.resourcesPerNode.limits[nvidia.com/gpu]: Invalid value: "8 ": quantities must match'),
    ("numNodes as a string", lambda job: job["spec"]["trainer"].__setitem__("numNodes", "4"),
     'spec.trainer.numNodes: Invalid value: "4": must be of type integer'),
    ("env entry as a string", lambda job: job["spec"]["trainer"].__setitem__("env", ["NCCL_DEBUG=INFO"]),
     'spec.trainer.env[0]: Invalid value: "NCCL_DEBUG=INFO": must be of type object'),
    ("suspend as a string", lambda job: job["spec"].__setitem__("suspend", "yes"),
     'spec.suspend: Invalid value: "yes": must be of type boolean'),
    ("runtimePatches as a number", lambda job: job["spec"].__setitem__("runtimePatches", 3),
     "spec.runtimePatches: Invalid value: 3: must be of type array"),
]


def test_malformed_trainjobs_get_403_denials_naming_the_field(cluster, namespace, namespace_user, gpu_teams,
                                                                webhook_server):
    errors_before = webhook_server.metric("trainguard_admission_policy_errors_total")
    for case, corrupt, message in MALFORMED:
        job = trainjob(f"bad-{uuid.uuid4().hex[:6]}", gpu_teams)
        corrupt(job)
        proc = create(namespace_user, job)
        assert proc.returncode != 0, case
        assert "Error from server (Forbidden)" in proc.stderr and DENIED in proc.stderr, (case, proc.stderr)
        assert message in proc.stderr, (case, proc.stderr)
        assert "Internal error" not in proc.stderr and "internal error" not in proc.stderr, (case, proc.stderr)

    # UPDATE: a stored, well-formed job patched into a malformed one is denied the same way.
    assert create(namespace_user, trainjob("stored", gpu_teams)).returncode == 0
    stored = json.loads(cluster.kubectl("get", "trainjob", "stored", "-n", namespace, "-o", "json").stdout)
    assert stored["metadata"]["labels"][QUEUE] == "team-gpu"  # the neighbour: admitted and defaulted
    for body, message in (
        ({"spec": {"runtimePatches": [{"manager": "acme.io/x", "trainingRuntimeSpec": "replace-all"}]}},
         'spec.runtimePatches[0].trainingRuntimeSpec: Invalid value: "replace-all": must be of type object'),
        ({"spec": {"trainer": {"numNodes": "many"}}},
         'spec.trainer.numNodes: Invalid value: "many": must be of type integer'),
    ):
        proc = namespace_user.kubectl("patch", "trainjob", "stored", "--type", "merge", "-p", json.dumps(body),
                                      check=False)
        assert proc.returncode != 0, body
        assert "Error from server (Forbidden)" in proc.stderr and message in proc.stderr, proc.stderr
        assert "internal error" not in proc.stderr.lower(), proc.stderr
    # A well-formed update of the same job still goes through.
    assert namespace_user.kubectl("label", "trainjob", "stored", "note=ok").returncode == 0
    assert webhook_server.metric("trainguard_admission_policy_errors_total") == errors_before


# --- the door is never stricter than the CRD ------------------------------------------------------------------------


PLURALS = {"TrainJob": ("trainer.kubeflow.org", "trainjobs", True),
           "TrainingRuntime": ("trainer.kubeflow.org", "trainingruntimes", True),
           "ClusterTrainingRuntime": ("trainer.kubeflow.org", "clustertrainingruntimes", False),
           "TrainJobPolicy": ("trainguard.io", "trainjobpolicies", False),
           "DatasetCache": ("trainguard.io", "datasetcaches", True)}


def as_the_webhook_sees_it(value: Any, key: str = "") -> Any:
    """What the apiserver forwards: nulls of object properties dropped (no field is nullable), except in metadata,
    which it rebuilds from the typed ObjectMeta."""
    if isinstance(value, dict):
        return {k: as_the_webhook_sees_it(v, k) for k, v in value.items() if v is not None or key == "metadata"}
    if isinstance(value, list):
        return [as_the_webhook_sees_it(v) for v in value]
    return value


def test_everything_the_door_denies_the_crd_rejects_too(cluster, namespace, monkeypatch):
    """Hostile variants of the real objects that the door check refuses, created (dry run, no webhook registered
    for this namespace) against the CRDs: the apiserver's schema rejects every one, so the door never refuses an
    object the apiserver would store."""
    import random

    from kubernetes import client as k8s
    from kubernetes.client.rest import ApiException

    from tests.unit.policy.real_world import OBJECTS, mutate_once
    from trainguard.webhook.policy.well_formed import shape_errors

    # The apiserver answers objects with hundreds of unknown fields with a Warning header per field.
    monkeypatch.setattr(http.client, "_MAXHEADERS", 100_000)
    api = k8s.CustomObjectsApi(cluster.api_client())
    rng = random.Random(4)
    kinds = sorted(OBJECTS)
    checked = 0
    for i in range(3000):
        kind = kinds[i % len(kinds)]
        obj = as_the_webhook_sees_it(mutate_once(rng.choice(OBJECTS[kind]), rng))
        if not isinstance(obj.get("metadata"), dict):
            continue  # not an object the apiserver can even decode
        # trainguard's own caps (runtimes' replicatedJobs and containers, nesting) are stricter than the CRD on purpose
        errors = [e for e in shape_errors(kind, obj) if "trainguard's limit" not in e.detail]
        if not errors:
            continue
        group, plural, namespaced = PLURALS[kind]
        obj["metadata"] = {**obj["metadata"], "name": f"door-{i}"}
        try:
            if namespaced:
                obj["metadata"]["namespace"] = namespace
                api.create_namespaced_custom_object(group, "v1alpha1", namespace, plural, obj, dry_run="All")
            else:
                api.create_cluster_custom_object(group, "v1alpha1", plural, obj, dry_run="All")
        except ApiException as e:
            assert e.status in (400, 422), (kind, errors[0], e.status, e.body[:500])
        else:
            pytest.fail(f"the apiserver accepts a {kind} the door denies ({errors[0]}): {json.dumps(obj)[:2000]}")
        checked += 1
        if checked == 200:
            break
    assert checked == 200


# --- issue 22 part 5: what a denial costs is bounded ------------------------------------------------------------------


def ghost_patches(jobs: int = 100) -> list[dict[str, Any]]:
    """15 runtimePatches (the policy's own makes 16, the CRD's maxItems) naming ``jobs`` replicated jobs each that
    the runtime lacks: ~70 KB."""
    return [{"manager": f"acme.io/team-{p}", "trainingRuntimeSpec": {"template": {"spec": {"replicatedJobs": [
        {"name": f"t{p}-j{j}", "template": {"spec": {}}} for j in range(jobs)]}}}} for p in range(15)]


def test_missing_patch_targets_are_denied_quickly_with_a_bounded_message(cluster, namespace, namespace_user,
                                                                          gpu_teams):
    """Each of 1,500 errors rendered the whole 70 KB runtimePatches list before the duplicates were dropped: seconds
    of webhook CPU per apply (six in flight made other teams' reviews time out), and a 64 KB denial."""
    job = trainjob("ghost-targets", gpu_teams)
    job["spec"]["runtimePatches"] = ghost_patches()
    assert len(json.dumps(job)) > 60_000
    start = time.monotonic()
    proc = create(namespace_user, job)
    elapsed = time.monotonic() - start
    assert proc.returncode != 0 and "Error from server (Forbidden)" in proc.stderr and DENIED in proc.stderr, \
        proc.stderr[-2000:]
    assert "spec.runtimePatches: Invalid value: [{" in proc.stderr
    assert "bytes): must not have replicated job that doesn't exist in the runtime job template" in proc.stderr
    assert len(proc.stderr) < 10_000, len(proc.stderr)  # the 8 KiB quote of the list, not the list
    assert elapsed < ATTACK_BOUND_S, f"{elapsed:.1f}s"
    # UPDATE: a stored, suspended job given the same patches is denied the same way.
    stored = trainjob("ghost-update", gpu_teams)
    stored["spec"]["suspend"] = True
    assert create(namespace_user, stored).returncode == 0
    proc = namespace_user.kubectl("patch", "trainjob", "ghost-update", "--type", "json", "-p", json.dumps(
        [{"op": "add", "path": "/spec/runtimePatches/-", "value": p} for p in ghost_patches()[:14]]), check=False)
    assert proc.returncode != 0 and "Error from server (Forbidden)" in proc.stderr, proc.stderr[-2000:]
    assert "must not have replicated job that doesn't exist in the runtime job template" in proc.stderr
    assert len(proc.stderr) < 10_000, len(proc.stderr)


def big_runtime(name: str, jobs: int) -> dict[str, Any]:
    """A namespaced TrainingRuntime of ``jobs`` replicatedJobs, each ``dependsOn`` the one before (valid for JobSet)."""
    return {"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainingRuntime", "metadata": {"name": name},
            "spec": {"template": {"spec": {"replicatedJobs": [
                {"name": f"job-{i}", "template": {"spec": {"template": {"spec": {"containers": [
                    {"name": "c", "image": "busybox:1.36"}]}}}},
                 **({"dependsOn": [{"name": f"job-{i - 1}", "status": "Ready"}]} if i else {})}
                for i in range(jobs)]}}}}


def test_a_runtime_of_thousands_of_jobs_is_denied_at_the_door_naming_the_cap(cluster, namespace, namespace_user,
                                                                             gpu_teams):
    """The CRD caps no runtime's replicatedJobs; the dependsOn check was quadratic and listed every name in every
    message (a runtime of thousands of jobs drove the webhook past its memory limit). Now the door denies past 100,
    on CREATE and UPDATE; a runtime at the cap is admitted."""
    message = "spec.template.spec.replicatedJobs: Too many: 3000: must have at most 100 items (trainguard's limit " \
              "for runtimes)"
    start = time.monotonic()
    proc = create(namespace_user, big_runtime("huge", 3000))
    elapsed = time.monotonic() - start
    assert proc.returncode != 0 and "Error from server (Forbidden)" in proc.stderr, proc.stderr[-2000:]
    assert message in proc.stderr and len(proc.stderr) < 2_000, proc.stderr[-2000:]
    assert elapsed < ATTACK_BOUND_S, f"{elapsed:.1f}s"
    assert create(namespace_user, big_runtime("at-cap", 100)).returncode == 0
    grown = big_runtime("at-cap", 3000)
    grown["metadata"]["resourceVersion"] = json.loads(namespace_user.kubectl(
        "get", "trainingruntime", "at-cap", "-o", "json").stdout)["metadata"]["resourceVersion"]
    proc = namespace_user.kubectl("replace", "-f", "-", input=json.dumps(grown), check=False, timeout=120)
    assert proc.returncode != 0 and message in proc.stderr, proc.stderr[-2000:]
