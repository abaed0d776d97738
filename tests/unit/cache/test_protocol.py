"""Shard-name validation and frame decoding: each rule has a case refused and a case accepted."""

from __future__ import annotations

import pytest

from trainguard.cache.protocol import (
    HEADER,
    ErrorCode,
    ProtocolError,
    decode_body,
    encode,
    error_reply,
    validate_shard_name,
)


@pytest.mark.parametrize(
    "name, code",
    [
        ("", ErrorCode.MALFORMED),
        (42, ErrorCode.MALFORMED),
        (None, ErrorCode.MALFORMED),
        ("/etc/passwd", ErrorCode.INVALID_NAME),
        ("../secret", ErrorCode.INVALID_NAME),
        ("train/../../secret", ErrorCode.INVALID_NAME),
        ("train/..", ErrorCode.INVALID_NAME),
        ("./train/a.bin", ErrorCode.INVALID_NAME),
        ("train//a.bin", ErrorCode.INVALID_NAME),
        ("train/a.bin/", ErrorCode.INVALID_NAME),
        ("a\x00b", ErrorCode.INVALID_NAME),
        ("x" * 5000, ErrorCode.INVALID_NAME),
    ],
)
def test_refused_names(name: object, code: ErrorCode) -> None:
    with pytest.raises(ProtocolError) as err:
        validate_shard_name(name)
    assert err.value.code is code


@pytest.mark.parametrize("name", ["a.bin", "train/shard-0001.bin", "dir.with..dots/a", "..a", "a.."])
def test_accepted_names(name: str) -> None:
    assert validate_shard_name(name) == name


@pytest.mark.parametrize(
    "body",
    [b"not json", b"\xff\xfe", b"[1, 2]", b'"op"', b"null", b"{"],
)
def test_malformed_bodies(body: bytes) -> None:
    with pytest.raises(ProtocolError) as err:
        decode_body(body)
    assert err.value.code is ErrorCode.MALFORMED


def test_frame_round_trip() -> None:
    frame = encode({"op": "open", "shard": "a.bin"})
    (length,) = HEADER.unpack(frame[: HEADER.size])
    assert length == len(frame) - HEADER.size
    assert decode_body(frame[HEADER.size :]) == {"op": "open", "shard": "a.bin"}


def test_error_reply_shape() -> None:
    assert error_reply(ErrorCode.NOT_FOUND, "no shard") == {
        "ok": False,
        "error": {"code": "NotFound", "message": "no shard"},
    }
