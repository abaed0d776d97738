"""A training image gets the client with ``pip install --no-deps trainguard``: only the ``trainguard`` package lands,
and ``from trainguard.cache import open_shard`` imports nothing but the standard library.

The project is installed from a copy of its sources into an empty target directory (no virtual environment, no
site-packages), then imported by an isolated interpreter (``-I -S``) whose only path beyond the standard library is
that directory: an import of pydantic, aiohttp, kubernetes or any other dependency fails there.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]

IMPORT = """
import json, sys
sys.path.insert(0, sys.argv[1])
before = set(sys.modules)
from trainguard.cache import open_shard, open_shards, pin, CacheClient
import trainguard.cache
loaded = sorted(m for m in set(sys.modules) - before)
print(json.dumps({"file": trainguard.cache.__file__, "loaded": loaded}))
"""


def test_the_client_installs_alone_and_needs_only_the_standard_library(tmp_path: Path) -> None:
    source = tmp_path / "src"
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info")
    for folder in ("webhook", "controller"):
        shutil.copytree(REPO / folder, source / folder, ignore=ignore)
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(REPO / name, source / name)
    target = tmp_path / "site"
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation", "--no-index",
         "--target", str(target), str(source)],
        check=True, capture_output=True, text=True, timeout=300,
    )
    installed = {p.name for p in target.iterdir()} - {"bin"}
    assert {n for n in installed if not n.endswith(".dist-info")} == {"trainguard"}, installed
    assert not (target / "trainguard" / "__init__.py").exists()  # a namespace: nothing above the three packages
    assert {p.name for p in (target / "trainguard").iterdir()} == {"webhook", "controller", "cache", "process"}

    out = subprocess.run([sys.executable, "-I", "-S", "-c", IMPORT, str(target)],
                         check=True, capture_output=True, text=True, cwd=tmp_path, timeout=60)
    result = json.loads(out.stdout)
    assert result["file"].startswith(str(target))
    outside = sorted({m.split(".")[0] for m in result["loaded"]} - set(sys.stdlib_module_names) - {"trainguard"})
    assert outside == [], f"importing the client loaded {outside}"
    assert {m for m in result["loaded"] if m.startswith("trainguard.")} <= {
        "trainguard.cache", "trainguard.cache.client", "trainguard.cache.pinning", "trainguard.cache.pages",
        "trainguard.cache.protocol"}
