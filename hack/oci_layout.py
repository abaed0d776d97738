#!/usr/bin/env python3
"""Pack a root filesystem directory as an OCI image: an image layout (``oci-layout``, ``index.json``, blobs) and,
optionally, the same layout as one tar that ``ctr images import`` reads.

hack/images.sh uses it for the two images that are not built from a Dockerfile: the base (a debootstrap root
filesystem) and the pause image (one static binary). Standard library only, so it runs before any virtualenv.

The layer is a gzip'd tar of the directory, entries in sorted order, owners numeric (no user or group names: the
host's /etc/passwd is not the image's), hard links kept as links; directories named by ``--empty`` are kept but
emptied (``dev``: the runtime mounts its own). Gzip carries no timestamp, and the config's ``created`` is fixed, so
the same tree gives the same digests. Extended attributes are not copied (a minbase Debian has no file
capabilities).

The index entry carries both names a consumer looks for: ``io.containerd.image.name`` (the full reference
containerd imports it as) and ``org.opencontainers.image.ref.name`` (the tag BuildKit's ``oci-layout://`` contexts
and other layout readers select by). An entry with the same full name is replaced; others are kept, so one layout
may hold several images.
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import io
import json
import os
import platform
import stat
import sys
import tarfile
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, Iterable

MEDIA_INDEX = "application/vnd.oci.image.index.v1+json"
MEDIA_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
MEDIA_CONFIG = "application/vnd.oci.image.config.v1+json"
MEDIA_LAYER_GZIP = "application/vnd.oci.image.layer.v1.tar+gzip"
ANNOTATION_REF = "org.opencontainers.image.ref.name"
ANNOTATION_CONTAINERD_NAME = "io.containerd.image.name"
# A fixed creation time: the same tree gives the same config, so the same image digest.
CREATED = "1970-01-01T00:00:00Z"


@dataclass(frozen=True)
class Descriptor:
    media_type: str
    digest: str
    size: int

    def to_json(self) -> dict:
        return {"mediaType": self.media_type, "digest": self.digest, "size": self.size}


@dataclass(frozen=True)
class Layer:
    descriptor: Descriptor
    diff_id: str  # sha256 of the uncompressed tar: what the config's rootfs.diff_ids lists


class _Hashing(io.RawIOBase):
    """A write-only stream that hashes and counts what passes through to ``sink``."""

    def __init__(self, sink: BinaryIO) -> None:
        self.sink, self.sha, self.size = sink, hashlib.sha256(), 0

    def writable(self) -> bool:
        return True

    def write(self, data) -> int:  # type: ignore[override]
        self.sha.update(data)
        self.size += len(data)
        self.sink.write(data)
        return len(data)


def goarch(machine: str | None = None) -> str:
    """The OCI architecture name of this machine (Go's GOARCH spelling)."""
    machine = (machine or platform.machine()).lower()
    return {"x86_64": "amd64", "amd64": "amd64", "aarch64": "arm64", "arm64": "arm64"}.get(machine, machine)


def _walk(root: Path, empty: frozenset[str]) -> Iterable[tuple[Path, str]]:
    """Every path under ``root`` in sorted order with its name in the archive; the contents of ``empty`` skipped."""
    stack = [("", root)]
    while stack:
        rel, path = stack.pop()
        if rel:
            yield path, rel
        if path.is_dir() and not path.is_symlink() and rel not in empty:
            children = sorted(os.listdir(path), reverse=True)
            stack.extend((f"{rel}/{name}" if rel else name, path / name) for name in children)


def _blob_path(layout: Path, digest: str) -> Path:
    algo, hexdigest = digest.split(":", 1)
    return layout / "blobs" / algo / hexdigest


def _write_blob(layout: Path, data: bytes) -> str:
    digest = "sha256:" + hashlib.sha256(data).hexdigest()
    path = _blob_path(layout, digest)
    path.parent.mkdir(parents=True, exist_ok=True)
    if not path.exists():
        tmp = path.with_suffix(".tmp")
        tmp.write_bytes(data)
        tmp.replace(path)
    return digest


def add_layer(layout: Path, root: Path, empty: Iterable[str] = ("dev",), compresslevel: int = 1) -> Layer:
    """Write ``root`` as one gzip'd tar layer into ``layout``'s blobs; return its descriptor and diff ID."""
    if not root.is_dir():
        raise SystemExit(f"oci_layout: {root} is not a directory")
    blobs = layout / "blobs" / "sha256"
    blobs.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(dir=blobs, prefix=".layer-")
    try:
        with os.fdopen(fd, "wb") as out:
            compressed = _Hashing(out)
            with gzip.GzipFile(fileobj=compressed, mode="wb", mtime=0, filename="", compresslevel=compresslevel) as gz:
                plain = _Hashing(gz)  # type: ignore[arg-type]
                with tarfile.open(fileobj=plain, mode="w|", format=tarfile.PAX_FORMAT) as tar:  # type: ignore[call-overload]
                    for path, name in _walk(root, frozenset(empty)):
                        info = tar.gettarinfo(str(path), arcname=name)
                        if info is None:  # a socket: nothing an image can hold
                            continue
                        info.uname = info.gname = ""
                        if info.isreg():
                            with open(path, "rb") as f:
                                tar.addfile(info, f)
                        else:
                            tar.addfile(info)
        digest = "sha256:" + compressed.sha.hexdigest()
        os.chmod(tmp_name, 0o644)  # mkstemp's 0600 would hide the blob from a reader that is not root
        os.replace(tmp_name, _blob_path(layout, digest))
    except BaseException:
        if os.path.exists(tmp_name):
            os.unlink(tmp_name)
        raise
    return Layer(Descriptor(MEDIA_LAYER_GZIP, digest, compressed.size), "sha256:" + plain.sha.hexdigest())


def image_config(layers: list[Layer], *, env: list[str], entrypoint: list[str] | None = None,
                 cmd: list[str] | None = None, user: str | None = None, workdir: str | None = None,
                 history: str = "") -> dict:
    """The OCI image config for ``layers`` (run settings as the Dockerfile keywords name them)."""
    config: dict = {"Env": env}
    if entrypoint:
        config["Entrypoint"] = entrypoint
    if cmd:
        config["Cmd"] = cmd
    if user:
        config["User"] = user
    if workdir:
        config["WorkingDir"] = workdir
    return {
        "created": CREATED,
        "architecture": goarch(),
        "os": "linux",
        "config": config,
        "rootfs": {"type": "layers", "diff_ids": [layer.diff_id for layer in layers]},
        "history": [{"created": CREATED, "created_by": history or "hack/oci_layout.py"} for _ in layers],
    }


def _canonical(obj: dict) -> bytes:
    return json.dumps(obj, sort_keys=True, separators=(",", ":")).encode()


def write_image(layout: Path, layers: list[Layer], config: dict, name: str) -> Descriptor:
    """Write ``config`` and the manifest, and list the image in ``layout``'s index.json as ``name``.

    ``name`` is a full reference (``localhost/trainguard/base:bookworm``); its tag is the ``ref.name``."""
    tag = tag_of(name)
    layout.mkdir(parents=True, exist_ok=True)
    config_bytes = _canonical(config)
    config_desc = Descriptor(MEDIA_CONFIG, _write_blob(layout, config_bytes), len(config_bytes))
    manifest = {
        "schemaVersion": 2,
        "mediaType": MEDIA_MANIFEST,
        "config": config_desc.to_json(),
        "layers": [layer.descriptor.to_json() for layer in layers],
    }
    manifest_bytes = _canonical(manifest)
    manifest_desc = Descriptor(MEDIA_MANIFEST, _write_blob(layout, manifest_bytes), len(manifest_bytes))
    (layout / "oci-layout").write_text(json.dumps({"imageLayoutVersion": "1.0.0"}))
    index_path = layout / "index.json"
    index = json.loads(index_path.read_text()) if index_path.exists() else {"schemaVersion": 2, "manifests": []}
    index["mediaType"] = MEDIA_INDEX
    kept = [m for m in index.get("manifests", []) if m.get("annotations", {}).get(ANNOTATION_CONTAINERD_NAME) != name]
    entry = manifest_desc.to_json()
    entry["platform"] = {"architecture": config["architecture"], "os": config["os"]}
    entry["annotations"] = {ANNOTATION_CONTAINERD_NAME: name, ANNOTATION_REF: tag}
    index["manifests"] = kept + [entry]
    tmp = index_path.with_suffix(".tmp")
    tmp.write_text(json.dumps(index, indent=2, sort_keys=True) + "\n")
    tmp.replace(index_path)
    return manifest_desc


def tag_of(name: str) -> str:
    """The tag of a full image reference (``host/path:tag``); a reference without one is refused."""
    last = name.rsplit("/", 1)[-1]
    if ":" not in last or "@" in name:
        raise SystemExit(f"oci_layout: image name {name!r} needs a tag (and no digest)")
    return last.rsplit(":", 1)[1]


def archive(layout: Path, dest: Path) -> None:
    """The layout as one uncompressed tar (what ``ctr images import`` reads), entries sorted."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_name(dest.name + ".tmp")
    with tarfile.open(tmp, "w", format=tarfile.PAX_FORMAT) as tar:
        for path, name in _walk(layout, frozenset()):
            if name.startswith("blobs/sha256/.") or name.endswith(".tmp"):
                continue
            info = tar.gettarinfo(str(path), arcname=name)
            info.uid = info.gid = 0
            info.uname = info.gname = ""
            info.mtime = 0
            if info.isreg():
                with open(path, "rb") as f:
                    tar.addfile(info, f)
            else:
                tar.addfile(info)
    tmp.replace(dest)


def check_layout(layout: Path) -> list[str]:
    """Problems a layout reader would hit (missing blob, wrong size or digest, config not naming each layer's diff
    ID); empty when none. Gzip layers are decompressed to check their diff IDs."""
    problems: list[str] = []

    def blob(desc: dict) -> bytes | None:
        path = _blob_path(layout, desc["digest"])
        if not path.is_file():
            problems.append(f"missing blob {desc['digest']}")
            return None
        data = path.read_bytes()
        if len(data) != desc["size"]:
            problems.append(f"{desc['digest']}: size {len(data)} != {desc['size']}")
        if "sha256:" + hashlib.sha256(data).hexdigest() != desc["digest"]:
            problems.append(f"{desc['digest']}: content does not match its digest")
        return data

    if json.loads((layout / "oci-layout").read_text()).get("imageLayoutVersion") != "1.0.0":
        problems.append("oci-layout: imageLayoutVersion is not 1.0.0")
    entries = list(json.loads((layout / "index.json").read_text())["manifests"])
    while entries:
        entry = entries.pop(0)
        raw = blob(entry)
        if raw is None:
            continue
        manifest = json.loads(raw)
        if entry["mediaType"] == MEDIA_INDEX or manifest.get("mediaType") == MEDIA_INDEX:
            entries.extend(manifest.get("manifests", []))
            continue
        config_raw = blob(manifest["config"])
        if config_raw is None:
            continue
        rootfs = json.loads(config_raw).get("rootfs")
        if rootfs is None:  # not an image (an attestation manifest): blobs checked, no diff IDs to match
            for layer in manifest.get("layers", []):
                blob(layer)
            continue
        diff_ids = rootfs["diff_ids"]
        if len(diff_ids) != len(manifest["layers"]):
            problems.append(f"{entry['digest']}: {len(manifest['layers'])} layers, {len(diff_ids)} diff IDs")
        for layer, diff_id in zip(manifest["layers"], diff_ids):
            data = blob(layer)
            if data is None:
                continue
            plain = gzip.decompress(data) if layer["mediaType"].endswith("+gzip") else data
            if "sha256:" + hashlib.sha256(plain).hexdigest() != diff_id:
                problems.append(f"{layer['digest']}: uncompressed content does not match diff ID {diff_id}")
    return problems


def names(layout: Path) -> list[tuple[str, str]]:
    """(full name, manifest digest) of each named entry of ``layout``'s index.json."""
    index = json.loads((layout / "index.json").read_text())
    return [(m["annotations"][ANNOTATION_CONTAINERD_NAME], m["digest"]) for m in index.get("manifests", [])
            if ANNOTATION_CONTAINERD_NAME in m.get("annotations", {})]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    image = sub.add_parser("image", help="pack a root filesystem as an image in a layout")
    image.add_argument("--rootfs", type=Path, required=True)
    image.add_argument("--layout", type=Path, required=True, help="the OCI layout directory (created or added to)")
    image.add_argument("--name", required=True, help="full reference, e.g. localhost/trainguard/base:bookworm")
    image.add_argument("--env", action="append", default=[], help="KEY=VALUE (repeatable)")
    image.add_argument("--entrypoint", help="JSON list")
    image.add_argument("--cmd", help="JSON list")
    image.add_argument("--user")
    image.add_argument("--workdir")
    image.add_argument("--empty", action="append", default=None,
                       help="a directory kept empty in the layer (repeatable; default: dev)")
    image.add_argument("--history", default="", help="the history entry's created_by")
    image.add_argument("--archive", type=Path, help="also write the layout as a tar for `ctr images import`")
    check = sub.add_parser("check", help="verify a layout's digests, sizes and diff IDs")
    check.add_argument("layout", type=Path)
    names_cmd = sub.add_parser("names", help="print 'NAME DIGEST' for each named image in a layout")
    names_cmd.add_argument("layout", type=Path)
    archive_cmd = sub.add_parser("archive", help="write a layout as one tar (for `ctr images import`)")
    archive_cmd.add_argument("layout", type=Path)
    archive_cmd.add_argument("dest", type=Path)
    args = parser.parse_args(argv)

    if args.command == "names":
        for name, digest in names(args.layout):
            print(name, digest)
        return 0
    if args.command == "archive":
        archive(args.layout, args.dest)
        return 0
    if args.command == "check":
        problems = check_layout(args.layout)
        for p in problems:
            print(f"oci_layout: {p}", file=sys.stderr)
        return 1 if problems else 0
    tag_of(args.name)
    for item in args.env:
        if "=" not in item:
            parser.error(f"--env {item!r}: want KEY=VALUE")
    layer = add_layer(args.layout, args.rootfs, empty=args.empty if args.empty is not None else ("dev",))
    config = image_config(
        [layer], env=args.env,
        entrypoint=json.loads(args.entrypoint) if args.entrypoint else None,
        cmd=json.loads(args.cmd) if args.cmd else None,
        user=args.user, workdir=args.workdir, history=args.history,
    )
    desc = write_image(args.layout, [layer], config, args.name)
    if args.archive:
        archive(args.layout, args.archive)
    print(desc.digest)
    return 0


if __name__ == "__main__":
    sys.exit(main())
