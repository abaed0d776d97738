"""The trainer.kubeflow.org CRDs: upstream Kubeflow Trainer's own, plus trainguard's listed additions.

trainguard serves upstream's API, so its TrainJob, TrainingRuntime and ClusterTrainingRuntime CRDs are upstream's
``manifests/base/crds/*.yaml`` from the Go module ``github.com/kubeflow/trainer/v2`` at the version
``hack/tools/trainer/go.mod`` pins (one pin for the parity peer and these CRDs). Generating them from our models
instead drifted in dozens of places users hit (list-map keys, embedded metadata, defaults, a CEL rule upstream does
not have). Anything trainguard adds is an :class:`Addition` in ``ADDITIONS``, with its reason; the test
``tests/unit/api/test_crds_match_upstream.py`` allows no other difference.
"""

from __future__ import annotations

import copy
import json
import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

# libyaml's loader when PyYAML has it: the runtime CRDs are 0.9 MB each.
_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
HACK = Path(__file__).resolve().parent.parent
TRAINER_GO_MOD = HACK / "tools" / "trainer" / "go.mod"
MODULE = "github.com/kubeflow/trainer/v2"
CRD_DIR = "manifests/base/crds"
FILES = (
    "trainer.kubeflow.org_trainjobs.yaml",
    "trainer.kubeflow.org_trainingruntimes.yaml",
    "trainer.kubeflow.org_clustertrainingruntimes.yaml",
)


def pinned_version(go_mod: Path = TRAINER_GO_MOD) -> str:
    """The trainer module version ``hack/tools/trainer/go.mod`` requires."""
    match = re.search(rf"^\s*(?:require\s+)?{re.escape(MODULE)}\s+(v\S+)", go_mod.read_text(), re.MULTILINE)
    if not match:
        raise SystemExit(f"{go_mod} does not require {MODULE}")
    return match.group(1)


def module_dir(explicit: str | None = None) -> Path:
    """The upstream module's source directory: ``--upstream-dir``/``TRAINGUARD_TRAINER_MODULE_DIR``, or the Go
    module cache, downloaded (and checked against ``hack/tools/trainer/go.sum``) when missing."""
    given = explicit or os.environ.get("TRAINGUARD_TRAINER_MODULE_DIR")
    if given:
        return Path(given)
    if shutil.which("go") is None:
        raise SystemExit(f"`go` is needed to download {MODULE} (or set TRAINGUARD_TRAINER_MODULE_DIR)")
    done = subprocess.run(["go", "mod", "download", "-json", MODULE], cwd=TRAINER_GO_MOD.parent, text=True,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    if done.returncode != 0:
        raise SystemExit(f"go mod download {MODULE} failed: {done.stderr.strip() or done.stdout.strip()}")
    info = json.loads(done.stdout)
    if info.get("Version") != pinned_version():
        raise SystemExit(f"go mod download gave {MODULE}@{info.get('Version')}, go.mod pins {pinned_version()}")
    return Path(info["Dir"])


def upstream_crds(source: Path) -> dict[str, dict[str, Any]]:
    """File name -> upstream's CRD document, read from the module directory."""
    out = {}
    for name in FILES:
        path = source / CRD_DIR / name
        if not path.is_file():
            raise SystemExit(f"{path} not found: is {source} the {MODULE} module?")
        out[name] = yaml.load(path.read_text(), Loader=_LOADER)
    return out


# --- additions ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Addition:
    """One deliberate change to an upstream CRD: an item inserted into the list at ``path`` (dotted keys from the
    document root; ``versions`` is the single served version) before the item named ``before`` (else at the end)."""

    name: str
    reason: str
    file: str
    path: str
    item: dict[str, Any]
    before: str | None = None

    def apply(self, doc: dict[str, Any]) -> None:
        parent, key = _parent(doc, self.path)
        items = parent.setdefault(key, [])
        names = [i.get("name") for i in items]
        if self.item.get("name") in names:
            raise ValueError(f"addition {self.name}: upstream already has {self.item.get('name')!r} at {self.path}")
        position = names.index(self.before) if self.before in names else len(items)
        items.insert(position, copy.deepcopy(self.item))


ADDITIONS: tuple[Addition, ...] = (
    Addition(
        name="trainjob-phase-column",
        reason="`kubectl get trainjobs` shows trainguard's running signal (label trainguard.io/state: Created, "
               "Running, Suspended, Complete, Failed, Blocked): upstream's State column shows the last condition, "
               "which stays Suspended after a resume, and a Running condition would make the kubeflow SDK report "
               "running jobs as Created.",
        file="trainer.kubeflow.org_trainjobs.yaml",
        path="spec.versions.additionalPrinterColumns",
        item={"name": "Phase", "type": "string", "jsonPath": ".metadata.labels.trainguard\\.io/state"},
        before="Age",
    ),
)


def _parent(doc: dict[str, Any], path: str) -> tuple[dict[str, Any], str]:
    node: Any = doc
    *parents, key = path.split(".")
    for part in parents:
        node = node[part]
        if part == "versions":
            served = [v for v in node if v.get("served")]
            if len(served) != 1:
                raise ValueError(f"expected one served version, found {len(served)}")
            node = served[0]
    return node, key


def trainer_crds(source: Path) -> dict[str, dict[str, Any]]:
    """File name -> upstream's CRD with trainguard's additions applied."""
    docs = upstream_crds(source)
    for addition in ADDITIONS:
        addition.apply(docs[addition.file])
    return docs


def header(source_version: str) -> str:
    return (f"# Generated by hack/gen_crds.py from {MODULE}@{source_version} {CRD_DIR} with the additions listed in "
            "hack/crdgen/upstream.py; do not edit.\n")
