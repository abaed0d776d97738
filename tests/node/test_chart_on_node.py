"""The chart's real pods on a real node: ``helm install`` of ``charts/trainguard`` with the image built from the
project's ``Dockerfile``, containers run by containerd and runc under the kubelet.

- Two webhook pods become Ready behind the Service (its EndpointSlice lists both pod IPs), their processes run as
  the chart says (UID 65532, no capabilities, read-only root filesystem), and ``kubectl apply`` goes through them: a TrainJob a policy denies shows the webhook's message, one it mutates is stored mutated.
- The controller pods elect one leader: the Lease's holder is one of the two running pods.
- A rolling ``helm upgrade`` (a changed webhook argument: new pods, old ones drained) while a loop creates TrainJobs
  as a namespace user: every create admitted and mutated, none failed.
- ``helm uninstall`` leaves no Validating/MutatingWebhookConfiguration (a leftover Fail-policy webhook with no pods
  would block every TrainJob in the cluster).
"""

from __future__ import annotations

import json
import time

import pytest

from tests.node.node_harness import (  # noqa: F401 - fixtures
    CHART,
    NAMESPACE,
    RELEASE,
    ApplyLoop,
    PLAIN_RUNTIME,
    NodeCluster,
    component_selector,
    container_pid,
    jobset,
    node_cluster_,
    process_status,
    ready,
    release,
    root_mount_options,
    trainjob,
    uninstall_chart,
    wait_for,
    webhook_configurations,
)

pytestmark = pytest.mark.node

GPU_POLICY = {
    "apiVersion": "trainguard.io/v1alpha1", "kind": "TrainJobPolicy",
    "metadata": {"name": "node-gpu-teams"},
    "spec": {"mode": "Enforce", "selector": {"namespaceSelector": {"matchLabels": {"trainguard.io/tier": "gpu"}}},
             "scheduling": {"kueue": {"queueName": "team-gpu"}}, "limits": {"maxGpusPerNode": 8}},
}
TEAM = "node-team-a"


def suspended(job: dict) -> dict:
    """Created suspended: these TrainJobs exercise admission only; nothing should run for them on the node."""
    job["spec"]["suspend"] = True
    return job


def webhook_pods(c: NodeCluster) -> list[dict]:
    return [p for p in c.pods(NAMESPACE, component_selector("webhook")) if not p["metadata"].get("deletionTimestamp")]


def endpoint_addresses(c: NodeCluster) -> set[str]:
    slices = c.json("get", "endpointslices", "-n", NAMESPACE, "-l",
                    f"kubernetes.io/service-name={RELEASE}-webhook")["items"]
    return {a for s in slices for e in s.get("endpoints") or [] if (e.get("conditions") or {}).get("ready")
            for a in e["addresses"]}


@pytest.fixture
def policy_namespace(release: NodeCluster) -> str:
    c = release
    c.kubectl("apply", "--server-side", "-f", "-", input=json.dumps(PLAIN_RUNTIME))
    c.kubectl("apply", "--server-side", "-f", "-", input=json.dumps(GPU_POLICY))
    if c.get("namespace", TEAM) is None:
        c.kubectl("create", "namespace", TEAM)
    c.kubectl("label", "namespace", TEAM, "trainguard.io/tier=gpu", "--overwrite")
    return TEAM


def test_two_webhook_pods_serve_kubectl_apply_through_the_service(release: NodeCluster,
                                                                    policy_namespace: str) -> None:
    c = release
    pods = webhook_pods(c)
    assert len(pods) == 2, [p["metadata"]["name"] for p in pods]
    for pod in pods:
        assert ready(pod), pod["status"]
        assert pod["spec"]["nodeName"] == c.node_name
        (container,) = pod["status"]["containerStatuses"]
        assert container["image"].endswith("localhost/trainguard/trainguard:dev"), container["image"]
        assert container["containerID"].startswith("containerd://")
        # The chart's security settings, as runc applied them (the node is this machine: its /proc shows the
        # container's process): UID 65532, no capabilities, a read-only root filesystem.
        pid = container_pid(c, pod, "webhook")
        status = process_status(pid)
        assert status["Uid"].split() == ["65532"] * 4 and int(status["CapEff"], 16) == 0, status
        assert "ro" in root_mount_options(pid), "the webhook's root filesystem is writable"
    # The Service's endpoints are the two pods' own IPs on the node's bridge: the apiserver reaches them there.
    assert endpoint_addresses(c) == {p["status"]["podIP"] for p in pods}

    admitted = json.loads(c.kubectl("create", "-o", "json", "-f", "-",
                                    input=json.dumps(suspended(trainjob("fits", TEAM, gpus=8)))).stdout)
    assert admitted["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "team-gpu"
    stored = c.json("get", "trainjob", "fits", "-n", TEAM)
    assert stored["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "team-gpu"

    denied = c.kubectl("create", "-f", "-", input=json.dumps(suspended(trainjob("too-big", TEAM, gpus=16))),
                       check=False)
    assert denied.returncode != 0
    assert 'admission webhook "validator.trainjob.trainer.kubeflow.org" denied the request' in denied.stderr
    assert "exceed maxGpusPerNode 8" in denied.stderr, denied.stderr
    assert c.get("trainjob", "too-big", "-n", TEAM) is None


def test_controller_pods_elect_one_leader(release: NodeCluster) -> None:
    c = release
    pods = wait_for("two Ready controller pods",
                    lambda: [p for p in c.pods(NAMESPACE, component_selector("controller")) if ready(p)]
                    if len([p for p in c.pods(NAMESPACE, component_selector("controller")) if ready(p)]) == 2
                    else None, 120, diagnose=lambda: c.describe(NAMESPACE))
    names = {p["metadata"]["name"] for p in pods}
    lease = wait_for("the controller Lease to have a holder",
                     lambda: (lambda l: l if l and l["spec"].get("holderIdentity") else None)(
                         c.get("lease", f"{RELEASE}-controller", "-n", NAMESPACE)), 60)
    assert lease["spec"]["holderIdentity"] in names, (lease["spec"], names)
    # One leader: the other replica stands by (its readiness does not depend on holding the Lease).
    renewed = lease["spec"]["renewTime"]
    time.sleep(lease["spec"].get("leaseDurationSeconds", 15) / 3 + 1)
    again = c.json("get", "lease", f"{RELEASE}-controller", "-n", NAMESPACE)
    assert again["spec"]["holderIdentity"] == lease["spec"]["holderIdentity"]
    assert again["spec"]["renewTime"] != renewed, "the leader does not renew its Lease"


def test_rolling_helm_upgrade_loses_no_admission_and_uninstall_leaves_no_webhook(
        release: NodeCluster, policy_namespace: str) -> None:
    c = release
    before = {p["metadata"]["name"] for p in webhook_pods(c)}
    loop = ApplyLoop(c, TEAM, lambda name: suspended(trainjob(name, TEAM, gpus=8)))
    loop.start()
    started = time.monotonic()
    try:
        time.sleep(2)
        # A changed webhook argument changes the pod template: the Deployment replaces both pods, one at a time.
        c.helm("upgrade", RELEASE, str(CHART), "-n", NAMESPACE, "--reuse-values", "--set",
               "webhook.policyWorkers=3", "--wait", "--timeout", "300s", timeout=360)
        rolled = time.monotonic() - started
        # The old pods drain after the rollout: keep applying through their termination.
        wait_for("the old webhook pods to be gone",
                 lambda: not {p["metadata"]["name"] for p in c.pods(NAMESPACE, component_selector("webhook"))}
                 & before, 240, every=1)
    finally:
        loop.halt.set()
        loop.join(timeout=60)
    after = webhook_pods(c)
    assert len(after) == 2 and not {p["metadata"]["name"] for p in after} & before, (before, after)
    for pod in after:
        (container,) = pod["spec"]["containers"]
        assert "--policy-workers=3" in container["args"]
    assert endpoint_addresses(c) == {p["status"]["podIP"] for p in after}
    unlabelled = [j["metadata"]["name"] for j in loop.created
                  if (j["metadata"].get("labels") or {}).get("kueue.x-k8s.io/queue-name") != "team-gpu"]
    print(f"rolling upgrade: rollout {rolled:.1f} s; {len(loop.created)} TrainJobs created during the upgrade and "
          f"the old pods' drain, {len(loop.failures)} failed")
    assert len(loop.created) >= 20, len(loop.created)
    assert unlabelled == [], f"created without the policy's mutation: {unlabelled}"
    assert loop.failures == [], (f"{len(loop.failures)} of {len(loop.failures) + len(loop.created)} TrainJob "
                                 f"creates failed during the rolling upgrade: {loop.failures[:3]}")

    assert len(webhook_configurations(c)) == 2
    uninstall_chart(c)
    assert webhook_configurations(c) == [], "helm uninstall left a webhook configuration behind"
    # Nothing blocks a TrainJob now: no webhook is registered, none answers.
    c.kubectl("create", "-f", "-", input=json.dumps(suspended(trainjob("after-uninstall", TEAM, gpus=16))))
    assert c.get("deployment", f"{RELEASE}-webhook", "-n", NAMESPACE) is None
    c.kubectl("delete", "trainjobs", "--all", "-n", TEAM, "--wait=false")
