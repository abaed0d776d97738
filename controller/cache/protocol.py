"""The cache agent's wire protocol: length-prefixed JSON over a Unix stream socket. Standard library only.

Frame: a 4-byte big-endian unsigned length N, then N bytes of UTF-8 JSON holding one object. Why a length prefix
rather than newline-delimited JSON: the reader knows the size before it allocates, so an oversized request is
refused from its header alone.

Requests (client -> agent), at most ``MAX_REQUEST_BYTES``::

    {"op": "ping"}
    {"op": "list", "offset": 0, "limit": 1000}        -> {"ok": true, "shards": [{"name", "size"}], "total", "next"}
    {"op": "stat", "shard": "<name>"}                 -> {"ok": true, "shard": {...}}
    {"op": "open", "shard": "<name>"}                 -> {"ok": true, "shard": {...}}  + one fd (SCM_RIGHTS)
    {"op": "open_many", "shards": ["<name>", ...]}    -> {"ok": true, "shards": [{...} | {"name", "error"}]}
                                                         + one fd per item without "error", in item order

``shard`` objects are ``{"name", "size", "mtimeNs", "checksum": "sha256:<hex>", "residentBytes"}``. The fd of an
``open`` reply is attached to the reply frame's first byte: a read-only descriptor of the shard file, which the
client maps itself, so both processes share the same page-cache pages.

``open_many`` opens 1..``MAX_OPEN_BATCH`` shards in one round trip (a DataLoader walking a shard list): all their
fds travel in the reply frame's single SCM_RIGHTS message (Linux accepts at most 253 per message). Each item is
judged on its own: a refused name (``InvalidName``, ``NotFound``, ``OutsideRoot``, or ``Malformed`` for a
non-string) becomes ``{"name": <as sent>, "error": {"code", "message"}}`` in its place and carries no fd, while the
others are served. A request whose ``shards`` is not a list of 1..``MAX_OPEN_BATCH`` items is ``Malformed``.

Errors: ``{"ok": false, "error": {"code": <ErrorCode>, "message": "..."}}``. After ``FrameTooLarge`` or a frame cut
short the agent closes the connection (the stream cannot be resynchronised); after other errors it stays open.
``Busy`` and ``Forbidden`` may also come unasked, as the first frame of a connection the agent will not serve
(connection limits; a peer without the socket's group), and the agent then closes it. ``Busy`` is the one error a
client retries (``client.CacheClient`` backs off exponentially with jitter, within a total deadline).

Limits the agent enforces (``agent.AgentConfig``): connections in all and per peer (SO_PEERCRED uid and pid);
idle connections are closed after ``idle_timeout`` (the client reconnects transparently: every request is
idempotent); a frame must complete within ``frame_timeout``; descriptors sent but not yet received are bounded per
connection, per peer and in all, and a connection at its bound is not served until its client reads.
"""

from __future__ import annotations

import json
import posixpath
import struct
from enum import Enum
from typing import Any

HEADER = struct.Struct(">I")
MAX_REQUEST_BYTES = 64 * 1024
MAX_REPLY_BYTES = 64 * 1024 * 1024
LIST_PAGE_LIMIT = 1000
MAX_OPEN_BATCH = 128  # fds in one reply; the kernel's SCM_MAX_FD is 253
MAX_NAME_BYTES = 4096


class ErrorCode(str, Enum):
    MALFORMED = "Malformed"  # not a JSON object, or a field of the wrong type
    FRAME_TOO_LARGE = "FrameTooLarge"
    UNKNOWN_OP = "UnknownOp"
    INVALID_NAME = "InvalidName"  # absolute, "..", empty components, NUL
    OUTSIDE_ROOT = "OutsideRoot"  # a symlink resolving outside the dataset root
    NOT_FOUND = "NotFound"
    BUSY = "Busy"  # a connection or descriptor limit reached; the client retries with backoff
    FORBIDDEN = "Forbidden"  # the peer does not carry the socket's group
    CHANGED = "Changed"  # the shard kept changing on disk while being opened; retry later
    INTERNAL = "Internal"


class ProtocolError(Exception):
    """A request the agent refuses, with the code and message sent back to the client."""

    def __init__(self, code: ErrorCode, message: str):
        super().__init__(f"{code.value}: {message}")
        self.code = code
        self.message = message


def encode(message: dict[str, Any]) -> bytes:
    body = json.dumps(message, separators=(",", ":")).encode()
    return HEADER.pack(len(body)) + body


def error_reply(code: ErrorCode, message: str) -> dict[str, Any]:
    return {"ok": False, "error": {"code": code.value, "message": message}}


def open_batch_names(request: dict[str, Any]) -> list[Any]:
    """The ``shards`` of an ``open_many`` request (items are validated one by one when served)."""
    names = request.get("shards")
    if not isinstance(names, list) or not 0 < len(names) <= MAX_OPEN_BATCH:
        raise ProtocolError(
            ErrorCode.MALFORMED, f"field 'shards' must be a list of 1..{MAX_OPEN_BATCH} shard names"
        )
    return names


def decode_body(body: bytes) -> dict[str, Any]:
    """Parse one frame body; raise ``ProtocolError(MALFORMED)`` for anything but a JSON object."""
    try:
        message = json.loads(body.decode("utf-8"))
    except (ValueError, RecursionError) as exc:  # bad UTF-8/JSON, an int over 4300 digits, nesting too deep
        raise ProtocolError(ErrorCode.MALFORMED, f"frame is not UTF-8 JSON: {str(exc)[:200]}") from None
    if not isinstance(message, dict):
        raise ProtocolError(ErrorCode.MALFORMED, "frame must hold a JSON object")
    return message


def validate_shard_name(name: Any) -> str:
    """A shard name is a relative POSIX path below the dataset root, already in canonical form.

    Refusing rather than normalising (``a/../b``, ``./a``, ``a//b``) keeps one name per file, so the index,
    the metrics and the LRU never see two spellings of the same shard.
    """
    if not isinstance(name, str) or not name:
        raise ProtocolError(ErrorCode.MALFORMED, "field 'shard' must be a non-empty string")
    if "\x00" in name:
        raise ProtocolError(ErrorCode.INVALID_NAME, "shard name must not contain NUL")
    try:  # lone surrogates (JSON "\ud800") name no file; surrogateescape keeps non-UTF-8 names from disk
        name.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:
        raise ProtocolError(ErrorCode.INVALID_NAME, f"shard name {name!r} is not encodable as a file name") from None
    if len(name.encode("utf-8", "surrogatepass")) > MAX_NAME_BYTES:
        raise ProtocolError(ErrorCode.INVALID_NAME, f"shard name longer than {MAX_NAME_BYTES} bytes")
    if name.startswith("/"):
        raise ProtocolError(ErrorCode.INVALID_NAME, f"shard name {name!r} must be relative to the dataset root")
    parts = name.split("/")
    if ".." in parts:
        raise ProtocolError(ErrorCode.INVALID_NAME, f"shard name {name!r} must not contain '..'")
    if any(p in ("", ".") for p in parts) or posixpath.normpath(name) != name:
        raise ProtocolError(ErrorCode.INVALID_NAME, f"shard name {name!r} is not in canonical form")
    return name
