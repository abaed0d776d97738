"""Client library: stdlib-only import, direct-read fallback, configuration errors, CUDA pinning unavailable."""

from __future__ import annotations

import logging
import subprocess
import sys
from pathlib import Path

import pytest

from trainguard.cache import client as client_module, pinning
from trainguard.cache.client import CacheClient, CacheError, CacheUnavailable, PinningUnavailable, open_shard, pin


def test_client_imports_only_the_standard_library() -> None:
    code = (
        "import sys; before = set(sys.modules); import trainguard.cache.client; "
        "extra = {m.split('.')[0] for m in set(sys.modules) - before} - set(sys.stdlib_module_names) "
        "- {'trainguard'}; print(sorted(extra))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_fallback_reads_directly_and_says_so(
    dataset: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TRAINGUARD_CACHE_SOCKET", str(tmp_path / "no-agent.sock"))
    monkeypatch.setenv("TRAINGUARD_DATASET_ROOT", str(dataset))
    with caplog.at_level(logging.WARNING, logger="trainguard.cache.client"):
        direct = CacheClient()
    assert direct.mode == "direct"
    assert "no agent socket" in caplog.text and str(dataset) in caplog.text
    with open_shard("train/shard-2.bin", client=direct) as shard:
        assert shard.source == "direct" and shard.view.readonly
        assert bytes(shard.view) == (dataset / "train" / "shard-2.bin").read_bytes()
    assert [s.name for s in direct.list_shards()][:2] == ["empty.bin", "train/alias.bin"]
    assert direct.stat("train/shard-1.bin").size == 8192


@pytest.mark.parametrize(
    "name, code",
    [("../secret.txt", "InvalidName"), ("/etc/passwd", "InvalidName"), ("train/escape.bin", "OutsideRoot"),
     ("train/nope.bin", "NotFound")],
)
def test_fallback_refuses_what_the_agent_refuses(dataset: Path, name: str, code: str) -> None:
    direct = CacheClient(socket_path="", dataset_root=str(dataset))
    with pytest.raises(CacheError) as err:
        direct.open(name)
    assert err.value.code == code


def test_no_configuration_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TRAINGUARD_CACHE_SOCKET", raising=False)
    monkeypatch.delenv("TRAINGUARD_DATASET_ROOT", raising=False)
    with pytest.raises(CacheUnavailable, match="TRAINGUARD_CACHE_SOCKET.*TRAINGUARD_DATASET_ROOT"):
        CacheClient()


def test_agent_configured_but_absent_times_out_clearly(tmp_path: Path) -> None:
    waiting = CacheClient(str(tmp_path / "later.sock"), reconnect_timeout=0.2)
    assert waiting.mode == "agent"  # the agent may still be starting: no silent fallback
    with pytest.raises(CacheUnavailable, match="unreachable"):
        waiting.open("a.bin")


def test_agent_errors_surface_with_their_code(dataset: Path, start_agent: object) -> None:
    agent = start_agent(dataset)  # type: ignore[operator]
    c = CacheClient(agent.config.socket_path)
    with pytest.raises(CacheError) as err:
        c.open("train/missing.bin")
    assert err.value.code == "NotFound"
    c.close()


def test_default_client_follows_the_environment(
    dataset: Path, start_agent: object, monkeypatch: pytest.MonkeyPatch
) -> None:
    agent = start_agent(dataset)  # type: ignore[operator]
    monkeypatch.setenv("TRAINGUARD_CACHE_SOCKET", agent.config.socket_path)
    monkeypatch.setattr(client_module, "_default", None)
    with open_shard("train/shard-1.bin") as shard:
        assert shard.source == "agent" and shard.size == 8192
    client_module.default_client().close()
    monkeypatch.setattr(client_module, "_default", None)


def test_numpy_and_torch_views_need_their_packages(dataset: Path) -> None:
    direct = CacheClient(socket_path="", dataset_root=str(dataset))
    with direct.open("train/shard-2.bin") as shard:
        for method, package in ((shard.numpy, "numpy"), (shard.torch, "torch")):
            try:
                __import__(package)
            except ImportError:
                with pytest.raises(ImportError):
                    method()
            else:
                assert len(method()) == shard.size


def test_pin_without_cuda_runtime_names_the_reason(dataset: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRAINGUARD_CUDART", "/nonexistent/libcudart.so")
    monkeypatch.setattr(pinning, "_CUDART_NAMES", ("libcudart-missing.so",))
    monkeypatch.setattr(pinning.ctypes.util, "find_library", lambda name: None)
    direct = CacheClient(socket_path="", dataset_root=str(dataset))
    with direct.open("train/shard-1.bin") as shard:
        with pytest.raises(PinningUnavailable, match="libcudart.*not found.*TRAINGUARD_CUDART"):
            pin(shard.view)


def test_pin_without_a_device_names_the_reason(dataset: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    class NoDevices:
        """A CUDA runtime that reports no device, as libcudart does on a node without GPUs."""

        @staticmethod
        def cudaGetDeviceCount(count: object) -> int:
            return 100  # cudaErrorNoDevice

        class cudaGetErrorString:  # noqa: N801 - mirrors the C symbol
            restype = None

            def __new__(cls, err: int) -> bytes:
                return b"no CUDA-capable device is detected"

    monkeypatch.setattr(pinning, "load_cudart", lambda: NoDevices)
    direct = CacheClient(socket_path="", dataset_root=str(dataset))
    with direct.open("train/shard-1.bin") as shard:
        with pytest.raises(PinningUnavailable, match="no CUDA device visible.*no CUDA-capable device"):
            pin(shard.view)
