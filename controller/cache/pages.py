"""Page-cache primitives on mapped files: buffer addresses, residency (mincore), warming and eviction.

Standard library only (ctypes + libc), because the client library imports ``buffer_address`` too.

Why these calls:
* ``mincore`` reports which pages of a *file mapping* are in the page cache, whoever brought them in; it neither
  faults pages in nor maps them, so measuring does not disturb what is measured.
* Warming goes through ``madvise(MADV_WILLNEED)`` (kernel readahead for the whole range) and then reads any pages
  still missing, because WILLNEED is advice the kernel may cut short.
* Eviction needs two steps: ``MADV_DONTNEED`` drops *our* page-table entries (a mapped page cannot be dropped),
  then ``posix_fadvise(POSIX_FADV_DONTNEED)`` drops the clean, now unmapped pages from the page cache. Pages that
  a training process still maps stay resident, which is what we want.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import mmap
import os

PAGE_SIZE = mmap.PAGESIZE

_libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
_libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.POINTER(ctypes.c_ubyte)]
_libc.mincore.restype = ctypes.c_int


class _PyBuffer(ctypes.Structure):
    """CPython's ``Py_buffer`` (stable layout since 3.3), to read the address behind a buffer object."""

    _fields_ = [
        ("buf", ctypes.c_void_p),
        ("obj", ctypes.py_object),
        ("len", ctypes.c_ssize_t),
        ("itemsize", ctypes.c_ssize_t),
        ("readonly", ctypes.c_int),
        ("ndim", ctypes.c_int),
        ("format", ctypes.c_char_p),
        ("shape", ctypes.POINTER(ctypes.c_ssize_t)),
        ("strides", ctypes.POINTER(ctypes.c_ssize_t)),
        ("suboffsets", ctypes.POINTER(ctypes.c_ssize_t)),
        ("internal", ctypes.c_void_p),
    ]


_get_buffer = ctypes.pythonapi.PyObject_GetBuffer
_get_buffer.argtypes = [ctypes.py_object, ctypes.POINTER(_PyBuffer), ctypes.c_int]
_get_buffer.restype = ctypes.c_int
_release_buffer = ctypes.pythonapi.PyBuffer_Release
_release_buffer.argtypes = [ctypes.POINTER(_PyBuffer)]
_release_buffer.restype = None
_PYBUF_SIMPLE = 0


def buffer_address(obj: object) -> tuple[int, int]:
    """(address, length) of a contiguous buffer, read-only ones included.

    ``ctypes.c_char.from_buffer`` refuses read-only buffers such as ``mmap(ACCESS_READ)``; the buffer protocol
    itself does not. The address stays valid only while ``obj`` (and the mapping behind it) is alive.
    """
    view = _PyBuffer()
    _get_buffer(obj, ctypes.byref(view), _PYBUF_SIMPLE)
    try:
        return int(view.buf or 0), int(view.len)
    finally:
        _release_buffer(ctypes.byref(view))


def resident_pages(mapping: mmap.mmap) -> bytearray:
    """One byte per page of ``mapping``; bit 0 set when the page is in the page cache."""
    length = len(mapping)
    pages = (length + PAGE_SIZE - 1) // PAGE_SIZE
    if pages == 0:
        return bytearray()
    address, _ = buffer_address(mapping)
    vec = (ctypes.c_ubyte * pages)()
    if _libc.mincore(ctypes.c_void_p(address), ctypes.c_size_t(length), vec) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"mincore: {os.strerror(err)}")
    return bytearray(vec)


def resident_bytes(mapping: mmap.mmap) -> int:
    """Bytes of ``mapping`` resident in the page cache (the last page counts only up to the end of the file)."""
    vec = resident_pages(mapping)
    # The kernel writes 0 or 1 per page (the other bits are reserved as zero); count in C, not in a loop.
    count = len(vec) - vec.count(0)
    if count and vec[-1] & 1:
        tail = len(mapping) % PAGE_SIZE
        if tail:
            return (count - 1) * PAGE_SIZE + tail
    return count * PAGE_SIZE


def file_resident_bytes(path_or_fd: str | int) -> int:
    """Bytes of a file resident in the page cache, mapping it briefly (empty files: 0)."""
    fd = os.open(path_or_fd, os.O_RDONLY | os.O_CLOEXEC) if isinstance(path_or_fd, str) else path_or_fd
    try:
        size = os.fstat(fd).st_size
        if size == 0:
            return 0
        with mmap.mmap(fd, size, access=mmap.ACCESS_READ) as mapping:
            return resident_bytes(mapping)
    finally:
        if isinstance(path_or_fd, str):
            os.close(fd)


def warm(fd: int, size: int, chunk: int = 8 << 20) -> None:
    """Bring a whole file into the page cache: readahead advice first, then read what is still missing."""
    if size == 0:
        return
    with mmap.mmap(fd, size, access=mmap.ACCESS_READ) as mapping:
        mapping.madvise(mmap.MADV_WILLNEED)
        vec = resident_pages(mapping)
    buf = bytearray(min(chunk, size))
    pages_per_chunk = max(1, chunk // PAGE_SIZE)
    for first_page in range(0, len(vec), pages_per_chunk):
        window = vec[first_page : first_page + pages_per_chunk]
        if window.count(0) == 0:
            continue
        offset = first_page * PAGE_SIZE
        os.preadv(fd, [memoryview(buf)[: min(chunk, size - offset)]], offset)


def evict(fd: int, size: int) -> None:
    """Drop a file's clean pages from the page cache (pages still mapped by other processes stay)."""
    if size == 0:
        return
    with mmap.mmap(fd, size, access=mmap.ACCESS_READ) as mapping:
        mapping.madvise(mmap.MADV_DONTNEED)
    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
