#!/usr/bin/env python3
"""The cache key of each image hack/images.sh builds: a hash of everything the image is made from.

A key names a directory under ``~/.cache/trainguard/images/``; an image is rebuilt exactly when its key changes.
What goes in (``INPUTS``): the repository files the build reads, walked the way the build context sees them
(``__pycache__``, ``*.pyc`` and ``*.egg-info`` left out, as ``.dockerignore`` and ``.gitignore`` leave them out),
plus the ``--with NAME=VALUE`` facts the script passes: tool versions, the key of the base an image is built on,
the mirror, hashes of host files copied in. A path's name and its bytes both count, so a renamed or edited module
changes the key; a file outside the listed paths (tests, docs, charts) does not.

Standard library only.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

# Repository paths each image is built from (files, or directories walked whole).
INPUTS: dict[str, tuple[str, ...]] = {
    # the packer (and for the base, what carries the host's index settings); the recipe itself (debootstrap's
    # suite and packages, the image config, gcc's flags) comes from hack/images.sh as a fact, so editing the rest
    # of that script rebuilds nothing
    "base": ("hack/oci_layout.py", "hack/pip_config.py"),
    "pause": ("hack/oci_layout.py",),
    # what the Dockerfile COPYs, and the Dockerfile itself
    "trainguard": (
        "Dockerfile", ".dockerignore", "requirements-build.lock", "requirements.lock", "pyproject.toml", "README.md",
        "webhook", "controller",
    ),
    "trainer": (
        "tests/node/images/trainer.Dockerfile", ".dockerignore", "requirements-build.lock", "pyproject.toml", "README.md",
        "webhook", "controller",
    ),
}

SKIP_DIRS = {"__pycache__", ".pytest_cache", ".hypothesis"}
SKIP_SUFFIXES = (".pyc", ".pyo")


def _files(repo: Path, rel: str) -> list[str]:
    path = repo / rel
    if path.is_file():
        return [rel]
    if not path.is_dir():
        raise SystemExit(f"image_key: {rel} (an input) does not exist under {repo}")
    found = []
    for top, dirs, files in os.walk(path):
        dirs[:] = [d for d in dirs if d not in SKIP_DIRS and not d.endswith(".egg-info")]
        for name in files:
            if not name.endswith(SKIP_SUFFIXES):
                found.append(str(Path(top, name).relative_to(repo)))
    return found


def image_key(image: str, repo: Path = REPO, facts: dict[str, str] | None = None) -> str:
    """The 16-hex-digit key of ``image`` built from ``repo`` with ``facts``."""
    if image not in INPUTS:
        raise SystemExit(f"image_key: unknown image {image!r} (known: {', '.join(INPUTS)})")
    sha = hashlib.sha256(f"image {image}\n".encode())
    for name, value in sorted((facts or {}).items()):
        sha.update(f"fact {name}={value}\n".encode())
    files = sorted({f for rel in INPUTS[image] for f in _files(repo, rel)})
    for rel in files:
        data = (repo / rel).read_bytes()
        sha.update(f"file {rel} {len(data)}\n".encode())
        sha.update(data)
    return sha.hexdigest()[:16]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="print the cache key of an image hack/images.sh builds")
    parser.add_argument("image", choices=sorted(INPUTS))
    parser.add_argument("--with", dest="facts", action="append", default=[], metavar="NAME=VALUE",
                        help="another input (a version, a base image's key, a host file's hash)")
    parser.add_argument("--repo", type=Path, default=REPO)
    args = parser.parse_args(argv)
    facts = {}
    for item in args.facts:
        name, sep, value = item.partition("=")
        if not sep or not name:
            parser.error(f"--with {item!r}: want NAME=VALUE")
        facts[name] = value
    print(image_key(args.image, args.repo, facts))
    return 0


if __name__ == "__main__":
    sys.exit(main())
