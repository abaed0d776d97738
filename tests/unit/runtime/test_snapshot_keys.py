"""Runtime snapshot ConfigMap (build, read back, owner/kind checks) and key material."""

from __future__ import annotations

import pytest
import yaml

from webhook.runtime import InvalidRuntimeSnapshot, build_runtime_snapshot, generated_keys, placeholder_keys, runtime_from_snapshot
from webhook.runtime.keys import z85_encode

from .fixtures import LLM_DDP, PLAIN_BATCH, TAB_TRAIN, TORCH_RUNTIME, deep


def test_snapshot_round_trip():
    rt = deep(TORCH_RUNTIME)
    rt["metadata"]["managedFields"] = [{"manager": "kubectl"}]
    cm = build_runtime_snapshot(LLM_DDP, rt)
    assert cm["kind"] == "ConfigMap" and cm["metadata"]["name"] == "llm-ddp-runtime-snapshot" and cm["metadata"]["namespace"] == "team-a"
    assert cm["metadata"]["ownerReferences"][0]["uid"] == "7f0c-uid" and cm["metadata"]["ownerReferences"][0]["controller"] is True
    assert yaml.safe_load(cm["data"]["runtime"])["kind"] == "ClusterTrainingRuntime"
    assert runtime_from_snapshot(cm, LLM_DDP) == TORCH_RUNTIME
    assert runtime_from_snapshot(build_runtime_snapshot(TAB_TRAIN, PLAIN_BATCH), TAB_TRAIN) == PLAIN_BATCH


def _mutated(fn):
    cm = build_runtime_snapshot(LLM_DDP, TORCH_RUNTIME)
    fn(cm)
    return cm


@pytest.mark.parametrize(
    "cm, trainjob, match",
    [
        (_mutated(lambda cm: cm["metadata"]["ownerReferences"][0].update(uid="other")), LLM_DDP, "not controlled by TrainJob"),
        (_mutated(lambda cm: cm["metadata"]["ownerReferences"][0].update(controller=False)), LLM_DDP, "not controlled by TrainJob"),
        (_mutated(lambda cm: cm["data"].clear()), LLM_DDP, "data key"),
        (_mutated(lambda cm: cm["data"].update(runtime="[unclosed")), LLM_DDP, "invalid runtime snapshot"),
        (build_runtime_snapshot(LLM_DDP, PLAIN_BATCH), LLM_DDP, "holds TrainingRuntime"),
    ],
    ids=["other-uid", "not-controller", "no-data", "bad-yaml", "kind-mismatch"],
)
def test_snapshot_rejected(cm, trainjob, match):
    with pytest.raises(InvalidRuntimeSnapshot, match=match) as info:
        runtime_from_snapshot(cm, trainjob)
    assert str(info.value).startswith("invalid runtime snapshot: ")


def test_renamed_runtime_ref_rejects_snapshot():
    tj = deep(LLM_DDP)
    tj["spec"]["runtimeRef"]["name"] = "other"
    with pytest.raises(InvalidRuntimeSnapshot, match="runtimeRef names ClusterTrainingRuntime.trainer.kubeflow.org 'other'"):
        runtime_from_snapshot(build_runtime_snapshot(LLM_DDP, TORCH_RUNTIME), tj)


def test_generated_ssh_keys_are_p521():
    from cryptography.hazmat.primitives import serialization

    private_pem, public = generated_keys().ssh_keypair()
    assert private_pem.startswith("-----BEGIN EC PRIVATE KEY-----")
    key = serialization.load_pem_private_key(private_pem.encode(), None)
    assert key.curve.name == "secp521r1"
    assert public.startswith("ecdsa-sha2-nistp521 ") and public.endswith("\n")


def test_generated_curve_keys_are_z85():
    public, secret = generated_keys().curve_keypair()
    assert len(public) == len(secret) == 40 and public != secret


def test_z85_reference_vector():
    # RFC 32 test vector
    assert z85_encode(bytes([0x86, 0x4F, 0xD2, 0x6F, 0xB5, 0x59, 0xF7, 0x5B])) == "HelloWorld"
    with pytest.raises(ValueError):
        z85_encode(b"abc")


def test_placeholder_keys_are_fixed():
    assert placeholder_keys().ssh_keypair() == placeholder_keys().ssh_keypair()
    assert "PLACEHOLDER" in placeholder_keys().ssh_keypair()[0]
