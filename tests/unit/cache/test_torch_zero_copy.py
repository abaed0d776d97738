"""``Shard.torch()`` is a tensor over the shard's file mapping, not a copy: through the agent's descriptor and directly.

torch is not a test dependency (the index carries only its ~5.7 GB CUDA build), so this runs under the environment
``hack/torch-env.sh`` keeps outside the repo (hash-checked from hack/torch-env/requirements.lock; ``make test``
builds it when missing, hence the ``tools`` mark). The client is not installed there: a training image gets it with
``--no-deps``, so the script puts only this checkout's ``controller/cache`` on the path, as ``trainguard.cache``, and
the interpreter runs isolated (``-I``). One script per mode makes every observation (``import torch`` costs seconds)
and the tests below judge them; what each shows is what a copy would fail, as in test_zero_copy_views.py for numpy:
the tensor's first byte lies inside a mapping of the shard's own file (same inode, /proc/self/maps); a write to the
file through another descriptor shows through a tensor already made; reading every element adds file-backed, not
anonymous, memory (a ``clone()`` in the same run shows the measure sees a copy); ``Shard.close()`` while a tensor
still holds the pages leaves it readable, as the docstring says.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any, Iterator

import pytest

from tests.unit.cache.conftest import AgentThread
from trainguard.cache.agent import AgentConfig

pytestmark = pytest.mark.tools

REPO = Path(__file__).resolve().parents[3]
BIG = 32 << 20
SIZES = {"shard-0.bin": 3 * 4096 + 5, "shard-1.bin": 8192, "shard-2.bin": 8192}

SCRIPT = r"""
import json, os, sys
sys.path.insert(0, sys.argv[1])
mode, root, socket_path = sys.argv[2:5]
import warnings
warnings.simplefilter("always")
import torch
import trainguard.cache.client
from trainguard.cache.client import CacheClient


def mapping_of(address):
    with open("/proc/self/maps") as maps:
        for line in maps:
            fields = line.split()
            start, end = (int(x, 16) for x in fields[0].split("-"))
            if start <= address < end:
                return [start, end, int(fields[4])]
    return None


def status_kib(field):
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith(field + ":"):
                return int(line.split()[1])


def emit(section, value):  # one line per section, flushed: a crash later still leaves what came before
    print(json.dumps({section: value}), flush=True)


client = CacheClient(socket_path) if mode == "agent" else CacheClient(socket_path="", dataset_root=root)
emit("client", {"file": trainguard.cache.client.__file__, "mode": client.mode, "torch": torch.__version__})
with warnings.catch_warnings(record=True) as caught:
    # dtypes: the default, and views of the same bytes as wider elements (reinterpreted in place, not converted)
    shard = client.open("shard-1.bin")
    views = {}
    for name in ("default", "uint8", "int32", "float64"):
        t = shard.torch() if name == "default" else shard.torch(getattr(torch, name))
        ptr = t.data_ptr()
        views[name] = {"dtype": str(t.dtype), "numel": t.numel(), "itemsize": t.element_size(),
                              "ptr": ptr, "mapping": mapping_of(ptr), "device": str(t.device),
                              "first": t[0].item(), "last": t[-1].item()}
    del t
    shard.close()
    emit("views", views)

    # a write through another descriptor shows through the tensor already made
    with client.open("shard-2.bin") as shard:
        t = shard.torch()
        before = [t[100].item(), t[4095].item(), t[101].item()]
        fd = os.open(os.path.join(root, "shard-2.bin"), os.O_WRONLY)
        try:
            os.pwrite(fd, b"\x7f", 100)
            os.pwrite(fd, b"\x80", 4095)
        finally:
            os.close(fd)
        emit("write", {"before": before, "after": [t[100].item(), t[4095].item(), t[101].item()]})
        del t

    # reading every element maps the file's pages; only a copy adds anonymous memory
    # the first reduction big enough to be split over threads starts the pool (stacks, arenas): out of the measure
    torch.ones(1 << 22, dtype=torch.uint8).sum(dtype=torch.int64)
    with client.open("big.bin") as shard:
        t = shard.torch()
        anon, files = status_kib("RssAnon"), status_kib("RssFile")
        total = int(t.sum(dtype=torch.int64))
        anon_read, files_read = status_kib("RssAnon") - anon, status_kib("RssFile") - files
        copy = t.clone()
        anon_copy = status_kib("RssAnon") - anon
        emit("memory", {"total": total, "anon_read": anon_read, "files_read": files_read, "anon_copy": anon_copy,
                        "copy_last": copy[-1].item(), "copy_elsewhere": copy.data_ptr() != t.data_ptr()})
        del t, copy

    # close() while a tensor holds the pages: the shard's own view goes, the mapping lives on for the tensor
    shard = client.open("shard-0.bin")
    t = shard.torch()
    shard.close()
    try:
        shard.view.nbytes
        released = False
    except ValueError:
        released = True
    del shard
    emit("closed", {"view_released": released, "first": t[0].item(), "last": t[-1].item(), "numel": t.numel(),
                    "sum": int(t.sum(dtype=torch.int64)), "mapping": mapping_of(t.data_ptr())})
emit("warnings", sorted({str(w.message) for w in caught}))
client.close()
"""


class Observed:
    """What one run of SCRIPT printed, section by section, and how it ended."""

    def __init__(self, sections: dict[str, Any], returncode: int, stderr: str):
        self.sections, self.returncode, self.stderr = sections, returncode, stderr

    def __getitem__(self, section: str) -> Any:
        if section not in self.sections:
            pytest.fail(f"the torch script ended (exit {self.returncode}; -11 is a segfault) before its {section!r} "
                        f"observation:\n{self.stderr[-4000:]}")
        return self.sections[section]


def torch_python() -> Path:
    """The cached environment's interpreter; a clear failure (how to build it) when it is not there."""
    env = subprocess.run([str(REPO / "hack" / "torch-env.sh"), "path"], check=True, capture_output=True, text=True,
                         timeout=60).stdout.strip()
    if not (Path(env) / ".complete").exists():
        pytest.fail(f"no torch environment at {env}: run hack/torch-env.sh (make tools builds it; ~5.7 GB)")
    return Path(env) / "bin" / "python"


@pytest.fixture(scope="module")
def client_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A path entry holding only ``trainguard.cache``: this checkout's controller/cache, nothing else of the repo."""
    path = tmp_path_factory.mktemp("client")
    (path / "trainguard").mkdir()
    (path / "trainguard" / "cache").symlink_to(REPO / "controller" / "cache")
    return path


@pytest.fixture(scope="module", params=["direct", "agent"])
def observed(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory,
             client_path: Path) -> Iterator[tuple[Observed, Path]]:
    python = torch_python()
    root = tmp_path_factory.mktemp("data")
    for i, (name, size) in enumerate(SIZES.items()):
        (root / name).write_bytes(bytes([i + 1]) * size)
    (root / "big.bin").write_bytes(bytes(range(256)) * (BIG // 256))
    agent = None
    socket_path = ""
    if request.param == "agent":
        socket_path = str(root.parent / "agent.sock")
        agent = AgentThread(AgentConfig(root=str(root), socket_path=socket_path, http_port=None,
                                        maintain_interval=None, rescan_interval=3600.0,
                                        memory_budget=1 << 30)).start()
    try:
        run = subprocess.run([str(python), "-I", "-c", SCRIPT, str(client_path), request.param, str(root),
                              socket_path], capture_output=True, text=True, timeout=300)
    finally:
        if agent is not None:
            agent.stop()
    sections: dict[str, Any] = {}
    for line in run.stdout.splitlines():
        sections.update(json.loads(line))
    result = Observed(sections, run.returncode, run.stderr)
    assert result["client"]["mode"] == request.param
    assert Path(result["client"]["file"]).resolve() == REPO / "controller" / "cache" / "client.py"
    yield result, root


@pytest.mark.parametrize("name, dtype, itemsize, first", [
    ("default", "torch.uint8", 1, 2),
    ("uint8", "torch.uint8", 1, 2),
    ("int32", "torch.int32", 4, 0x02020202),  # the shard's bytes read as int32, not each byte converted
    ("float64", "torch.float64", 8, None),
])
def test_the_tensor_lies_in_the_shards_file_mapping(observed: tuple[Observed, Path], name: str, dtype: str,
                                                    itemsize: int, first: int | None) -> None:
    result, root = observed
    view = result["views"][name]
    assert (view["dtype"], view["itemsize"], view["numel"], view["device"]) == (
        dtype, itemsize, SIZES["shard-1.bin"] // itemsize, "cpu")
    if first is not None:
        assert view["first"] == view["last"] == first
    assert view["mapping"] is not None, f"the {name} tensor's data is in no mapping of the process"
    start, end, inode = view["mapping"]
    assert inode == os.stat(root / "shard-1.bin").st_ino, "the tensor's data is not in the shard file's mapping"
    assert start <= view["ptr"] and view["ptr"] + view["numel"] * itemsize <= end
    assert view["ptr"] == result["views"]["default"]["ptr"]  # every dtype over the same first byte


def test_a_write_to_the_file_shows_through_the_tensor(observed: tuple[Observed, Path]) -> None:
    write = observed[0]["write"]
    assert write["before"] == [3, 3, 3]
    assert write["after"] == [0x7F, 0x80, 3]


def test_reading_every_element_adds_no_anonymous_memory(observed: tuple[Observed, Path]) -> None:
    memory = observed[0]["memory"]
    assert memory["total"] == sum(range(256)) * (BIG // 256)
    assert memory["copy_last"] == 255 and memory["copy_elsewhere"]
    assert memory["anon_read"] < 4 << 10, f"reading the tensor added {memory['anon_read']} KiB of anonymous memory"
    assert memory["files_read"] > (BIG >> 10) * 9 // 10, f"reading mapped only {memory['files_read']} KiB"
    assert memory["anon_copy"] > (BIG >> 10) * 9 // 10, f"the control clone added {memory['anon_copy']} KiB: blind"


def test_closing_the_shard_leaves_a_live_tensor_valid(observed: tuple[Observed, Path]) -> None:
    """Shard.close's docstring: the mapping lives while a tensor references the pages (torch.frombuffer holds
    the object it was given, not the buffer export: over the shard's own view this read was a segfault)."""
    result, root = observed
    closed = result["closed"]
    assert closed["view_released"]
    assert (closed["first"], closed["last"], closed["numel"]) == (1, 1, SIZES["shard-0.bin"])
    assert closed["sum"] == SIZES["shard-0.bin"]
    assert closed["mapping"] is not None and closed["mapping"][2] == os.stat(root / "shard-0.bin").st_ino


def test_the_script_ends_cleanly_with_only_torchs_read_only_notice(observed: tuple[Observed, Path]) -> None:
    """Shard.torch's docstring: torch warns that the buffer is not writable (writing would fault). Nothing else."""
    result = observed[0]
    warnings = result["warnings"]
    assert result.returncode == 0, result.stderr[-4000:]
    assert warnings and all("not writable" in w for w in warnings), warnings
