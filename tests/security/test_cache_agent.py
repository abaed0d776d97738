"""Issue 10, attack 6: the node-local cache agent is reached only by the pods meant to use it.

Against the real apiserver, as a namespace user: the user's DatasetCache and TrainJob go through RBAC, the CRDs and
trainguard's webhooks, and the real ``trainguard controller`` builds the agent DaemonSet and the TrainJob's
JobSet. No kubelet runs here, so no pod starts; instead the test takes what the controller wrote to the apiserver
and runs it where it can be run honestly:

* the agent container's ``args`` are parsed by the real ``trainguard cache-agent`` parser and an agent is started
  with them (as the node would, on a temp socket, as root here);
* the trainer pod's ``securityContext`` (``runAsUser`` / ``supplementalGroups``) becomes the credentials of a forked
  client process (what the container runtime gives the container's processes), and a pod without that group
  becomes a client without it.

The attacks the user could try from the API are refused there: creating a pod that mounts the socket's host
directory (no pod rights; Pod Security baseline forbids hostPath for those who have them), and pointing a TrainJob
at another namespace's cache (the annotation names a cache of the TrainJob's own namespace; another name is
denied at admission).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Iterator

import pytest
import yaml
from kubernetes import client as k8s

from trainguard.cache import main as agent_main
from trainguard.cache.agent import AgentConfig, CacheAgent
from trainguard.cache.client import CacheClient, CacheError
from trainguard.controller.reconcile.cache_daemonset import agent_name
from tests.integration.reconcile.reconcile_harness import Api, ControllerProcess, wait_for
from tests.unit.cache.test_starvation import in_child
from trainguard.webhook.runtime.dataset_cache import DATASET_CACHE_ANNOTATION, SOCKET_GROUP_ID, socket_host_directory

TRAINGUARD = ("trainguard.io", "v1alpha1")

RUNTIME = {
    "apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainingRuntime",
    "metadata": {"name": "torch-distributed"},
    "spec": {"mlPolicy": {"numNodes": 1, "torch": {}}, "template": {"spec": {"replicatedJobs": [{
        "name": "node",
        "template": {"metadata": {"labels": {"trainer.kubeflow.org/trainjob-ancestor-step": "trainer"}},
                     "spec": {"template": {"spec": {
                         "securityContext": {"runAsUser": 1000, "runAsGroup": 1000},
                         "containers": [{"name": "node", "image": "pytorch:2"}]}}}},
    }]}}},
}


def dataset_cache(name: str) -> dict:
    return {"apiVersion": "trainguard.io/v1alpha1", "kind": "DatasetCache", "metadata": {"name": name},
            "spec": {"source": {"persistentVolumeClaim": {"claimName": "datasets"}, "shards": "*.bin"},
                     "memoryBudget": "1Gi"}}


def trainjob(name: str, cache: str) -> dict:
    return {"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
            "metadata": {"name": name, "annotations": {DATASET_CACHE_ANNOTATION: cache}},
            "spec": {"runtimeRef": {"name": "torch-distributed", "kind": "TrainingRuntime"}}}


def apply_when_cache_is_seen(user: Any, obj: dict) -> None:
    """Apply ``obj`` as ``user``; the webhook checks the cache in its watch cache, which lags creation briefly."""
    deadline = time.monotonic() + 30
    while True:
        result = user.kubectl("apply", "-f", "-", input=yaml.safe_dump(obj), check=False)
        if result.returncode == 0:
            return
        if "no DatasetCache" not in result.stderr or time.monotonic() > deadline:
            raise AssertionError(f"apply failed: {result.stderr}")
        time.sleep(0.2)


@pytest.fixture
def controllers(cluster: Any, namespace: str, tmp_path: Path) -> Iterator[list[ControllerProcess]]:
    started: list[ControllerProcess] = []
    yield started
    for proc in started:
        proc.kill()


class AgentFromArgs:
    """A real agent started from the args the controller rendered, on a temp socket, in a background loop."""

    def __init__(self, args: list[str], root: Path, socket_path: Path):
        parser = argparse.ArgumentParser()
        agent_main.configure(parser)
        parsed = parser.parse_args(args[1:])
        self.config = AgentConfig(root=str(root), socket_path=str(socket_path), http_port=None,
                                  maintain_interval=None, rescan_interval=3600.0, memory_budget=1 << 20,
                                  socket_group=parsed.socket_group, idle_timeout=parsed.idle_timeout,
                                  max_connections_per_peer=parsed.max_connections_per_peer)
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.agent = CacheAgent(self.config)
        asyncio.run_coroutine_threadsafe(self.agent.start(), self.loop).result(30)

    def stop(self) -> None:
        asyncio.run_coroutine_threadsafe(self.agent.stop(), self.loop).result(30)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)


def test_only_the_caches_trainer_pods_can_use_its_agent(
    cluster: Any, namespace: str, namespace_user: Any, admission: Any, controllers: list, tmp_path: Path
) -> None:
    user = namespace_user
    for obj in (dataset_cache("imagenet"), RUNTIME):
        user.kubectl("apply", "-f", "-", input=yaml.safe_dump(obj))
    apply_when_cache_is_seen(user, trainjob("llm", "imagenet"))
    proc = ControllerProcess(cluster.kubeconfig, namespace, "a", tmp_path)
    controllers.append(proc)
    proc.start()
    api = Api(cluster.api_client(), namespace)
    apps = k8s.AppsV1Api(api.core.api_client)
    daemonset = wait_for("agent DaemonSet", lambda: apps.read_namespaced_daemon_set(agent_name("imagenet"), namespace))
    agent_pod = api.core.api_client.sanitize_for_serialization(daemonset.spec.template.spec)
    jobset = wait_for("JobSet", lambda: api.jobset("llm"))
    trainer_pod = jobset["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]

    # The socket's directory is this cache's alone, and the trainer pods carry the socket's group.
    directory = socket_host_directory(namespace, "imagenet")
    agent_volumes = {v["name"]: v for v in agent_pod["volumes"]}
    assert agent_volumes["socket"]["hostPath"]["path"] == directory
    assert [v["hostPath"]["path"] for v in trainer_pod["volumes"] if "hostPath" in v] == [directory]
    assert SOCKET_GROUP_ID in trainer_pod["securityContext"]["supplementalGroups"]
    assert agent_pod["securityContext"]["supplementalGroups"] == [SOCKET_GROUP_ID]
    init_args = agent_pod["initContainers"][0]["args"]
    assert f"--socket-group={SOCKET_GROUP_ID}" in init_args  # the directory: 0750, agent:group

    # What those objects mean on a node: the agent with the rendered args, the trainer's credentials as a client.
    public = Path(tempfile.mkdtemp(prefix="trainguard-cache-sec-", dir="/tmp"))
    os.chmod(public, 0o755)  # traversable by the forked clients under other uids
    data = public / "data"
    data.mkdir()
    (data / "a.bin").write_bytes(b"x" * 4096)
    agent = AgentFromArgs(agent_pod["containers"][0]["args"], data, public / "agent.sock")
    try:
        st = os.stat(agent.config.socket_path)
        assert (st.st_mode & 0o777, st.st_gid) == (0o660, SOCKET_GROUP_ID)
        security = trainer_pod["securityContext"]

        def open_shard() -> Any:
            client = CacheClient(agent.config.socket_path, reconnect_timeout=0.2, busy_timeout=0)
            try:
                with client.open("a.bin") as shard:
                    return shard.size
            except CacheError as exc:
                return exc.code
            finally:
                client.close()

        served = in_child(open_shard, uid=security["runAsUser"], gid=security["runAsGroup"],
                          groups=security["supplementalGroups"])
        assert served == 4096
        # A container without the group (root, which passes the socket's mode bits) is refused by the agent.
        assert in_child(open_shard, uid=0, gid=0, groups=[]) == "Forbidden"
    finally:
        agent.stop()
        shutil.rmtree(public, ignore_errors=True)


def test_the_user_cannot_mount_the_socket_directory_or_borrow_another_namespaces_cache(
    cluster: Any, namespace: str, namespace_user: Any, admission: Any
) -> None:
    user = namespace_user
    other = f"{namespace}-other"
    cluster.kubectl("create", "namespace", other)
    try:
        cluster.kubectl("apply", "-n", other, "-f", "-", input=yaml.safe_dump(dataset_cache("private")))
        # A pod of the user's own mounting the other namespace's socket directory: no pod rights at all.
        pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "reach"},
               "spec": {"containers": [{"name": "c", "image": "busybox", "volumeMounts": [
                   {"name": "s", "mountPath": "/s"}]}],
                   "volumes": [{"name": "s", "hostPath": {"path": socket_host_directory(other, "private")}}]}}
        result = user.kubectl("apply", "-f", "-", input=yaml.safe_dump(pod), check=False)
        assert result.returncode != 0 and "forbidden" in result.stderr.lower()
        # A TrainJob naming the other namespace's cache: names resolve in the TrainJob's namespace, where there is
        # no such cache, so admission denies it (its pods would otherwise get this namespace's directory).
        user.kubectl("apply", "-f", "-", input=yaml.safe_dump(RUNTIME))
        result = user.kubectl("apply", "-f", "-", input=yaml.safe_dump(trainjob("borrow", "private")), check=False)
        assert result.returncode != 0
        assert 'no DatasetCache "private" in namespace' in result.stderr and "denied the request" in result.stderr
        # The legitimate neighbour: the same TrainJob naming a cache of the user's own namespace is admitted.
        user.kubectl("apply", "-f", "-", input=yaml.safe_dump(dataset_cache("mine")))
        apply_when_cache_is_seen(user, trainjob("own", "mine"))
    finally:
        cluster.kubectl("delete", "namespace", other, "--wait=false", check=False)

