"""The serving TLS context and its hot reload.

One ``ssl.SSLContext`` lives for the whole process (aiohttp's listener holds it). A new certificate is loaded INTO
that context: every handshake after the swap gets the new certificate, connections already open keep theirs, and
no request fails. Because ``load_cert_chain`` installs the certificate before it checks the key, a bad pair would
leave the live context half-updated; so each pair is first proven on a scratch context, then loaded for real.
The event loop is single-threaded, so no handshake can start between the two halves of the swap.

``CertDirWatcher`` is the external-certificates mode (cert-manager or any file provider): it only watches
``tls.crt``/``tls.key`` in a directory and reloads when their content changes.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import os
import ssl
import tempfile
from datetime import datetime
from pathlib import Path
from typing import Callable

from cryptography import x509

log = logging.getLogger("trainguard.admission.tls")


def server_context() -> ssl.SSLContext:
    """TLS 1.2+ only, HTTP/1.1 only (no h2: its rapid-reset class of attacks is not worth it for a webhook)."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.options |= ssl.OP_NO_COMPRESSION | ssl.OP_CIPHER_SERVER_PREFERENCE
    ctx.set_alpn_protocols(["http/1.1"])
    return ctx


class ServingCertificate:
    """The live server context plus what is loaded in it (for /readyz, metrics and change detection)."""

    def __init__(self, on_reload: Callable[[x509.Certificate], None] | None = None) -> None:
        self.context = server_context()
        self.loaded = False
        self.fingerprint = ""
        self.not_after: datetime | None = None
        self._on_reload = on_reload

    def load_pem(self, cert_pem: bytes, key_pem: bytes) -> bool:
        """Serve this pair from the next handshake on; returns False (and changes nothing) when it is the same pair.

        Raises ``ssl.SSLError``/``ValueError`` for a pair that does not load; the previous one stays in service.
        """
        fingerprint = hashlib.sha256(cert_pem + b"\0" + key_pem).hexdigest()
        if fingerprint == self.fingerprint:
            return False
        # SSLContext only loads from files: a private scratch directory (mkdtemp makes it 0700) that lives only as long
        # as the load, so neither the key nor the directory outlives it.
        with tempfile.TemporaryDirectory(prefix="trainguard-tls-") as scratch:
            cert_path = Path(scratch) / "tls.crt"
            key_path = Path(scratch) / "tls.key"
            _write_private(cert_path, cert_pem)
            _write_private(key_path, key_pem)
            server_context().load_cert_chain(cert_path, key_path)  # proof on a scratch context
            self.context.load_cert_chain(cert_path, key_path)
        leaf = x509.load_pem_x509_certificate(cert_pem)
        self.fingerprint = fingerprint
        self.not_after = leaf.not_valid_after_utc
        self.loaded = True
        log.info("serving certificate loaded", extra={"serial": format(leaf.serial_number, "x"), "not_after": self.not_after.isoformat()})
        if self._on_reload is not None:
            self._on_reload(leaf)
        return True

    def load_files(self, cert_file: str | os.PathLike[str], key_file: str | os.PathLike[str]) -> bool:
        return self.load_pem(Path(cert_file).read_bytes(), Path(key_file).read_bytes())


def _write_private(path: Path, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(data)


class CertDirWatcher:
    """Reload ``<dir>/tls.crt`` + ``<dir>/tls.key`` whenever their content changes (polling: no inotify needed,
    and it sees Kubernetes' atomic symlink swaps of mounted Secrets)."""

    def __init__(
        self, serving: ServingCertificate, cert_dir: str, *, cert_name: str = "tls.crt", key_name: str = "tls.key",
        interval: float = 10.0,
    ) -> None:
        self.serving = serving
        self.cert_file = Path(cert_dir) / cert_name
        self.key_file = Path(cert_dir) / key_name
        self.interval = interval

    def check(self) -> bool:
        """One look at the files; a half-written or mismatched pair is logged and retried on the next look."""
        try:
            return self.serving.load_files(self.cert_file, self.key_file)
        except (OSError, ssl.SSLError, ValueError) as e:
            log.warning("cannot load %s / %s: %s", self.cert_file, self.key_file, e)
            return False

    async def run(self) -> None:
        while True:
            await asyncio.sleep(self.interval)
            self.check()
