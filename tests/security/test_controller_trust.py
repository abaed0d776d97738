"""Issue 10 items 1 (defence in depth), 2 and 3: the reconciler trusts nothing a namespace user can write.

Each test performs the attack as the ``namespace_user`` would (kubectl with the team's token) against the real
``trainguard controller``, whose own namespace (where it keeps runtime snapshots) is NOT the user's, and asserts the
attack fails while the legitimate neighbour still works.

1. A TrainJob that skipped admission (no webhook registered, as under ``failurePolicy: Ignore``) and that an Enforce
   TrainJobPolicy denies: no JobSet, ``trainguard.io/state: Blocked``, ``Suspended=True/PolicyDenied`` and one
   ``PolicyDenied`` event saying why; a compliant job beside it is built; relaxing the policy builds the blocked one.
   (Its Kueue quota handed back: ``tests/e2e/test_kueue_blocked.py``.)
2. The runtime snapshot: the user plants a snapshot (``<job>-runtime-snapshot`` with the TrainJob as owner, as older
   versions kept it, or ``runtime-snapshot-<uid>`` in their namespace) asking for ``privileged``, ``hostNetwork`` and
   an extra replicated job of 50 x 64 GPUs; the real one lives where the user cannot write (Forbidden). The JobSet
   stays what was admitted, re-applied while suspended and after the resume.
3. A 1.4 KB YAML alias bomb in such a ConfigMap: the controller never parses it, stays up, its RSS stays bounded, and
   it still builds new jobs.
Plus: the snapshot is garbage-collected when its TrainJob is deleted, and an orphan is swept at start.
"""

from __future__ import annotations

import json
import time
import uuid
from pathlib import Path
from typing import Any, Iterator

import pytest
import yaml

from tests.integration.reconcile.reconcile_harness import ControllerProcess, wait_for

ANCESTOR = "trainer.kubeflow.org/trainjob-ancestor-step"
STATE = "trainguard.io/state"


# ---- fixtures ---------------------------------------------------------------------------------------------------
@pytest.fixture
def controller_namespace(cluster: Any) -> Iterator[str]:
    """The controller's own namespace: the namespace user has no rights there."""
    name = f"trainguard-system-{uuid.uuid4().hex[:6]}"
    cluster.kubectl("create", "namespace", name)
    yield name
    cluster.kubectl("delete", "namespace", name, "--wait=false", check=False)


@pytest.fixture
def controller(cluster: Any, namespace: str, controller_namespace: str, tmp_path: Path,
               namespace_user: Any) -> Iterator[ControllerProcess]:
    cluster.kubectl("apply", "-n", namespace, "-f", "-", input=json.dumps(RUNTIME))
    proc = ControllerProcess(cluster.kubeconfig, namespace, "trust", tmp_path, snapshot_namespace=controller_namespace)
    proc.start()
    yield proc
    proc.kill()


@pytest.fixture
def policy(cluster: Any, namespace: str) -> Iterator[str]:
    """An Enforce TrainJobPolicy for this test's namespace only: at most 1 node."""
    name = f"max-one-node-{namespace[-6:]}"
    body = {"apiVersion": "trainguard.io/v1alpha1", "kind": "TrainJobPolicy", "metadata": {"name": name},
            "spec": {"mode": "Enforce",
                     "selector": {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}}},
                     "limits": {"maxNodes": 1}}}
    cluster.kubectl("apply", "-f", "-", input=json.dumps(body))
    yield name
    cluster.kubectl("delete", "trainjobpolicy", name, "--ignore-not-found", check=False)


# ---- objects ----------------------------------------------------------------------------------------------------
RUNTIME = {
    "apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainingRuntime", "metadata": {"name": "torch"},
    "spec": {"mlPolicy": {"numNodes": 1, "torch": {}}, "template": {"spec": {"replicatedJobs": [
        {"name": "node", "template": {"metadata": {"labels": {ANCESTOR: "trainer"}}, "spec": {"template": {"spec": {
            "containers": [{"name": "node", "image": "pytorch/pytorch:2.13.0"}]}}}}}]}}},
}


def trainjob(name: str, nodes: int = 1, suspend: bool = False) -> str:
    return json.dumps({"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob", "metadata": {"name": name},
                       "spec": {"runtimeRef": {"name": "torch", "kind": "TrainingRuntime"}, "suspend": suspend,
                                "trainer": {"numNodes": nodes}}})


def evil_runtime(namespace: str) -> dict:
    """What the attacker wants built: privileged, host network, and 50 x 64 GPUs admission never saw."""
    rt = json.loads(json.dumps(RUNTIME))
    rt["metadata"]["namespace"] = namespace
    pod = rt["spec"]["template"]["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]
    pod["hostNetwork"] = True
    pod["containers"][0]["securityContext"] = {"privileged": True}
    rt["spec"]["template"]["spec"]["replicatedJobs"].append(
        {"name": "miner", "replicas": 50, "template": {"spec": {"parallelism": 1, "template": {"spec": {
            "containers": [{"name": "m", "image": "evil/miner:1",
                            "resources": {"limits": {"nvidia.com/gpu": 64}}}]}}}}})
    return rt


def alias_bomb() -> str:
    """About 1.4 KB of YAML whose last alias expands to 9^9 (387 million) strings once serialized as JSON."""
    lines = ['a0: &a0 ["' + "x" * 550 + '"]']
    for i in range(1, 10):
        refs = ", ".join([f"*a{i - 1}"] * 9)
        lines.append(f"a{i}: &a{i} [{refs}]")
    lines.append("apiVersion: trainer.kubeflow.org/v1alpha1\nkind: TrainingRuntime\nmetadata: {name: torch}")
    lines.append("spec: {mlPolicy: {numNodes: 1, torch: {}}, template: {spec: {replicatedJobs: [{name: node, template: "
                 "{metadata: {labels: {" + ANCESTOR + ": trainer}}, spec: {template: {spec: {containers: "
                 "[{name: node, image: x, args: *a9}]}}}}}]}}}")
    return "\n".join(lines) + "\n"


def get(cluster: Any, kind: str, name: str, namespace: str) -> dict | None:
    out = cluster.kubectl("get", kind, name, "-n", namespace, "-o", "json", check=False)
    return json.loads(out.stdout) if out.returncode == 0 else None


def events_for(cluster: Any, namespace: str, name: str) -> list[dict]:
    out = json.loads(cluster.kubectl("get", "events.events.k8s.io", "-n", namespace, "-o", "json").stdout)
    return [e for e in out["items"] if (e.get("regarding") or {}).get("name") == name]


def rss_mib(proc: ControllerProcess) -> float:
    assert proc.proc is not None
    for line in Path(f"/proc/{proc.proc.pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


def reconciled_after(proc: ControllerProcess, before: float) -> bool:
    return proc.reconciles() > before


# ---- 1: a job that skipped admission ------------------------------------------------------------------------------
def test_a_job_that_skipped_admission_and_an_enforce_policy_denies_is_not_built(
        cluster, namespace, namespace_user, controller, policy) -> None:
    # No webhook is registered for this namespace: both CREATEs reach etcd unexamined, as under failurePolicy Ignore.
    namespace_user.kubectl("apply", "-f", "-", input=trainjob("too-big", nodes=8))
    namespace_user.kubectl("apply", "-f", "-", input=trainjob("fits", nodes=1))

    fits = wait_for("the compliant neighbour's JobSet", lambda: get(cluster, "jobset", "fits", namespace))
    assert fits["spec"]["suspend"] is False

    blocked = wait_for("too-big labelled Blocked", lambda: (
        (get(cluster, "trainjob", "too-big", namespace) or {}).get("metadata", {}).get("labels", {}).get(STATE)
        == "Blocked"))
    assert blocked
    assert get(cluster, "jobset", "too-big", namespace) is None
    denied = wait_for("a PolicyDenied event", lambda: [
        e for e in events_for(cluster, namespace, "too-big") if e["reason"] == "PolicyDenied"])
    assert denied[0]["type"] == "Warning"
    assert "spec.trainer.numNodes: Invalid value: 8: 8 nodes exceed maxNodes 1" in denied[0]["note"], denied[0]
    assert policy in denied[0]["note"]
    # Upstream's Suspended condition says it is held and why (never Resumed: nothing of it runs).
    held = wait_for("the PolicyDenied condition", lambda: next(
        (c for c in (get(cluster, "trainjob", "too-big", namespace).get("status") or {}).get("conditions") or []
         if c["type"] == "Suspended"), None))
    assert held["status"] == "True" and held["reason"] == "PolicyDenied", held
    assert "8 nodes exceed maxNodes 1" in held["message"] and policy in held["message"], held
    # The user cannot clear the block by editing the state label: the controller sets it back and builds nothing.
    namespace_user.kubectl("label", "trainjob", "too-big", f"{STATE}=Created", "--overwrite")
    wait_for("Blocked again", lambda: (get(cluster, "trainjob", "too-big", namespace) or {})
             .get("metadata", {}).get("labels", {}).get(STATE) == "Blocked")
    assert get(cluster, "jobset", "too-big", namespace) is None

    # The policy set changes (the admin allows 8 nodes): the blocked job is re-checked and built.
    cluster.kubectl("patch", "trainjobpolicy", policy, "--type=merge", "-p", '{"spec":{"limits":{"maxNodes":8}}}')
    built = wait_for("too-big built once allowed", lambda: get(cluster, "jobset", "too-big", namespace))
    assert built["spec"]["replicatedJobs"][0]["template"]["spec"]["parallelism"] == 8
    # Resumed once built: the Suspended condition is gone (trainguard's difference) and the resume time stored.
    resumed = wait_for("Resumed once built", lambda: (s := get(cluster, "trainjob", "too-big", namespace)
                                                       .get("status") or {}).get("lastResumeTime") and s)
    assert not [c for c in resumed.get("conditions") or [] if c["type"] == "Suspended"], resumed
    # One PolicyDenied for the one denial, however often the job was reconciled while blocked.
    assert len([e for e in events_for(cluster, namespace, "too-big") if e["reason"] == "PolicyDenied"]) == 1


# ---- 2: the runtime snapshot --------------------------------------------------------------------------------------
def test_a_user_written_runtime_snapshot_changes_nothing(
        cluster, namespace, namespace_user, controller, controller_namespace, policy) -> None:
    namespace_user.kubectl("apply", "-f", "-", input=trainjob("victim", nodes=1, suspend=True))
    original = wait_for("the suspended JobSet", lambda: get(cluster, "jobset", "victim", namespace))
    job = get(cluster, "trainjob", "victim", namespace)
    uid = job["metadata"]["uid"]
    real = f"runtime-snapshot-{uid}"
    assert get(cluster, "configmap", real, controller_namespace) is not None
    assert get(cluster, "configmap", "victim-runtime-snapshot", namespace) is None

    # The real snapshot is out of reach: the user may not read, replace or delete anything in the controller's
    # namespace.
    for verb in ("get", "create", "update", "patch", "delete"):
        assert not namespace_user.can_i(verb, "configmaps", "-n", controller_namespace), verb
    evil = evil_runtime(namespace)
    forged = {"apiVersion": "v1", "kind": "ConfigMap",
              "metadata": {"name": real, "namespace": controller_namespace},
              "data": {"runtime.json": json.dumps(evil)}}
    for attempt in (("apply", "-f", "-"), ("replace", "-f", "-"), ("delete", "configmap", real)):
        out = namespace_user.kubectl("-n", controller_namespace, *attempt, input=json.dumps(forged), check=False)
        assert out.returncode != 0 and "forbidden" in out.stderr.lower(), (attempt, out.stderr)

    # What the user can write: snapshots in their own namespace, the old name with the TrainJob as controlling owner
    # (as v2.3 and older trainguard kept it; YAML under "runtime") and the new name (JSON under "runtime.json").
    owner = {"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob", "name": "victim", "uid": uid,
             "controller": True}
    labels = {"trainguard.io/runtime-snapshot-of-namespace": namespace, "trainguard.io/runtime-snapshot-of-name": "victim",
              "trainguard.io/runtime-snapshot-of-uid": uid}
    before = controller.reconciles()
    namespace_user.kubectl("apply", "-f", "-", input=yaml.safe_dump_all([
        {"apiVersion": "v1", "kind": "ConfigMap",
         "metadata": {"name": "victim-runtime-snapshot", "ownerReferences": [owner]},
         "data": {"runtime": yaml.safe_dump(evil), "runtime.json": json.dumps(evil)}},
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": real, "labels": labels,
                                                             "ownerReferences": [owner]},
         "data": {"runtime.json": json.dumps(evil)}},
    ]))
    # The owned ConfigMap requeues the (suspended) TrainJob, whose JobSet is re-applied on every reconcile.
    wait_for("a reconcile after the plant", lambda: reconciled_after(controller, before))
    time.sleep(1)
    assert get(cluster, "jobset", "victim", namespace)["spec"] == original["spec"]

    # The resume (what Kueue does once it admits the workload) re-applies the JobSet, unsuspended.
    namespace_user.kubectl("patch", "trainjob", "victim", "--type=merge", "-p", '{"spec":{"suspend":false}}')
    resumed = wait_for("the resumed JobSet", lambda: (js := get(cluster, "jobset", "victim", namespace))
                       and js["spec"].get("suspend") is False and js)
    assert [rj["name"] for rj in resumed["spec"]["replicatedJobs"]] == ["node"]
    pod = resumed["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]
    assert "hostNetwork" not in pod and "securityContext" not in pod["containers"][0]
    assert pod["containers"][0]["image"] == "pytorch/pytorch:2.13.0"
    assert {**resumed["spec"], "suspend": True} == original["spec"]


# ---- 3: a YAML alias bomb -----------------------------------------------------------------------------------------
def test_a_yaml_alias_bomb_does_not_take_the_controller_down(
        cluster, namespace, namespace_user, controller) -> None:
    bomb = alias_bomb()
    assert 1200 < len(bomb) < 1600
    namespace_user.kubectl("apply", "-f", "-", input=trainjob("target", nodes=1, suspend=True))
    uid = wait_for("target's UID", lambda: (get(cluster, "trainjob", "target", namespace) or {})
                   .get("metadata", {}).get("uid"))
    wait_for("target's JobSet", lambda: get(cluster, "jobset", "target", namespace))
    baseline = rss_mib(controller)

    owner = {"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob", "name": "target", "uid": uid,
             "controller": True}
    before = controller.reconciles()
    for name in ("target-runtime-snapshot", f"runtime-snapshot-{uid}"):
        namespace_user.kubectl("apply", "-f", "-", input=json.dumps(
            {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "ownerReferences": [owner]},
             "data": {"runtime": bomb, "runtime.json": bomb}}))
    wait_for("a reconcile after the bomb", lambda: reconciled_after(controller, before))

    # Still up, still working: a new job is built, and the memory did not grow with the bomb.
    namespace_user.kubectl("apply", "-f", "-", input=trainjob("after-bomb", nodes=1))
    wait_for("a JobSet built after the bomb", lambda: get(cluster, "jobset", "after-bomb", namespace))
    assert controller.alive(), controller.log()
    grown = rss_mib(controller) - baseline
    assert grown < 64, f"controller RSS grew by {grown:.0f} MiB after the alias bomb"
    assert "Traceback" not in controller.log()


# ---- the snapshot's life cycle ------------------------------------------------------------------------------------
def test_snapshots_are_collected_with_their_trainjob_and_orphans_at_start(
        cluster, namespace, namespace_user, controller_namespace, tmp_path) -> None:
    cluster.kubectl("apply", "-n", namespace, "-f", "-", input=json.dumps(RUNTIME))
    # An orphan left by a TrainJob deleted while no controller ran, and a foreign ConfigMap that must survive.
    orphan = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {
        "name": "runtime-snapshot-gone", "namespace": controller_namespace, "labels": {
            "trainguard.io/runtime-snapshot-of-namespace": namespace, "trainguard.io/runtime-snapshot-of-name": "gone",
            "trainguard.io/runtime-snapshot-of-uid": "gone"}}, "data": {"runtime.json": "{}"}}
    foreign = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "keep-me", "namespace": controller_namespace}}
    cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump_all([orphan, foreign]))

    proc = ControllerProcess(cluster.kubeconfig, namespace, "gc", tmp_path, snapshot_namespace=controller_namespace)
    proc.start()
    try:
        wait_for("the orphan swept at start",
                 lambda: get(cluster, "configmap", "runtime-snapshot-gone", controller_namespace) is None)
        namespace_user.kubectl("apply", "-f", "-", input=trainjob("short-lived"))
        uid = wait_for("its UID", lambda: (get(cluster, "trainjob", "short-lived", namespace) or {})
                       .get("metadata", {}).get("uid"))
        snapshot = f"runtime-snapshot-{uid}"
        made = wait_for("its snapshot", lambda: get(cluster, "configmap", snapshot, controller_namespace))
        assert made["immutable"] is True and "ownerReferences" not in made["metadata"]
        assert json.loads(made["data"]["runtime.json"])["metadata"]["name"] == "torch"
        namespace_user.kubectl("delete", "trainjob", "short-lived")
        wait_for("the snapshot collected with its TrainJob",
                 lambda: get(cluster, "configmap", snapshot, controller_namespace) is None)
        assert get(cluster, "configmap", "keep-me", controller_namespace) is not None
        assert proc.alive()
    finally:
        proc.kill()
