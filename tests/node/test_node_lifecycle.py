"""``hack/node.sh``: a node comes up, runs a real pod whose output ``kubectl logs`` returns, refuses a second ``up``,
and ``down`` leaves the host exactly as ``up`` found it.

The host is read here with code of its own (not hack/node_host.py's, which does the restoring): sysctls of the
network, netfilter, bridge, kernel and vm families; every iptables table of both families and the whole nftables
ruleset, packet counters aside; every mount; the top-level directories of every cgroup hierarchy; interfaces,
addresses and routes; the paths a node writes; listening sockets. Left out, because other programs open and close
them while the test runs on a shared development machine: loopback listeners on ephemeral ports (the node's own
loopback ports are compared), and what an image build running beside it mounts under /tmp and the images cache and
its ``buildkit`` cgroup (``make test-node`` builds the images before pytest; the node uses neither place). Every
process ``up`` started must be gone.

This test brings up a node of its own, before the session's ``real_node`` (conftest.py orders it first): kubelet's
ports are fixed, one node per machine.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import time
from pathlib import Path

import pytest

from tests.node.conftest import IMAGES, POD_CIDR, hack, node_down, node_up, require_host_tools

pytestmark = pytest.mark.node

SYSCTL_DIRS = ("net/ipv4/conf/all", "net/ipv4/conf/default", "net/ipv6/conf/all", "net/ipv6/conf/default",
               "net/bridge", "net/netfilter", "kernel/keys")
SYSCTLS = ("net/ipv4/ip_forward", "kernel/panic", "kernel/panic_on_oops", "vm/overcommit_memory", "vm/panic_on_oom")
# What changes by itself while the machine runs.
VOLATILE_SYSCTL = re.compile(r"count$|_count$")
NODE_PATHS = ("/var/lib/trainguard-node", "/run/trainguard-node", "/var/lib/kubelet", "/var/log/containers",
              "/var/log/pods", "/var/lib/cni", "/run/netns", "/run/containerd", "/var/lib/containerd", "/etc/cni",
              "/opt/cni", "/opt/containerd", "/run/nri", "/etc/kubernetes")
NODE_LOOPBACK_PORTS = {10248, 10249, 10256}
# What an image build (hack/images.sh: BuildKit, debootstrap; both in /tmp and the images cache) mounts and the
# cgroup BuildKit makes, while it runs beside the node on a development machine. The node uses neither place.
IMAGE_BUILD_MOUNTS = re.compile("^(/tmp/|" + re.escape(str(Path.home() / ".cache/trainguard/images/")) + ")")
IMAGE_BUILD_CGROUPS = {"buildkit"}


def sysctls() -> dict[str, str]:
    out = {}
    for d in SYSCTL_DIRS:
        for path in sorted(Path("/proc/sys", d).rglob("*")):
            if path.is_file() and not VOLATILE_SYSCTL.search(path.name):
                try:
                    out[str(path.relative_to("/proc/sys"))] = path.read_text().strip()
                except OSError:
                    pass  # write-only (stable_secret) or not readable here
    for key in SYSCTLS:
        out[key] = Path("/proc/sys", key).read_text().strip()
    return out


def command(*args: str) -> str:
    return subprocess.run(args, check=True, capture_output=True, text=True).stdout


def iptables(tool: str) -> list[str]:
    lines = command(tool).splitlines()
    return [re.sub(r" \[\d+:\d+\]$", "", line) for line in lines if not line.startswith("#")]


def nft_ruleset() -> list[str]:
    return [re.sub(r"counter packets \d+ bytes \d+", "counter", line) for line in command("nft", "list", "ruleset")
            .splitlines()]


def mounts() -> list[str]:
    out = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        fields = line.split()
        sep = fields.index("-")
        if IMAGE_BUILD_MOUNTS.match(fields[4]):
            continue
        out.append(f"{fields[4]} root={fields[3]} {fields[sep + 1]} {fields[sep + 2]}")
    return sorted(out)


def cgroup_tops() -> dict[str, list[str]]:
    out = {}
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        fields = line.split()
        if fields[fields.index("-") + 1] in ("cgroup", "cgroup2"):
            out[fields[4]] = sorted(e.name for e in os.scandir(fields[4])
                                    if e.is_dir() and e.name not in IMAGE_BUILD_CGROUPS)
    return out


def listeners() -> list[str]:
    out = []
    for line in command("ss", "-ltnuH").splitlines():
        proto, local = line.split()[0], line.split()[4]
        host, _, port = local.rpartition(":")
        loopback = host.startswith("127.") or host in ("[::1]", "localhost")
        if loopback and int(port) not in NODE_LOOPBACK_PORTS:
            continue
        out.append(f"{proto} {local}")
    return sorted(set(out))


def host_state() -> dict[str, object]:
    return {
        "sysctl": sysctls(),
        "iptables": iptables("iptables-save"),
        "ip6tables": iptables("ip6tables-save"),
        "nft": nft_ruleset(),
        "mounts": mounts(),
        "cgroups": cgroup_tops(),
        "links": sorted(re.sub(r"^\d+: ", "", ln).split()[0] for ln in command("ip", "-o", "link", "show").splitlines()),
        "addresses": sorted(" ".join(ln.split()[1:4]) for ln in command("ip", "-o", "addr", "show").splitlines()),
        "routes": sorted(command("ip", "route", "show", "table", "all").splitlines()),
        "paths": {p: os.path.lexists(p) for p in NODE_PATHS},
        "listening": listeners(),
    }


def differences(before: dict[str, object], after: dict[str, object]) -> list[str]:
    out = []
    for key, was in before.items():
        now = after[key]
        if was == now:
            continue
        if isinstance(was, dict):
            for k in sorted(set(was) | set(now)):
                if was.get(k) != now.get(k):
                    out.append(f"{key} {k}: before {was.get(k)!r}, after {now.get(k)!r}")
        else:
            out += [f"{key}: gone: {x}" for x in was if x not in now]
            out += [f"{key}: new: {x}" for x in now if x not in was]
    return out


def pod_manifest(name: str) -> dict:
    # The pod reaches the apiserver the way in-cluster clients do: the `kubernetes` Service ClusterIP from its
    # environment (kube-proxy's rules), the CA and token kubelet mounted, the serving certificate's IP SAN.
    script = (
        "import json, ssl, urllib.request\n"
        "print('hello from a real pod', flush=True)\n"
        "sa = '/var/run/secrets/kubernetes.io/serviceaccount'\n"
        "import os\n"
        "url = 'https://%s:%s/version' % (os.environ['KUBERNETES_SERVICE_HOST'], os.environ['KUBERNETES_SERVICE_PORT'])\n"
        "req = urllib.request.Request(url, headers={'Authorization': 'Bearer ' + open(sa + '/token').read()})\n"
        "ctx = ssl.create_default_context(cafile=sa + '/ca.crt')\n"
        "print('apiserver', json.load(urllib.request.urlopen(req, context=ctx, timeout=10))['gitVersion'], flush=True)\n"
    )
    return {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "default"},
        "spec": {"restartPolicy": "Never", "containers": [{
            "name": "main", "image": IMAGES["base"], "imagePullPolicy": "Never",
            "command": ["python3", "-c", script]}]},
    }


def alive(pid: int) -> bool:
    # An exited process stays in the table as a zombie until whoever adopted it reaps it (node.sh's children are
    # orphans by then); it holds no port, file or memory, so it counts as gone.
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def still_running(pids: dict[str, int], within: float = 15.0) -> list[str]:
    # A SIGKILLed process in uninterruptible I/O (etcd's fsync on a busy disk) leaves a moment after the signal.
    deadline = time.monotonic() + within
    while (left := [name for name, pid in pids.items() if alive(pid)]) and time.monotonic() < deadline:
        time.sleep(0.2)
    return left


def test_up_runs_a_pod_refuses_a_second_up_and_down_puts_the_host_back(tmp_path: Path) -> None:
    status = hack("node.sh", "status")
    assert status.returncode == 1, f"a node is already up on this machine; `hack/node.sh down` first:\n{status.stdout}"
    require_host_tools()  # the snapshot below reads the host with them, before node.sh could install any
    before = host_state()

    node = node_up(tmp_path / "logs", images=("pause", "base"))
    down_seconds = None
    try:
        status = hack("node.sh", "status")
        assert status.returncode == 0, status.stderr
        pids = {name: int(pid) for name, pid in re.findall(r"^(\S+): running, pid (\d+)$", status.stdout, re.M)}
        assert set(pids) == {"kube-scheduler", "kube-controller-manager", "kube-proxy", "kubelet", "containerd"}, \
            status.stdout
        for line in Path(node.kubeconfig.parent, "etcd.pid"), Path(node.kubeconfig.parent, "kube-apiserver.pid"):
            pids[line.stem] = int(line.read_text())

        second = hack("node.sh", "up", timeout=60)
        assert second.returncode != 0
        assert "already up" in second.stderr, second.stderr

        nodes = json.loads(node.kubectl("get", "nodes", "-o", "json").stdout)["items"]
        (real,) = [n for n in nodes if n["metadata"]["name"] == node.node_name]
        assert {"type": "InternalIP", "address": node.address} in real["status"]["addresses"]

        node.kubectl("apply", "-f", "-", input=json.dumps(pod_manifest("hello")))
        deadline = time.monotonic() + 120
        while True:
            pod = json.loads(node.kubectl("get", "pod", "hello", "-o", "json").stdout)
            if pod["status"].get("phase") in ("Succeeded", "Failed") or time.monotonic() > deadline:
                break
            time.sleep(1)
        logs = node.kubectl("logs", "hello", check=False)
        assert pod["status"].get("phase") == "Succeeded", \
            f"{json.dumps(pod['status'], indent=1)}\nlogs:\n{logs.stdout}{logs.stderr}"
        assert pod["spec"]["nodeName"] == node.node_name
        assert pod["status"]["podIP"].startswith(POD_CIDR.rsplit(".", 1)[0] + ".")
        assert logs.stdout.splitlines() == ["hello from a real pod", "apiserver v1.35.4"], logs.stderr
        print(f"node up in {node.up_seconds:.1f} s")
    finally:
        t0 = time.monotonic()
        down = node_down(tmp_path / "logs")
        down_seconds = time.monotonic() - t0
    assert down.returncode == 0, down.stderr
    print(f"node down in {down_seconds:.1f} s")

    assert still_running(pids) == []
    assert hack("node.sh", "status").returncode == 1
    after = host_state()
    found = differences(before, after)
    assert not found, "the host is not as `up` found it:\n" + "\n".join(found) + f"\n\nnode.sh down said:\n{down.stderr}"
