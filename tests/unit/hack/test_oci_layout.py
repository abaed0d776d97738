"""hack/oci_layout.py packs a root filesystem as an OCI image layout that containerd and BuildKit read.

Checked here the way a reader resolves it: index.json → manifest → config and layer blobs, each blob's digest and
size, the config's diff IDs against the uncompressed layers, the names both readers look up, and what the layer
holds (sorted entries, numeric owners, hard links kept, ``dev`` emptied). hack/images.sh runs ``check`` on every
image it builds, BuildKit's own output included.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import sys
import tarfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(REPO / "hack"))

import oci_layout  # noqa: E402


def make_rootfs(root: Path) -> Path:
    (root / "usr/bin").mkdir(parents=True)
    (root / "usr/bin/python3").write_bytes(b"\x7fELF fake interpreter")
    os.chmod(root / "usr/bin/python3", 0o755)
    os.link(root / "usr/bin/python3", root / "usr/bin/python3.11")
    os.symlink("python3", root / "usr/bin/python")
    (root / "etc").mkdir()
    (root / "etc/os-release").write_text("ID=debian\n")
    (root / "dev").mkdir()
    (root / "dev/not-in-image").write_text("x")
    (root / "tmp").mkdir()
    os.chmod(root / "tmp", 0o1777)
    return root


def read_json(layout: Path, digest: str) -> dict:
    return json.loads((layout / "blobs" / "sha256" / digest.split(":")[1]).read_bytes())


def pack(tmp_path: Path, name: str = "localhost/trainguard/base:bookworm", layout: Path | None = None) -> tuple[Path, str]:
    rootfs = tmp_path / "rootfs"
    if not rootfs.exists():
        make_rootfs(rootfs)
    layout = layout or tmp_path / "layout"
    out = io.StringIO()
    argv = ["image", "--rootfs", str(rootfs), "--layout", str(layout), "--name", name, "--env", "PATH=/usr/bin",
            "--cmd", '["python3"]', "--user", "65532:65532"]
    sys_stdout, sys.stdout = sys.stdout, out
    try:
        assert oci_layout.main(argv) == 0
    finally:
        sys.stdout = sys_stdout
    return layout, out.getvalue().strip()


def test_layout_resolves_from_index_to_layers(tmp_path: Path) -> None:
    layout, digest = pack(tmp_path)
    assert json.loads((layout / "oci-layout").read_text()) == {"imageLayoutVersion": "1.0.0"}
    index = json.loads((layout / "index.json").read_text())
    assert index["schemaVersion"] == 2 and index["mediaType"] == oci_layout.MEDIA_INDEX
    [entry] = index["manifests"]
    assert entry["digest"] == digest and entry["mediaType"] == oci_layout.MEDIA_MANIFEST
    # containerd imports under the full name, BuildKit's oci-layout:// context selects by the tag
    assert entry["annotations"] == {"io.containerd.image.name": "localhost/trainguard/base:bookworm",
                                    "org.opencontainers.image.ref.name": "bookworm"}
    assert entry["platform"] == {"architecture": oci_layout.goarch(), "os": "linux"}
    manifest_bytes = (layout / "blobs/sha256" / digest.split(":")[1]).read_bytes()
    assert entry["size"] == len(manifest_bytes)
    assert "sha256:" + hashlib.sha256(manifest_bytes).hexdigest() == digest
    manifest = json.loads(manifest_bytes)
    assert manifest["schemaVersion"] == 2 and manifest["mediaType"] == oci_layout.MEDIA_MANIFEST
    assert manifest["config"]["mediaType"] == oci_layout.MEDIA_CONFIG
    config = read_json(layout, manifest["config"]["digest"])
    assert config["os"] == "linux" and config["architecture"] == oci_layout.goarch()
    assert config["config"] == {"Env": ["PATH=/usr/bin"], "Cmd": ["python3"], "User": "65532:65532"}
    [layer] = manifest["layers"]
    assert layer["mediaType"] == oci_layout.MEDIA_LAYER_GZIP
    blob = (layout / "blobs/sha256" / layer["digest"].split(":")[1]).read_bytes()
    assert layer["size"] == len(blob) and "sha256:" + hashlib.sha256(blob).hexdigest() == layer["digest"]
    assert config["rootfs"] == {"type": "layers",
                                "diff_ids": ["sha256:" + hashlib.sha256(gzip.decompress(blob)).hexdigest()]}
    assert len(config["history"]) == 1
    assert oci_layout.check_layout(layout) == []


def layer_members(layout: Path) -> list[tarfile.TarInfo]:
    [entry] = json.loads((layout / "index.json").read_text())["manifests"]
    [layer] = read_json(layout, entry["digest"])["layers"]
    data = gzip.decompress((layout / "blobs/sha256" / layer["digest"].split(":")[1]).read_bytes())
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        return tar.getmembers()


def test_layer_content(tmp_path: Path) -> None:
    layout, _ = pack(tmp_path, layout=tmp_path / "layout")
    members = {m.name: m for m in layer_members(layout)}
    order = list(members)
    assert all(os.path.dirname(n) in ("", *order[:i]) for i, n in enumerate(order)), "a directory before its entries"
    assert order == [m.name for m in layer_members(pack(tmp_path, layout=tmp_path / "again")[0])], "a stable order"
    assert "dev" in members and members["dev"].isdir()
    assert not any(n.startswith("dev/") for n in members), "dev/ is emptied: the runtime mounts its own"
    assert members["usr/bin/python"].issym() and members["usr/bin/python"].linkname == "python3"
    links = [members["usr/bin/python3"], members["usr/bin/python3.11"]]
    assert sorted(m.type for m in links) == sorted([tarfile.REGTYPE, tarfile.LNKTYPE]), "a hard link stays a link"
    assert members["tmp"].mode & 0o1777 == 0o1777
    assert all(m.uname == "" and m.gname == "" for m in members.values()), "owners are numeric only"
    assert all(not m.name.startswith("/") and ".." not in m.name.split("/") for m in members.values())


def test_same_tree_same_digest(tmp_path: Path) -> None:
    _, first = pack(tmp_path, layout=tmp_path / "a")
    _, second = pack(tmp_path, layout=tmp_path / "b")
    assert first == second
    (tmp_path / "rootfs/etc/os-release").write_text("ID=debian\nVERSION_ID=12\n")
    _, third = pack(tmp_path, layout=tmp_path / "c")
    assert third != first


def test_one_layout_holds_several_names_and_replaces_a_rebuilt_one(tmp_path: Path) -> None:
    layout, base = pack(tmp_path, "localhost/trainguard/base:bookworm")
    _, other = pack(tmp_path, "localhost/trainguard/other:v1", layout=layout)
    assert oci_layout.names(layout) == [("localhost/trainguard/base:bookworm", base),
                                        ("localhost/trainguard/other:v1", other)]
    (tmp_path / "rootfs/etc/changed").write_text("1")
    _, rebuilt = pack(tmp_path, "localhost/trainguard/base:bookworm", layout=layout)
    assert rebuilt != base
    assert oci_layout.names(layout) == [("localhost/trainguard/other:v1", other),
                                        ("localhost/trainguard/base:bookworm", rebuilt)]
    assert oci_layout.check_layout(layout) == []


@pytest.mark.parametrize("name", ["localhost/trainguard/base", "base", "localhost:5000/base",
                                  "localhost/base:v1@sha256:" + "0" * 64])
def test_a_name_needs_a_tag(tmp_path: Path, name: str) -> None:
    with pytest.raises(SystemExit, match="needs a tag"):
        pack(tmp_path, name)


@pytest.mark.parametrize("damage", ["config", "layer", "missing", "diff_id"])
def test_check_finds_a_damaged_layout(tmp_path: Path, damage: str) -> None:
    layout, digest = pack(tmp_path)
    manifest = read_json(layout, digest)
    blobs = layout / "blobs/sha256"
    if damage == "config":
        path = blobs / manifest["config"]["digest"].split(":")[1]
        path.write_bytes(path.read_bytes().replace(b"python3", b"python4"))
        expected = "does not match its digest"
    elif damage == "layer":
        path = blobs / manifest["layers"][0]["digest"].split(":")[1]
        path.write_bytes(path.read_bytes() + b"\0")
        expected = "size"
    elif damage == "missing":
        (blobs / manifest["layers"][0]["digest"].split(":")[1]).unlink()
        expected = "missing blob"
    else:
        # a config whose diff ID names other content, written back consistently (digest and size of the config,
        # then of the manifest, then the index): only the diff ID check can see it
        config = read_json(layout, manifest["config"]["digest"])
        config["rootfs"]["diff_ids"] = ["sha256:" + "1" * 64]
        layer = oci_layout.Layer(oci_layout.Descriptor(**{"media_type": manifest["layers"][0]["mediaType"],
                                                          "digest": manifest["layers"][0]["digest"],
                                                          "size": manifest["layers"][0]["size"]}), "sha256:" + "1" * 64)
        oci_layout.write_image(layout, [layer], config, "localhost/trainguard/base:bookworm")
        expected = "does not match diff ID"
    problems = oci_layout.check_layout(layout)
    assert any(expected in p for p in problems), problems
    assert oci_layout.main(["check", str(layout)]) == 1


def test_archive_is_the_layout_as_one_tar(tmp_path: Path) -> None:
    layout, _ = pack(tmp_path)
    (layout / "blobs/sha256/.layer-leftover").write_text("partial")  # an interrupted write is not shipped
    dest = tmp_path / "image.tar"
    assert oci_layout.main(["archive", str(layout), str(dest)]) == 0
    with tarfile.open(dest) as tar:
        names = tar.getnames()
        extracted = tmp_path / "extracted"
        tar.extractall(extracted, filter="data")
    assert "oci-layout" in names and "index.json" in names
    assert not any(".layer-" in n for n in names)
    assert oci_layout.check_layout(extracted) == []
    assert oci_layout.names(extracted) == oci_layout.names(layout)
