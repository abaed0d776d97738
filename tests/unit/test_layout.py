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
    bad = [(line, mod) for line, mod in imports_of(path) if mod == "controller" or mod.startswith("controller.")]
    assert not bad, f"{path.relative_to(REPO)} imports controller at line(s) {bad}: webhook must not depend on controller"


@pytest.mark.parametrize(
    "path",
    [p for p in webhook_sources() if not str(p.relative_to(REPO)).startswith(IO_PACKAGES)
     and p.name not in ("cli.py", "main.py")],
    ids=lambda p: str(p.relative_to(REPO)),
)
def test_pure_modules_do_no_network_io(path: Path) -> None:
    bad = [(line, mod) for line, mod in imports_of(path) if mod.split(".")[0] in IO_MODULES or mod in IO_MODULES]
    assert not bad, f"{path.relative_to(REPO)} imports I/O modules {bad}; move that code to webhook/admission or webhook/kube"
