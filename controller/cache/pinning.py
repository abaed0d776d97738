"""CUDA host registration of mapped shards: ``pin(view)`` makes host-to-device copies DMA straight from the page
cache the agent keeps resident. Standard library only (ctypes on ``libcudart``, found at call time), so a training
image without CUDA imports the client and gets ``PinningUnavailable`` saying why only when it asks to pin.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
from dataclasses import dataclass
from typing import Any

from trainguard.cache.pages import buffer_address

ENV_CUDART = "TRAINGUARD_CUDART"


class PinningUnavailable(RuntimeError):
    """CUDA host registration cannot be used here; the message names the reason."""


_CUDA_HOST_REGISTER_PORTABLE = 0x01
_CUDA_HOST_REGISTER_READ_ONLY = 0x08  # required for PROT_READ mappings such as ours
_CUDA_DEV_ATTR_HOST_REGISTER_READ_ONLY_SUPPORTED = 113
_CUDART_NAMES = ("libcudart.so", "libcudart.so.13", "libcudart.so.12", "libcudart.so.11.0")


@dataclass
class PinnedRange:
    """A registered range; ``view`` is an export of its own over the pinned buffer, so the mapping stays mapped
    until ``unpin`` even when the ``Shard`` is closed meanwhile (``Shard.close`` then leaves the unmapping to
    the last reference)."""

    address: int
    length: int
    view: memoryview
    _cudart: Any

    def unpin(self) -> None:
        if self.address:
            _check(self._cudart, self._cudart.cudaHostUnregister(ctypes.c_void_p(self.address)), "cudaHostUnregister")
            self.address = 0
            self.view.release()

    def __enter__(self) -> "PinnedRange":
        return self

    def __exit__(self, *exc: object) -> None:
        self.unpin()


def load_cudart() -> Any:
    """The CUDA runtime library, or ``PinningUnavailable`` naming what was tried."""
    candidates = [os.environ[ENV_CUDART]] if os.environ.get(ENV_CUDART) else []
    found = ctypes.util.find_library("cudart")
    candidates += ([found] if found else []) + list(_CUDART_NAMES)
    errors = []
    for name in candidates:
        try:
            return ctypes.CDLL(name)
        except OSError as exc:
            errors.append(f"{name}: {exc}")
    raise PinningUnavailable(
        "CUDA runtime (libcudart) not found, so the shard cannot be registered for DMA; tried "
        + "; ".join(errors)
        + f". Install the CUDA runtime or point {ENV_CUDART} at it."
    )


def pin(view: memoryview, *, device: int = 0) -> PinnedRange:
    """Register the pages behind ``view`` with CUDA (read-only, portable) for direct host-to-device DMA.

    ``view`` must be a non-empty contiguous buffer (a ``Shard.view`` or a slice of it). The returned range holds
    an export of the buffer until ``unpin``, so closing the shard first cannot unmap pages CUDA still has
    registered.
    """
    if isinstance(device, bool) or not isinstance(device, int) or device < 0:
        raise ValueError(f"device must be a CUDA device ordinal (int >= 0), not {device!r}")
    held = memoryview(view)  # TypeError for a non-buffer; a new export keeps the mapping alive
    if not held.contiguous or held.nbytes == 0:
        held.release()
        raise ValueError("can pin only a non-empty contiguous view")
    try:
        return _register(held, device)
    except BaseException:
        held.release()
        raise


def _register(held: memoryview, device: int) -> PinnedRange:
    cudart = load_cudart()
    count = ctypes.c_int(0)
    err = cudart.cudaGetDeviceCount(ctypes.byref(count))
    if err != 0 or count.value == 0:
        raise PinningUnavailable(f"no CUDA device visible (cudaGetDeviceCount: {_error_name(cudart, err)})")
    if device >= count.value:
        raise ValueError(f"device {device} does not exist ({count.value} CUDA device(s) visible)")
    supported = ctypes.c_int(0)
    err = cudart.cudaDeviceGetAttribute(
        ctypes.byref(supported), _CUDA_DEV_ATTR_HOST_REGISTER_READ_ONLY_SUPPORTED, device
    )
    if err != 0 or not supported.value:
        raise PinningUnavailable(f"device {device} cannot register read-only host memory ({_error_name(cudart, err)})")
    address, length = buffer_address(held)
    flags = _CUDA_HOST_REGISTER_PORTABLE | _CUDA_HOST_REGISTER_READ_ONLY
    _check(cudart, cudart.cudaHostRegister(ctypes.c_void_p(address), ctypes.c_size_t(length), flags), "cudaHostRegister")
    return PinnedRange(address, length, held, cudart)


def unpin(pinned: PinnedRange) -> None:
    pinned.unpin()


def _error_name(cudart: Any, err: int) -> str:
    try:
        cudart.cudaGetErrorString.restype = ctypes.c_char_p
        return f"error {err}: {cudart.cudaGetErrorString(err).decode()}"
    except Exception:
        return f"error {err}"


def _check(cudart: Any, err: int, call: str) -> None:
    if err != 0:
        raise RuntimeError(f"{call} failed: {_error_name(cudart, err)}")
