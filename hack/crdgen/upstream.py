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
    """One deliberate change to an upstream CRD at ``path`` (dotted keys from the document root; ``versions`` is the
    single served version). At a list: ``item`` replaces the item named ``replaces``, else it is inserted before
    the item named ``before`` (else at the end). With ``key``, ``path`` is a schema's ``properties`` and ``item``
    becomes the new property ``key``. Each refuses what upstream already has, so a change upstream makes shows."""

    name: str
    reason: str
    file: str
    path: str
    item: dict[str, Any]
    before: str | None = None
    replaces: str | None = None
    key: str | None = None

    def apply(self, doc: dict[str, Any]) -> None:
        parent, key = _parent(doc, self.path)
        if self.key is not None:
            properties = parent[key]
            if self.key in properties:
                raise ValueError(f"addition {self.name}: upstream already has {self.key!r} at {self.path}")
            properties[self.key] = copy.deepcopy(self.item)
            return
        items = parent.setdefault(key, [])
        names = [i.get("name") for i in items]
        if self.replaces is not None:
            if self.replaces not in names:
                raise ValueError(f"addition {self.name}: upstream has no {self.replaces!r} at {self.path} to replace")
            items[names.index(self.replaces)] = copy.deepcopy(self.item)
            return
        if self.item.get("name") in names:
            raise ValueError(f"addition {self.name}: upstream already has {self.item.get('name')!r} at {self.path}")
        position = names.index(self.before) if self.before in names else len(items)
        items.insert(position, copy.deepcopy(self.item))


ADDITIONS: tuple[Addition, ...] = (
    Addition(
        name="trainjob-last-resume-time",
        reason="trainguard removes the Suspended condition on resume, because the kubeflow SDK 0.5 reads Running "
               "only from a TrainJob without conditions (upstream keeps Suspended=False and every job Kueue once "
               "suspended reads as Created); the resume time, from which activeDeadlineSeconds counts, moves here "
               "from that condition's lastTransitionTime.",
        file="trainer.kubeflow.org_trainjobs.yaml",
        path="spec.versions.schema.openAPIV3Schema.properties.status.properties",
        key="lastResumeTime",
        item={"description": "lastResumeTime is when the TrainJob was last resumed from suspension (trainguard's "
                             "addition); activeDeadlineSeconds counts from it, else from creation.",
              "format": "date-time", "type": "string"},
    ),
    Addition(
        name="trainjob-state-column",
        reason="upstream's State column shows the type of the last condition, which says Suspended, Complete or "
               "Failed but never Running; trainguard's State is the label trainguard.io/state the reconciler keeps "
               "in the SDK's words (Created, Running, Suspended, Complete, Failed, plus Blocked).",
        file="trainer.kubeflow.org_trainjobs.yaml",
        path="spec.versions.additionalPrinterColumns",
        replaces="State",
        item={"name": "State", "type": "string", "jsonPath": ".metadata.labels.trainguard\\.io/state"},
    ),
    Addition(
        name="trainjob-runtime-column",
        reason="`kubectl get trainjobs` names the runtime each job is built from, the first thing an admin asks "
               "about a job that a policy denied or a queue holds.",
        file="trainer.kubeflow.org_trainjobs.yaml",
        path="spec.versions.additionalPrinterColumns",
        item={"name": "Runtime", "type": "string", "jsonPath": ".spec.runtimeRef.name"},
        before="Age",
    ),
    Addition(
        name="trainjob-nodes-column",
        reason="`kubectl get trainjobs` shows the trainer nodes of the JobSet as built (the runtime's count when "
               "the job sets none), from the label trainguard.io/nodes the reconciler keeps.",
        file="trainer.kubeflow.org_trainjobs.yaml",
        path="spec.versions.additionalPrinterColumns",
        item={"name": "Nodes", "type": "string", "jsonPath": ".metadata.labels.trainguard\\.io/nodes"},
        before="Age",
    ),
    Addition(
        name="trainjob-gpus-column",
        reason="`kubectl get trainjobs` shows the GPUs the job's pods request as built (every replicated job, "
               "runtime template and overrides merged), from the label trainguard.io/gpus the reconciler keeps.",
        file="trainer.kubeflow.org_trainjobs.yaml",
        path="spec.versions.additionalPrinterColumns",
        item={"name": "GPUs", "type": "string", "jsonPath": ".metadata.labels.trainguard\\.io/gpus"},
        before="Age",
    ),
    Addition(
        name="trainjob-progress-column",
        reason="`kubectl get trainjobs` shows the progress the trainer reports (upstream's status.trainerStatus), "
               "which upstream's columns leave out.",
        file="trainer.kubeflow.org_trainjobs.yaml",
        path="spec.versions.additionalPrinterColumns",
        item={"name": "Progress", "type": "integer", "jsonPath": ".status.trainerStatus.progressPercentage",
              "description": "percent complete, as the trainer reports it"},
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
