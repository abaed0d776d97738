"""Architecture rules the code map (design) depends on, checked on the source itself."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
# Modules that may do I/O; everything else in webhook/ is pure so the webhook, the reconciler and `render` share it.
IO_PACKAGES = ("webhook/admission/", "webhook/kube/")
IO_MODULES = {"socket", "ssl", "aiohttp", "kubernetes", "subprocess", "requests", "urllib.request", "http.client"}


def imports_of(path: Path) -> list[tuple[int, str]]:
    tree = ast.parse(path.read_text(), filename=str(path))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.append((node.lineno, node.module))
    return found


def webhook_sources() -> list[Path]:
    return sorted((REPO / "webhook").rglob("*.py"))


@pytest.mark.parametrize("path", webhook_sources(), ids=lambda p: str(p.relative_to(REPO)))
def test_webhook_never_imports_controller(path: Path) -> None:
    bad = [(line, mod) for line, mod in imports_of(path)
           if mod.startswith(("trainguard.controller", "trainguard.cache", "controller"))]
    assert not bad, f"{path.relative_to(REPO)} imports controller at line(s) {bad}: webhook must not depend on controller"


def python_sources() -> list[Path]:
    return sorted(p for top in ("webhook", "controller", "tests", "bench", "hack") for p in (REPO / top).rglob("*.py"))


@pytest.mark.parametrize("path", python_sources(), ids=lambda p: str(p.relative_to(REPO)))
def test_code_imports_the_installed_names(path: Path) -> None:
    # The folders are not packages once installed: only `trainguard.*` exists in site-packages. An import of the bare
    # folder name works from a checkout (the repository root is on sys.path for tests) and fails in the image.
    bad = [(line, mod) for line, mod in imports_of(path)
           if mod.split(".")[0] in ("webhook", "controller") or mod.startswith("trainguard.controller.cache")]
    assert not bad, f"{path.relative_to(REPO)} imports {bad}: use trainguard.webhook / trainguard.controller / trainguard.cache"


def test_every_package_folder_is_installed() -> None:
    # pyproject.toml lists the packages by hand (the folders are mapped into `trainguard`); a new folder missing from
    # the list would be left out of the wheel and the image.
    import tomllib

    setup = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]
    mapped = {name: REPO / folder for name, folder in setup["package-dir"].items()}
    expected = set()
    for init in sorted(REPO.glob("webhook/**/__init__.py")) + sorted(REPO.glob("controller/**/__init__.py")):
        folder = init.parent
        # The longest mapping that contains this folder names it.
        name, root = max(((n, r) for n, r in mapped.items() if folder == r or r in folder.parents),
                         key=lambda item: len(item[1].parts))
        expected.add(".".join([name, *folder.relative_to(root).parts]))
    assert sorted(setup["packages"]) == sorted(expected)


@pytest.mark.parametrize(
    "path",
    [p for p in webhook_sources() if not str(p.relative_to(REPO)).startswith(IO_PACKAGES)
     and p.name not in ("cli.py", "main.py")],
    ids=lambda p: str(p.relative_to(REPO)),
)
def test_pure_modules_do_no_network_io(path: Path) -> None:
    bad = [(line, mod) for line, mod in imports_of(path) if mod.split(".")[0] in IO_MODULES or mod in IO_MODULES]
    assert not bad, f"{path.relative_to(REPO)} imports I/O modules {bad}; move that code to webhook/admission or webhook/kube"


@pytest.mark.parametrize("path", sorted((REPO / "webhook" / "kube").rglob("*.py")), ids=lambda p: str(p.relative_to(REPO)))
def test_kube_sits_below_the_policy_engine(path: Path) -> None:
    # The I/O layer is the ground floor: the policy engine and the runtime framework read cluster state through it
    # (a snapshot type they pass in), never the other way round.
    bad = [(line, mod) for line, mod in imports_of(path)
           if mod.startswith(("trainguard.webhook.policy", "trainguard.webhook.runtime"))]
    assert not bad, f"{path.relative_to(REPO)} imports {bad}: webhook/kube must not depend on the policy engine or runtime"
