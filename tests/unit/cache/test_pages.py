"""Residency measurement, warming and eviction on a real (ext4/xfs) file: tmpfs would keep every page resident."""

from __future__ import annotations

import mmap
import os
from pathlib import Path

import pytest

from trainguard.cache import pages


@pytest.fixture
def data_file(tmp_path: Path) -> Path:
    path = tmp_path / "f.bin"
    path.write_bytes(os.urandom(64 * pages.PAGE_SIZE + 100))
    with open(path, "rb") as f:
        os.fsync(f.fileno())  # dirty pages cannot be dropped; make them clean
    return path


def test_warm_then_evict_changes_residency(data_file: Path) -> None:
    size = data_file.stat().st_size
    fd = os.open(data_file, os.O_RDONLY)
    try:
        pages.evict(fd, size)
        if pages.file_resident_bytes(fd) == size:
            pytest.fail("the test directory's filesystem keeps pages resident (tmpfs?); residency cannot be tested")
        pages.warm(fd, size)
        assert pages.file_resident_bytes(fd) == size  # the partial last page counts only up to EOF
        pages.evict(fd, size)
        assert pages.file_resident_bytes(fd) == 0
    finally:
        os.close(fd)


def test_empty_file_is_never_resident(tmp_path: Path) -> None:
    path = tmp_path / "empty"
    path.write_bytes(b"")
    assert pages.file_resident_bytes(str(path)) == 0
    fd = os.open(path, os.O_RDONLY)
    pages.warm(fd, 0)
    pages.evict(fd, 0)
    os.close(fd)


def test_buffer_address_accepts_read_only_mappings(data_file: Path) -> None:
    with open(data_file, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mapping:
        view = memoryview(mapping)
        address, length = pages.buffer_address(view)
        assert address % pages.PAGE_SIZE == 0 and length == len(mapping)
        _, sliced_length = pages.buffer_address(view[10:20])
        assert pages.buffer_address(view[10:20])[0] == address + 10 and sliced_length == 10
        view.release()
