#!/usr/bin/env python3
"""The host's pip index settings, as the ``/etc/pip.conf`` of an image hack/images.sh builds.

The project's Dockerfile runs ``pip install`` from the package index. On a machine whose index is reached through a
mirror, a proxy or a private certificate authority, the build can only download what the host can, so the base
image carries the host's index settings: ``index-url``, ``extra-index-url``, ``trusted-host``, ``timeout``,
``retries``, ``proxy`` from pip's configuration files and ``PIP_*`` variables (the variables win, as in pip). A
``cert`` becomes ``/etc/ssl/certs/ca-certificates.crt``, where hack/images.sh copies the host's bundle. Settings
that name host paths or change what is installed (``find-links``, ``no-index``, ``constraint``, ``require-hashes``,
...) are not carried: the Dockerfile's own flags decide those.

Standard library only; prints the file (empty when the host has no such settings), or with ``--ca-bundle`` the
host's certificate bundle to copy.
"""

from __future__ import annotations

import configparser
import io
import os
import sys
from pathlib import Path
from typing import Mapping

IMAGE_CA_BUNDLE = "/etc/ssl/certs/ca-certificates.crt"
# pip option names (as in a config file) carried into the image.
CARRIED = ("index-url", "extra-index-url", "trusted-host", "timeout", "default-timeout", "retries", "proxy", "cert")


def host_config_files(home: Path | None = None, environ: Mapping[str, str] | None = None) -> list[Path]:
    """pip's configuration files in the order pip reads them (later ones win): global, then user, then
    ``$PIP_CONFIG_FILE``."""
    environ = os.environ if environ is None else environ
    home = Path(environ.get("HOME", "~")).expanduser() if home is None else home
    xdg_dirs = environ.get("XDG_CONFIG_DIRS", "/etc/xdg").split(":")
    files = [Path(d) / "pip" / "pip.conf" for d in xdg_dirs] + [Path("/etc/pip.conf")]
    files += [home / ".pip" / "pip.conf", Path(environ.get("XDG_CONFIG_HOME", home / ".config")) / "pip" / "pip.conf"]
    if environ.get("PIP_CONFIG_FILE"):
        files.append(Path(environ["PIP_CONFIG_FILE"]))
    return files


def image_pip_conf(files: list[Path], environ: Mapping[str, str]) -> str:
    """The carried settings of ``files`` (sections ``global`` and ``install``) and ``PIP_*`` variables, as one
    ``[global]`` section."""
    settings: dict[str, str] = {}
    for path in files:
        if not path.is_file():
            continue
        parser = configparser.RawConfigParser()
        try:
            parser.read(path)
        except configparser.Error as exc:
            raise SystemExit(f"pip_config: {path}: {exc}")
        for section in ("global", "install"):
            if parser.has_section(section):
                for key, value in parser.items(section):
                    if key in CARRIED:
                        settings[key] = value
    for key in CARRIED:
        var = "PIP_" + key.upper().replace("-", "_")
        if environ.get(var):
            settings[key] = environ[var]
    if "default-timeout" in settings:
        settings["timeout"] = settings.pop("default-timeout")
    if "cert" in settings:
        settings["cert"] = IMAGE_CA_BUNDLE
    if not settings:
        return ""
    out = configparser.RawConfigParser()
    out["global"] = dict(sorted(settings.items()))
    buf = io.StringIO()
    out.write(buf)
    return buf.getvalue()


def host_ca_bundle(files: list[Path], environ: Mapping[str, str]) -> Path | None:
    """The certificate bundle the host's pip trusts (its ``cert`` setting, else ``$SSL_CERT_FILE``, else Debian's
    bundle): what hack/images.sh copies to ``IMAGE_CA_BUNDLE`` in the base. None when there is none."""
    cert = environ.get("PIP_CERT")
    if not cert:
        for path in files:
            if path.is_file():
                parser = configparser.RawConfigParser()
                parser.read(path)
                for section in ("global", "install"):
                    if parser.has_option(section, "cert"):
                        cert = parser.get(section, "cert")
    for candidate in (cert, environ.get("SSL_CERT_FILE"), IMAGE_CA_BUNDLE):
        if candidate and Path(candidate).is_file():
            return Path(candidate)
    return None


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if args == ["--ca-bundle"]:
        bundle = host_ca_bundle(host_config_files(), os.environ)
        if bundle:
            print(bundle)
        return 0
    if args:
        print("usage: pip_config.py [--ca-bundle]", file=sys.stderr)
        return 2
    sys.stdout.write(image_pip_conf(host_config_files(), os.environ))
    return 0


if __name__ == "__main__":
    sys.exit(main())
