"""A DatasetCache on a real node: the agent DaemonSet the chart's controller builds, as containerd runs it.

The test writes shard files with known content into a node directory (the node is this machine) that the chart's
``datasetCache.allowedHostPathRoots`` allows, creates a DatasetCache over them, and checks what really runs:

- one agent pod on the node, Ready, after its init container (the socket directory's chown) ran to completion;
- the agent process, seen from the host's /proc: UID and GID 65532 (non-root), the socket group among its groups,
  no capabilities, its root filesystem mounted read-only, the data source read-only;
- the socket in the node directory the TrainJob wiring mounts (mode 0660, group 64320);
- every shard resident in the node's page cache, and ``status.bytesResident`` equal to their total size.
"""

from __future__ import annotations

import json
import os
import stat
import uuid
from pathlib import Path

import pytest

from tests.node.node_harness import (  # noqa: F401 - fixtures
    SHARD_ROOT,
    NodeCluster,
    container_pid,
    dataset_cache,
    jobset,
    node_cluster_,
    process_status,
    ready,
    release,
    root_mount_options,
    wait_for,
    write_shards,
)
from trainguard.cache.pages import file_resident_bytes
from trainguard.webhook.runtime.dataset_cache import SOCKET_FILENAME, SOCKET_GROUP_ID, socket_host_directory

pytestmark = pytest.mark.node

AGENT_UID = 65532
SIZES = [3 << 20, 1 << 20, 5 << 20 | 123]  # not page multiples: the last page counts up to the end of the file


def agent_pods(c: NodeCluster, namespace: str, cache: str) -> list[dict]:
    return c.pods(namespace, f"app.kubernetes.io/component=dataset-cache-agent,trainguard.io/dataset-cache={cache}")


def test_the_agent_daemonset_warms_real_shards_and_reports_bytes_resident(release: NodeCluster) -> None:
    c = release
    namespace = f"node-cache-{uuid.uuid4().hex[:6]}"
    c.kubectl("create", "namespace", namespace)
    directory = SHARD_ROOT / namespace
    expected = write_shards(directory, SIZES)
    total = sum(SIZES)
    try:
        c.kubectl("create", "-f", "-", input=json.dumps(dataset_cache("shards", namespace, directory)))
        (pod,) = wait_for("one Ready agent pod", lambda: [p for p in agent_pods(c, namespace, "shards") if ready(p)],
                          180, diagnose=lambda: c.describe(namespace))
        assert pod["spec"]["nodeName"] == c.node_name

        # The chart's settings, as the kubelet applied them: the init container ran (and exited 0) first.
        (init,) = pod["status"]["initContainerStatuses"]
        assert init["name"] == "socket-dir"
        assert init["state"]["terminated"]["exitCode"] == 0, init
        (agent,) = pod["status"]["containerStatuses"]
        assert agent["image"].endswith("localhost/trainguard/trainguard:dev")
        pid = container_pid(c, pod, "agent")
        status = process_status(pid)
        assert status["Uid"].split() == [str(AGENT_UID)] * 4, status["Uid"]
        assert status["Gid"].split() == [str(AGENT_UID)] * 4, status["Gid"]
        assert str(SOCKET_GROUP_ID) in status["Groups"].split(), status["Groups"]
        assert int(status["CapEff"], 16) == 0 and int(status["CapPrm"], 16) == 0, status["CapEff"]
        assert status["NoNewPrivs"] == "1"
        assert "ro" in root_mount_options(pid), "the agent's root filesystem is writable"
        data_mount = [line.split() for line in Path(f"/proc/{pid}/mountinfo").read_text().splitlines()
                      if line.split()[4] == "/data"]
        assert data_mount and "ro" in data_mount[0][5].split(","), data_mount

        # The socket, where the TrainJob wiring mounts it from: reachable by the socket group only.
        sock = Path(socket_host_directory(namespace, "shards")) / SOCKET_FILENAME
        st = sock.stat()
        assert stat.S_ISSOCK(st.st_mode)
        assert stat.S_IMODE(st.st_mode) == 0o660 and st.st_gid == SOCKET_GROUP_ID and st.st_uid == AGENT_UID
        assert stat.S_IMODE(sock.parent.stat().st_mode) == 0o750

        # Warm: every shard resident in the page cache, and the status says so (summed from the agents' reports).
        def status_of() -> dict:
            return (c.get("datasetcache", "shards", "-n", namespace) or {}).get("status") or {}

        def warm() -> dict | None:
            status = status_of()
            return status if status.get("bytesResident") == total else None

        got = wait_for("status.bytesResident to reach the shards' size", warm, 120,
                       diagnose=lambda: f"status: {status_of()}\n{c.describe(namespace)}")
        assert got["shards"] == len(SIZES)
        assert got["nodesDesired"] == got["nodesReady"] == 1
        for name in expected:
            assert file_resident_bytes(str(directory / name)) == (directory / name).stat().st_size, name
        annotations = c.json("get", "pod", pod["metadata"]["name"], "-n", namespace)["metadata"]["annotations"]
        assert annotations["trainguard.io/cache-bytes-resident"] == str(total)
        assert annotations["trainguard.io/cache-warm"] == "true"
        print(f"agent pod {pod['metadata']['name']}: pid {pid} uid {AGENT_UID}, {total} bytes resident")
    finally:
        c.kubectl("delete", "datasetcache", "shards", "-n", namespace, "--ignore-not-found", "--wait=false",
                  check=False)
        for p in directory.glob("*.bin"):
            p.unlink()
        if directory.exists():
            os.rmdir(directory)
