"""Flux's CURVE certificate deliberately differs from upstream: random per build, not derived from the TrainJob's UID.

Upstream v2.3 (``plugins/flux/flux.go``, ``buildCurveSecret``) seeds the X25519 key with sha256(TrainJob UID), so
anyone who can read the TrainJob can recompute the secret key of its Flux instance. trainguard's reconciler builds
with ``generated_keys()`` (and creates the Secret once): two builds of one TrainJob carry different keys, and neither
is upstream's derivation.
"""

from __future__ import annotations

import base64
import hashlib
import re

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import x25519

from trainguard.webhook.runtime import build_objects, generated_keys
from trainguard.webhook.runtime.keys import z85_encode

from .fixtures import single_job_runtime, trainjob


def curve_keys(tj: dict) -> tuple[str, str]:
    runtime = single_job_runtime({"flux": {"numProcPerNode": 1}},
                                 container={"name": "node", "image": "lammps", "command": ["lmp"]})
    secret = next(o for o in build_objects(tj, runtime, keys=generated_keys()) if o["kind"] == "Secret")
    cert = base64.b64decode(secret["data"]["curve.cert"]).decode()
    public, private = (re.search(rf'{k}-key = "(.{{40}})"', cert).group(1) for k in ("public", "secret"))
    return public, private


def upstream_keys(uid: str) -> tuple[str, str]:
    key = x25519.X25519PrivateKey.from_private_bytes(hashlib.sha256(uid.encode()).digest())
    raw = serialization.Encoding.Raw
    return (z85_encode(key.public_key().public_bytes(raw, serialization.PublicFormat.Raw)),
            z85_encode(key.private_bytes(raw, serialization.PrivateFormat.Raw, serialization.NoEncryption())))


def test_flux_curve_key_deliberately_differs_from_upstream() -> None:
    tj = trainjob("hpc", trainer={"numNodes": 2})
    first, second = curve_keys(tj), curve_keys(tj)
    assert first != second  # same TrainJob, same UID: nothing to recompute the key from
    assert upstream_keys(tj["metadata"]["uid"]) not in (first, second)
    for public, private in (first, second):  # a real key pair: the public key is the secret key's
        key = x25519.X25519PrivateKey.from_private_bytes(z85_decode(private))
        raw = key.public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
        assert z85_encode(raw) == public


def z85_decode(text: str) -> bytes:
    alphabet = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ.-:+=^!/*?&<>()[]{}@%$#"
    out = b""
    for i in range(0, len(text), 5):
        value = 0
        for ch in text[i:i + 5]:
            value = value * 85 + alphabet.index(ch)
        out += value.to_bytes(4, "big")
    return out
