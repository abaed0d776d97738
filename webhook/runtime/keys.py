"""Key material for the objects that need secrets: the MPI SSH identity and the Flux ZeroMQ CURVE certificate.

The build is a pure function of its inputs, so randomness is injected: ``generated_keys()`` (the reconciler)
makes real keys with ``cryptography``; ``placeholder_keys()`` (``trainguard render``, tests) returns fixed,
obviously fake text so offline output is reproducible and never carries a usable key. Both secrets are created
once and never rewritten, so a key is generated at most once per TrainJob.

Flux differs from upstream on purpose: upstream derives the CURVE secret key from sha256(TrainJob UID), which
anyone who can read the TrainJob can recompute; trainguard generates it randomly, like the MPI key.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

PLACEHOLDER_PRIVATE_KEY = "-----BEGIN EC PRIVATE KEY-----\nPLACEHOLDER (trainguard render)\n-----END EC PRIVATE KEY-----\n"
PLACEHOLDER_PUBLIC_KEY = "ecdsa-sha2-nistp521 PLACEHOLDER trainguard-render\n"
PLACEHOLDER_CURVE_KEY = "0" * 40

_Z85 = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ.-:+=^!/*?&<>()[]{}@%$#"


@dataclass(frozen=True)
class KeySource:
    # () -> (PEM "EC PRIVATE KEY", public key in authorized_keys format)
    ssh_keypair: Callable[[], tuple[str, str]]
    # () -> (Z85 public key, Z85 secret key), 40 characters each
    curve_keypair: Callable[[], tuple[str, str]]


def placeholder_keys() -> KeySource:
    return KeySource(
        ssh_keypair=lambda: (PLACEHOLDER_PRIVATE_KEY, PLACEHOLDER_PUBLIC_KEY),
        curve_keypair=lambda: (PLACEHOLDER_CURVE_KEY, PLACEHOLDER_CURVE_KEY),
    )


def generated_keys() -> KeySource:
    return KeySource(ssh_keypair=generate_ssh_keypair, curve_keypair=generate_curve_keypair)


# cryptography is imported in the generators only: the reconciler is the one caller that makes real keys; render and
# builds with placeholder_keys() do not need it loaded.
def generate_ssh_keypair() -> tuple[str, str]:
    """ECDSA P-521, private key as PEM "EC PRIVATE KEY" (SEC1), public key as an authorized_keys line."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    key = ec.generate_private_key(ec.SECP521R1())
    private_pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.TraditionalOpenSSL, serialization.NoEncryption()
    ).decode()
    public = key.public_key().public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH).decode()
    return private_pem, public + "\n"


def generate_curve_keypair() -> tuple[str, str]:
    """A Curve25519 (X25519) key pair, Z85-encoded as ZeroMQ and Flux expect."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import x25519

    key = x25519.X25519PrivateKey.generate()
    raw = serialization.Encoding.Raw
    secret = key.private_bytes(raw, serialization.PrivateFormat.Raw, serialization.NoEncryption())
    public = key.public_key().public_bytes(raw, serialization.PublicFormat.Raw)
    return z85_encode(public), z85_encode(secret)


def z85_encode(data: bytes) -> str:
    """ZeroMQ Z85 (RFC 32): 4 bytes -> 5 characters; the length must be a multiple of 4."""
    if len(data) % 4:
        raise ValueError("Z85 input length must be a multiple of 4")
    out = []
    for i in range(0, len(data), 4):
        value = int.from_bytes(data[i : i + 4], "big")
        out += [_Z85[(value // 85**p) % 85] for p in (4, 3, 2, 1, 0)]
    return "".join(out)
