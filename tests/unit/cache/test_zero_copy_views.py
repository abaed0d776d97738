"""``Shard.numpy()`` is a view over the shard's file mapping, not a copy: through the agent's descriptor and directly.

Three observations a copy would fail: the array's first byte lies inside a mapping of the shard's own file (same
inode, in /proc/self/maps); a write to the file through another descriptor shows through the array already made
(one page cache, shared); reading every byte of the array adds file-backed, not anonymous, memory (a control copy in
the same test shows the measure sees a copy). ``Shard.torch()`` gets the same three observations, and a live tensor
outliving ``close()``, in ``test_torch_zero_copy.py``, under the torch environment ``hack/torch-env.sh`` caches.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Iterator

import numpy
import pytest

from trainguard.cache.client import CacheClient

BIG = 32 << 20


@pytest.fixture(params=["direct", "agent"])
def client(request: pytest.FixtureRequest, dataset: Path, start_agent: Any) -> Iterator[CacheClient]:
    if request.param == "direct":
        c = CacheClient(socket_path="", dataset_root=str(dataset))
    else:
        c = CacheClient(start_agent(dataset).config.socket_path)
    assert c.mode == request.param
    yield c
    c.close()


def file_mapping_of(address: int) -> tuple[int, int, int]:
    """(start, end, inode) of the mapping in this process that holds ``address``."""
    with open("/proc/self/maps") as maps:
        for line in maps:
            fields = line.split()
            start, end = (int(x, 16) for x in fields[0].split("-"))
            if start <= address < end:
                return start, end, int(fields[4])
    raise AssertionError(f"address {address:#x} is in no mapping of this process")


def data_address(arr: numpy.ndarray) -> int:
    return arr.__array_interface__["data"][0]


def status_kib(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise AssertionError(f"{field} not in /proc/self/status")


@pytest.mark.parametrize("dtype, itemsize", [("uint8", 1), ("<u4", 4), (numpy.float64, 8)])
def test_the_array_lies_in_the_shards_file_mapping(client: CacheClient, dataset: Path, dtype: Any,
                                                   itemsize: int) -> None:
    with client.open("train/shard-1.bin") as shard:
        arr = shard.numpy(dtype)
        assert arr.dtype.itemsize == itemsize and arr.nbytes == shard.size == 8192
        assert not arr.flags.writeable  # the pages are the cache's: a write would change every reader's data
        start, end, inode = file_mapping_of(data_address(arr))
        assert inode == os.stat(dataset / "train" / "shard-1.bin").st_ino
        assert start <= data_address(arr) and data_address(arr) + arr.nbytes <= end
        assert data_address(arr) == data_address(numpy.frombuffer(shard.view, dtype="uint8"))


def test_a_write_to_the_file_shows_through_the_array(client: CacheClient, dataset: Path) -> None:
    path = dataset / "train" / "shard-2.bin"
    with client.open("train/shard-2.bin") as shard:
        arr = shard.numpy()
        assert arr[100] == 3 and arr[4095] == 3
        fd = os.open(path, os.O_WRONLY)
        try:
            os.pwrite(fd, b"\x7f", 100)
            os.pwrite(fd, b"\x80", 4095)
        finally:
            os.close(fd)
        assert (arr[100], arr[4095], arr[101]) == (0x7F, 0x80, 3)


def test_reading_every_byte_adds_no_anonymous_memory(client: CacheClient, dataset: Path) -> None:
    (dataset / "big.bin").write_bytes(bytes(range(256)) * (BIG // 256))
    with client.open("big.bin") as shard:
        arr = shard.numpy()
        anon, files = status_kib("RssAnon"), status_kib("RssFile")
        total = int(arr.sum(dtype=numpy.uint64))
        anon_read, files_read = status_kib("RssAnon") - anon, status_kib("RssFile") - files
        copy = numpy.array(arr)  # the control: what a copying view would cost
        anon_copy = status_kib("RssAnon") - anon
        assert total == sum(range(256)) * (BIG // 256)
        assert int(copy[-1]) == 255 and data_address(copy) != data_address(arr)
    assert anon_read < 4 << 10, f"reading the view added {anon_read} KiB of anonymous memory"
    assert files_read > (BIG >> 10) * 9 // 10, f"reading the view mapped only {files_read} KiB of the file"
    assert anon_copy > (BIG >> 10) * 9 // 10, f"the control copy added only {anon_copy} KiB: the measure is blind"


def test_closing_the_shard_leaves_a_live_array_valid(client: CacheClient, dataset: Path) -> None:
    shard = client.open("train/shard-0.bin")
    arr = shard.numpy()
    shard.close()  # the mapping stays while the array holds it, as Shard.close says
    with pytest.raises(ValueError):  # the shard's own view is released
        shard.view.nbytes
    assert int(arr[0]) == 1 and int(arr[-1]) == 1 and arr.nbytes == 3 * 4096 + 5
    assert file_mapping_of(data_address(arr))[2] == os.stat(dataset / "train" / "shard-0.bin").st_ino
