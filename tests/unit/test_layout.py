"""Architecture rules the code map (design) depends on, checked on the source itself."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
# Modules that may do I/O; everything else in webhook/ is pure so the webhook, the reconciler and `render` share it.
IO_PACKAGES = ("webhook/admission/", "webhook/kube/", "webhook/process/")
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


# The command-line shells: they read files, the clock and print, around the pure engine they call
# (`trainguard render` is render.py around offline.py; `trainguard test` is testbench.py around expectations.py).
SHELL_MODULES = {"webhook/cli.py", "webhook/render.py", "webhook/testbench.py"}
# What "pure" means for the rest of webhook/: no network, no files, no processes or threads, no clock, no output.
# Randomness is injected (runtime/keys.py's KeySource), so the reconciler's real keys never reach render or a test.
IMPURE_MODULES = IO_MODULES | {"os", "io", "pathlib", "shutil", "tempfile", "glob", "fcntl", "mmap", "select",
                               "selectors", "asyncio", "threading", "multiprocessing", "concurrent", "time",
                               "logging", "random", "secrets", "uuid"}
IMPURE_CALLS = {"open", "print", "input", "breakpoint"}
# Attribute calls that read the clock or touch files whatever the receiver (datetime.now(), Path(...).read_text()).
IMPURE_METHODS = {"now", "utcnow", "today", "read_text", "write_text", "read_bytes", "write_bytes"}


def impurities(source: str) -> list[tuple[int, str]]:
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [(node.lineno, f"import {a.name}") for a in node.names
                      if a.name.split(".")[0] in IMPURE_MODULES or a.name in IMPURE_MODULES]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module.split(".")[0] in IMPURE_MODULES or node.module in IMPURE_MODULES:
                found.append((node.lineno, f"from {node.module} import ..."))
        elif isinstance(node, ast.Call):
            if isinstance(node.func, ast.Name) and node.func.id in IMPURE_CALLS:
                found.append((node.lineno, f"{node.func.id}()"))
            elif isinstance(node.func, ast.Attribute) and node.func.attr in IMPURE_METHODS:
                found.append((node.lineno, f"{ast.unparse(node.func)}()"))
    return found


def pure_sources() -> list[Path]:
    return [p for p in webhook_sources() if not str(p.relative_to(REPO)).startswith(IO_PACKAGES)
            and str(p.relative_to(REPO)) not in SHELL_MODULES]


@pytest.mark.parametrize("path", pure_sources(), ids=lambda p: str(p.relative_to(REPO)))
def test_pure_modules_do_no_io_and_read_no_clock(path: Path) -> None:
    bad = impurities(path.read_text())
    assert not bad, (f"{path.relative_to(REPO)} does I/O or reads the clock: {bad}; take it as an argument, or move it "
                     "to webhook/admission, webhook/kube or a command's shell")


@pytest.mark.parametrize("source, caught", [
    ("import socket", "import socket"),
    ("from aiohttp import web", "from aiohttp import ..."),
    ("import urllib.request", "import urllib.request"),
    ("import os", "import os"),
    ("from pathlib import Path", "from pathlib import ..."),
    ("import time", "import time"),
    ("from datetime import datetime\nx = datetime.now()", "datetime.now()"),
    ("import datetime\nx = datetime.datetime.utcnow()", "datetime.datetime.utcnow()"),
    ("from datetime import date\nx = date.today()", "date.today()"),
    ("x = open('f').read()", "open()"),
    ("x = some_path.read_text()", "some_path.read_text()"),
    ("print('hi')", "print()"),
    ("import logging", "import logging"),
    ("import subprocess", "import subprocess"),
    ("import threading", "import threading"),
])
def test_the_purity_check_catches(source: str, caught: str) -> None:
    assert [what for _, what in impurities(source)] == [caught]


def test_the_purity_check_passes_what_pure_code_does() -> None:
    source = ("from datetime import datetime, timedelta, timezone\nimport posixpath, re, json, copy\n"
              "t = datetime.fromisoformat(s) + timedelta(seconds=1)\np = posixpath.normpath(x)\n")
    assert impurities(source) == []


def test_the_shells_are_what_the_purity_rule_exempts() -> None:
    # An exemption for a file that no longer exists would silently let its replacement do I/O.
    assert all((REPO / m).is_file() for m in SHELL_MODULES)
    assert (REPO / "webhook" / "offline.py") in pure_sources()  # render's engine is checked like the rest


@pytest.mark.parametrize("path", sorted((REPO / "webhook" / "kube").rglob("*.py")), ids=lambda p: str(p.relative_to(REPO)))
def test_kube_sits_below_the_policy_engine(path: Path) -> None:
    # The I/O layer is the ground floor: the policy engine and the runtime framework read cluster state through it
    # (a snapshot type they pass in), never the other way round.
    bad = [(line, mod) for line, mod in imports_of(path)
           if mod.startswith(("trainguard.webhook.policy", "trainguard.webhook.runtime"))]
    assert not bad, f"{path.relative_to(REPO)} imports {bad}: webhook/kube must not depend on the policy engine or runtime"


# The dataset cache is two deployables of its own: the client (in training images, installed with --no-deps) and
# the node agent (`trainguard cache-agent`). Neither imports the control plane: the DaemonSet builder and the agents'
# admission policy live with the reconciler (controller/reconcile/cache_*.py), which imports the cache, not the other
# way round. Nothing from trainguard.webhook or trainguard.controller is allowed; trainguard.process (the process
# shell, standing alone) is, for the agent; the agent's third-party imports are the ones listed.
CACHE = REPO / "controller" / "cache"
CACHE_CLIENT = ("__init__.py", "client.py", "pinning.py", "pages.py", "protocol.py")
# numpy and torch: imported inside Shard.numpy()/Shard.torch() only, for callers who have them.
CACHE_CLIENT_OPTIONAL = {"numpy", "torch"}
CACHE_AGENT_THIRD_PARTY = {"aiohttp", "prometheus_client", "kubernetes"}
# The process shell (logs, probes, signals) the agent shares with the webhook and the controller.
SHELL_PACKAGE = "trainguard.process"


def _top(module: str) -> str:
    return module.split(".")[0]


@pytest.mark.parametrize("path", sorted(CACHE.glob("*.py")), ids=lambda p: str(p.relative_to(REPO)))
def test_cache_imports_nothing_of_the_control_plane(path: Path) -> None:
    import sys

    bad = [(line, mod) for line, mod in imports_of(path)
           if not mod.startswith(("trainguard.cache", SHELL_PACKAGE)) and _top(mod) not in sys.stdlib_module_names
           and _top(mod) not in CACHE_AGENT_THIRD_PARTY | CACHE_CLIENT_OPTIONAL]
    assert not bad, f"{path.relative_to(REPO)} imports {bad}: the cache agent and client carry no control plane"


@pytest.mark.parametrize("name", CACHE_CLIENT)
def test_cache_client_is_standard_library_only(name: str) -> None:
    import sys

    client_modules = {f"trainguard.cache.{n.removesuffix('.py')}" for n in CACHE_CLIENT} | {"trainguard.cache"}
    bad = [(line, mod) for line, mod in imports_of(CACHE / name)
           if _top(mod) not in sys.stdlib_module_names and mod not in client_modules
           and _top(mod) not in CACHE_CLIENT_OPTIONAL]
    assert not bad, f"controller/cache/{name} imports {bad}: the client must install with --no-deps"


@pytest.mark.parametrize("path", sorted((REPO / "webhook" / "process").glob("*.py")), ids=lambda p: str(p.relative_to(REPO)))
def test_the_process_shell_stands_alone(path: Path) -> None:
    import sys

    bad = [(line, mod) for line, mod in imports_of(path)
           if not mod.startswith(SHELL_PACKAGE) and _top(mod) not in sys.stdlib_module_names
           and _top(mod) not in ("aiohttp", "prometheus_client")]
    assert not bad, f"{path.relative_to(REPO)} imports {bad}: the agent uses the shell, so it carries no control plane"


# What each long-running command does only through the shell: a second copy of any of these is a fourth log
# format, probe server or stop handler waiting to drift.
SHELL_ONLY = {
    "add_signal_handler(": "signal-to-stop (trainguard.process.signals)",
    "logging.Formatter)": "a log format (trainguard.process.logs)",
    "basicConfig(": "a log format (trainguard.process.logs)",
    'add_get("/healthz"': "a probe server (trainguard.process.probes)",
}


@pytest.mark.parametrize("path", [p for top in ("webhook", "controller") for p in sorted((REPO / top).rglob("*.py"))
                                  if "process" not in p.relative_to(REPO).parts[:2]],
                         ids=lambda p: str(p.relative_to(REPO)))
def test_process_concerns_go_through_the_shell(path: Path) -> None:
    text = path.read_text()
    bad = [what for needle, what in SHELL_ONLY.items() if needle in text]
    assert not bad, f"{path.relative_to(REPO)} has its own {bad}"


# Fields of wire objects are read through the views (trainguard.webhook.api.views), each path in one place: two
# readers spelling the same path came to disagree (the runtimeRef's `kind: ""`). That holds for every object's
# `metadata`, `spec` and `status` (KubeObject / Meta, whatever the kind) and for the TrainJob and runtime fields
# below. Reads are `.get("<field>")` calls and `x["<field>"]` loads; building and patching objects stays on dicts:
# a store (`x["spec"]["replicas"] = 1`), a deletion, `setdefault` and the other mutating calls on the loaded value
# are writes, not reads. A plugin's own settings (`mlPolicy.mpi.*`, ...) are read by the plugin module that owns
# them. The cache agent and its client (controller/cache) and the process shell import nothing of the control
# plane, so they are outside this rule.
VIEW_FIELDS = {
    "metadata", "spec", "status",
    "numNodes", "runtimeRef", "trainer", "mlPolicy", "podGroupPolicy", "resourcesPerNode", "template",
    "runtimePatches", "initializer", "managedBy", "activeDeadlineSeconds",
}
VIEWS = REPO / "webhook" / "api" / "views"
OUTSIDE_THE_VIEW_RULE = (VIEWS, REPO / "controller" / "cache", REPO / "webhook" / "process")
MUTATING_CALLS = {"setdefault", "update", "append", "extend", "insert", "pop", "popitem", "clear", "remove"}


def field_reads(path: Path) -> list[tuple[int, str]]:
    tree = ast.parse(path.read_text(), filename=str(path))
    parent = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
    found = []
    for node in ast.walk(tree):
        key = None
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get"
                and node.args and isinstance(node.args[0], ast.Constant)):
            key = node.args[0].value
        elif isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Load) and isinstance(node.slice, ast.Constant):
            up = parent.get(node)
            if isinstance(up, ast.Subscript) and up.value is node and isinstance(up.ctx, (ast.Store, ast.Del)):
                continue  # x["spec"]["replicas"] = 1: a step toward a store
            if isinstance(up, ast.Attribute) and up.value is node and up.attr in MUTATING_CALLS:
                continue  # x["metadata"].setdefault(...)
            key = node.slice.value
        if key in VIEW_FIELDS:
            found.append((node.lineno, key))
    return found


def test_field_reads_are_found(tmp_path: Path) -> None:
    sample = tmp_path / "sample.py"
    sample.write_text(
        'a = tj.get("trainer")\n'
        'b = rj["template"]\n'
        'rj["template"] = {}\n'
        'c = x.setdefault("template", {})\n'
        'd = obj["metadata"]["name"]\n'
        'obj["spec"]["replicas"] = 1\n'
        'obj["metadata"].setdefault("labels", {})\n'
        'del obj["status"]["conditions"]\n'
        'e = (obj.get("status") or {}).get("conditions")\n'
    )
    assert sorted(field_reads(sample)) == [(1, "trainer"), (2, "template"), (5, "metadata"), (9, "status")]


@pytest.mark.parametrize(
    "path",
    [p for top in ("webhook", "controller") for p in sorted((REPO / top).rglob("*.py"))
     if not any(skip in p.parents for skip in OUTSIDE_THE_VIEW_RULE)],
    ids=lambda p: str(p.relative_to(REPO)),
)
def test_object_fields_are_read_through_the_views(path: Path) -> None:
    bad = field_reads(path)
    assert not bad, f"{path.relative_to(REPO)} reads {bad} off a raw dict: use trainguard.webhook.api.views"
