"""Runtime snapshot ConfigMap (build, read back, the checks that make a user-written one useless) and key material."""

from __future__ import annotations

import json

import pytest

from trainguard.webhook.runtime import InvalidRuntimeSnapshot, build_runtime_snapshot, generated_keys, placeholder_keys, runtime_from_snapshot
from trainguard.webhook.runtime.keys import z85_encode
from trainguard.webhook.runtime.snapshot import MAX_SNAPSHOT_BYTES, snapshot_owner

from .fixtures import LLM_DDP, PLAIN_BATCH, TAB_TRAIN, TORCH_RUNTIME, deep

NS = "trainguard-system"


def test_snapshot_round_trip():
    rt = deep(TORCH_RUNTIME)
    rt["metadata"]["managedFields"] = [{"manager": "kubectl"}]
    cm = build_runtime_snapshot(LLM_DDP, rt, NS)
    meta = cm["metadata"]
    assert cm["kind"] == "ConfigMap" and meta["name"] == "runtime-snapshot-7f0c-uid" and meta["namespace"] == NS
    assert "ownerReferences" not in meta and cm["immutable"] is True  # no cross-namespace owner exists
    assert snapshot_owner(cm) == ("team-a", "llm-ddp", "7f0c-uid")
    assert json.loads(cm["data"]["runtime.json"])["kind"] == "ClusterTrainingRuntime"
    assert runtime_from_snapshot(cm, LLM_DDP, NS) == TORCH_RUNTIME
    assert runtime_from_snapshot(build_runtime_snapshot(TAB_TRAIN, PLAIN_BATCH, NS), TAB_TRAIN, NS) == PLAIN_BATCH


def _mutated(fn):
    cm = build_runtime_snapshot(LLM_DDP, TORCH_RUNTIME, NS)
    fn(cm)
    return cm


ALIAS_BOMB = "a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"{chr(98 + i)}: &{chr(98 + i)} [*{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}]\n" for i in range(20))


@pytest.mark.parametrize(
    "cm, namespace, match",
    [
        (_mutated(lambda cm: cm["metadata"]["labels"].update({"trainguard.io/runtime-snapshot-of-uid": "other"})), NS,
         "not labelled for TrainJob team-a/llm-ddp with UID 7f0c-uid"),
        (_mutated(lambda cm: cm["metadata"]["labels"].pop("trainguard.io/runtime-snapshot-of-name")), NS, "not labelled"),
        (_mutated(lambda cm: cm["metadata"]["labels"].update({"trainguard.io/runtime-snapshot-of-namespace": "x"})), NS,
         "not labelled"),
        # The user's own namespace (where older versions kept it, where users can write): never read.
        (_mutated(lambda cm: cm["metadata"].update(namespace="team-a")), NS, "is not trainguard-system/runtime-snapshot"),
        (build_runtime_snapshot(LLM_DDP, TORCH_RUNTIME, NS), "team-a", "is not team-a/runtime-snapshot-7f0c-uid"),
        (_mutated(lambda cm: cm["metadata"].update(name="llm-ddp-runtime-snapshot")), NS, "is not trainguard-system"),
        (_mutated(lambda cm: cm["data"].clear()), NS, "data key 'runtime.json' is missing"),
        (_mutated(lambda cm: cm["data"].update({"runtime.json": "[unclosed"})), NS, "not JSON"),
        (_mutated(lambda cm: cm["data"].update({"runtime.json": ALIAS_BOMB})), NS, "not JSON"),
        (_mutated(lambda cm: cm["data"].update({"runtime.json": "[" * 5000 + "]" * 5000})), NS, "nested deeper than 100"),
        (_mutated(lambda cm: cm["data"].update({"runtime.json": json.dumps({"pad": "x" * MAX_SNAPSHOT_BYTES})})), NS,
         f"more than {MAX_SNAPSHOT_BYTES}"),
        (_mutated(lambda cm: cm["data"].update({"runtime.json": "[1]"})), NS, "not an object"),
        (build_runtime_snapshot(LLM_DDP, PLAIN_BATCH, NS), NS, "holds TrainingRuntime"),
    ],
    ids=["other-uid", "unlabelled", "other-namespace-label", "users-namespace", "read-elsewhere", "legacy-name",
         "no-data", "bad-json", "yaml-alias-bomb", "deep-nesting", "too-large", "not-object", "kind-mismatch"],
)
def test_snapshot_rejected(cm, namespace, match):
    with pytest.raises(InvalidRuntimeSnapshot, match=match) as info:
        runtime_from_snapshot(cm, LLM_DDP, namespace)
    assert str(info.value).startswith("invalid runtime snapshot: ")


def test_a_runtime_too_large_to_snapshot_is_refused_when_building():
    rt = deep(TORCH_RUNTIME)
    rt["metadata"]["annotations"] = {"pad": "x" * MAX_SNAPSHOT_BYTES}
    with pytest.raises(InvalidRuntimeSnapshot, match="more than"):
        build_runtime_snapshot(LLM_DDP, rt, NS)


def test_a_trainjob_without_uid_cannot_be_snapshotted():
    tj = deep(LLM_DDP)
    tj["metadata"].pop("uid")
    with pytest.raises(InvalidRuntimeSnapshot, match="no UID"):
        build_runtime_snapshot(tj, TORCH_RUNTIME, NS)


def test_renamed_runtime_ref_rejects_snapshot():
    tj = deep(LLM_DDP)
    tj["spec"]["runtimeRef"]["name"] = "other"
    with pytest.raises(InvalidRuntimeSnapshot, match="runtimeRef names ClusterTrainingRuntime.trainer.kubeflow.org 'other'"):
        runtime_from_snapshot(build_runtime_snapshot(LLM_DDP, TORCH_RUNTIME, NS), tj, NS)


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
