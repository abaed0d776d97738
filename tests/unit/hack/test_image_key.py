"""The cache key of each image hack/images.sh builds (hack/image_key.py) changes exactly when its inputs do: a
Python source, a lock, the Dockerfile, or a fact the script passes (the base's key, a version); not a test, a doc
or a compiled file. And it covers every file the Dockerfiles COPY."""

from __future__ import annotations

import re
import shutil
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(REPO / "hack"))

import image_key  # noqa: E402
from image_key import INPUTS  # noqa: E402

DOCKERFILES = {"trainguard": REPO / "Dockerfile", "trainer": REPO / "tests/node/images/trainer.Dockerfile"}


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """A copy of the repository files the images are built from."""
    for rel in sorted({r for paths in INPUTS.values() for r in paths}):
        src, dst = REPO / rel, tmp_path / rel
        dst.parent.mkdir(parents=True, exist_ok=True)
        if src.is_dir():
            shutil.copytree(src, dst, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        else:
            shutil.copy2(src, dst)
    (tmp_path / "tests/unit").mkdir(parents=True)
    (tmp_path / "tests/unit/test_x.py").write_text("def test(): pass\n")
    return tmp_path


def keys(repo: Path, **facts: str) -> dict[str, str]:
    return {image: image_key.image_key(image, repo, dict(facts)) for image in INPUTS}


CHANGES = [
    # (what, edit, the images whose key must change)
    ("a webhook module", lambda r: (r / "webhook/policy/pipeline.py").write_text(
        (r / "webhook/policy/pipeline.py").read_text() + "\n# changed\n"), {"trainguard", "trainer"}),
    ("a new controller module", lambda r: (r / "controller/reconcile/new_module.py").write_text("X = 1\n"),
     {"trainguard", "trainer"}),
    ("the cache client", lambda r: (r / "controller/cache/client.py").write_text(
        (r / "controller/cache/client.py").read_text().replace("def ", "def  ", 1)), {"trainguard", "trainer"}),
    ("a renamed module", lambda r: (r / "webhook/field.py").rename(r / "webhook/fields.py"), {"trainguard", "trainer"}),
    ("requirements.lock", lambda r: (r / "requirements.lock").write_text(
        (r / "requirements.lock").read_text() + "extra==1.0\n"), {"trainguard"}),
    ("requirements-build.lock", lambda r: (r / "requirements-build.lock").write_text("pip==1\n"),
     {"trainguard", "trainer"}),
    ("pyproject.toml", lambda r: (r / "pyproject.toml").write_text(
        (r / "pyproject.toml").read_text() + "\n"), {"trainguard", "trainer"}),
    ("the Dockerfile", lambda r: (r / "Dockerfile").write_text((r / "Dockerfile").read_text() + "\n"), {"trainguard"}),
    ("the trainer Dockerfile", lambda r: (r / "tests/node/images/trainer.Dockerfile").write_text("FROM x\n"),
     {"trainer"}),
    ("the layout packer", lambda r: (r / "hack/oci_layout.py").write_text("# changed\n"), {"base", "pause"}),
    ("the pip settings carrier", lambda r: (r / "hack/pip_config.py").write_text("# changed\n"), {"base"}),
    ("the rest of images.sh", lambda r: (r / "hack/images.sh").write_text("# changed\n"), set()),
    ("a test", lambda r: (r / "tests/unit/test_x.py").write_text("def test(): assert 1\n"), set()),
    ("compiled files", lambda r: ((r / "webhook/__pycache__").mkdir(exist_ok=True),
                                  (r / "webhook/__pycache__/field.cpython-311.pyc").write_bytes(b"\0"),
                                  (r / "controller/x.pyc").write_bytes(b"\0")), set()),
    ("an egg-info", lambda r: ((r / "webhook/trainguard.egg-info").mkdir(),
                               (r / "webhook/trainguard.egg-info/PKG-INFO").write_text("x")), set()),
]


@pytest.mark.parametrize("what,edit,changed", CHANGES, ids=[c[0] for c in CHANGES])
def test_key_follows_inputs(repo: Path, what: str, edit, changed: set[str]) -> None:
    before = keys(repo)
    edit(repo)
    after = keys(repo)
    assert {image for image in INPUTS if before[image] != after[image]} == changed


@pytest.mark.parametrize("fact", ["base", "buildkit", "mirror", "ca"])
def test_key_follows_facts(repo: Path, fact: str) -> None:
    assert keys(repo, **{fact: "1"}) != keys(repo, **{fact: "2"})
    assert keys(repo, **{fact: "1"}) == keys(repo, **{fact: "1"})


def test_keys_differ_between_images(repo: Path) -> None:
    assert len(set(keys(repo).values())) == len(INPUTS)


def test_a_missing_input_is_an_error(repo: Path) -> None:
    shutil.rmtree(repo / "controller")
    with pytest.raises(SystemExit, match="controller .*does not exist"):
        image_key.image_key("trainguard", repo)


@pytest.mark.parametrize("image", sorted(DOCKERFILES))
def test_inputs_cover_what_the_dockerfile_copies(image: str) -> None:
    """Every source of a COPY from the build context is an input, so no file the image holds escapes the key."""
    sources = []
    for line in DOCKERFILES[image].read_text().splitlines():
        words = line.split()
        if words[:1] == ["COPY"] and not any(w.startswith("--from") for w in words):
            sources += [w for w in words[1:-1] if not w.startswith("--")]
    assert sources, "the Dockerfile copies from its context"
    inputs = INPUTS[image]
    for src in sources:
        rel = re.sub(r"^\./", "", src).rstrip("/")
        assert any(rel == i or rel.startswith(i + "/") for i in inputs), f"{src} is not among {image}'s inputs"


def test_cli(repo: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert image_key.main(["trainguard", "--repo", str(repo), "--with", "base=abc"]) == 0
    assert capsys.readouterr().out.strip() == image_key.image_key("trainguard", repo, {"base": "abc"})
    with pytest.raises(SystemExit):
        image_key.main(["trainguard", "--with", "no-equals-sign"])
