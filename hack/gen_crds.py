#!/usr/bin/env python3
"""Generate ``crds/*.yaml``: the trainer.kubeflow.org CRDs from upstream's, trainguard.io's from our models.

usage: python hack/gen_crds.py [--out DIR] [--bin-dir DIR] [--upstream-dir DIR] [--check]

TrainJob, TrainingRuntime and ClusterTrainingRuntime are upstream Kubeflow Trainer's CRDs from the Go module that
``hack/tools/trainer/go.mod`` pins (downloaded with ``go mod download`` when missing; ``--upstream-dir`` or
``TRAINGUARD_TRAINER_MODULE_DIR`` names a module directory instead), plus the additions listed in
``hack/crdgen/upstream.py``. TrainJobPolicy and DatasetCache come from the ``trainguard.webhook.api`` models: embedded
Kubernetes schemas from the API server's OpenAPI v3 document, found in the tools directory that
``hack/build-tools.sh openapi crds`` prepares (its last output line); ``--bin-dir`` (or ``TRAINGUARD_BIN_DIR``)
skips running the script. ``--check`` writes nothing and exits 1 if ``crds/`` differs from what they give.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

HACK = Path(__file__).resolve().parent
REPO = HACK.parent
sys.path.insert(0, str(HACK))
sys.path.insert(0, str(REPO))

from crdgen.render import crd_document, file_name, to_yaml  # noqa: E402
from crdgen.structural import OpenAPIConverter  # noqa: E402
from crdgen.upstream import header, pinned_version, trainer_crds  # noqa: E402
from crdgen.upstream import module_dir as trainer_module_dir  # noqa: E402
from crdgen.walker import SchemaWalker  # noqa: E402
from trainguard.webhook.api.trainguard import DatasetCache, TrainJobPolicy  # noqa: E402

ROOT_MODELS = (TrainJobPolicy, DatasetCache)
# Client-side apply stores the whole object in an annotation capped at 256 KiB, so these CRDs need
# `kubectl apply --server-side`; etcd's request limit (1.5 MiB) bounds them for real. Stay under 1 MiB.
MAX_CRD_BYTES = 1 << 20


def tools_dir(explicit: str | None) -> Path:
    """The directory with openapi/ and crds/ (built on demand by hack/build-tools.sh)."""
    if explicit:
        return Path(explicit)
    if os.environ.get("TRAINGUARD_BIN_DIR"):
        return Path(os.environ["TRAINGUARD_BIN_DIR"])
    done = subprocess.run([str(HACK / "build-tools.sh"), "openapi", "crds"], check=True, text=True,
                          stdout=subprocess.PIPE)
    return Path(done.stdout.strip().splitlines()[-1])


def upstream_lookup(bin_dir: Path):
    """``(crd_dir, "spec")`` -> the schema at that property of the upstream CRD's (single served) version."""
    cache: dict[str, dict[str, Any]] = {}

    def lookup(source: tuple[str, str]) -> dict[str, Any]:
        crd_dir, path = source
        if crd_dir not in cache:
            files = sorted(glob.glob(str(bin_dir / "crds" / crd_dir / "*.yaml")))
            if len(files) != 1:
                raise FileNotFoundError(f"expected one CRD in {bin_dir / 'crds' / crd_dir}, found {files}")
            doc = yaml.safe_load(Path(files[0]).read_text())
            storage = [v for v in doc["spec"]["versions"] if v.get("storage")]
            cache[crd_dir] = storage[0]["schema"]["openAPIV3Schema"]
        node = cache[crd_dir]
        for part in path.split("."):
            node = node["properties"][part]
        return node

    return lookup


def generate(bin_dir: Path, upstream_dir: Path) -> dict[str, str]:
    """File name -> YAML text for every CRD."""
    document = json.loads((bin_dir / "openapi" / "api__v1_openapi.json").read_text())
    walker = SchemaWalker(OpenAPIConverter(document), upstream_lookup(bin_dir))
    out: dict[str, str] = {file_name(model): to_yaml(crd_document(model, walker)) for model in ROOT_MODELS}
    trainer_header = header(pinned_version())
    for name, doc in trainer_crds(upstream_dir).items():
        out[name] = to_yaml(doc, trainer_header)
    for name, text in out.items():
        if len(text.encode()) >= MAX_CRD_BYTES:
            raise SystemExit(f"{name} is {len(text.encode())} bytes; keep CRDs under {MAX_CRD_BYTES}")
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=str(REPO / "crds"), help="output directory (default: crds/)")
    parser.add_argument("--bin-dir", help="tools directory (default: from hack/build-tools.sh openapi crds)")
    parser.add_argument("--upstream-dir", help="the github.com/kubeflow/trainer/v2 module directory "
                        "(default: the Go module cache, downloaded at the version hack/tools/trainer/go.mod pins)")
    parser.add_argument("--check", action="store_true", help="compare with --out instead of writing")
    args = parser.parse_args(argv)
    files = generate(tools_dir(args.bin_dir), trainer_module_dir(args.upstream_dir))
    out = Path(args.out)
    if args.check:
        stale = [name for name, text in files.items()
                 if not (out / name).exists() or (out / name).read_text() != text]
        extra = sorted(p.name for p in out.glob("*.yaml") if p.name not in files)
        if stale or extra:
            print(f"CRDs out of date: {stale + extra}; run `python hack/gen_crds.py`", file=sys.stderr)
            return 1
        return 0
    out.mkdir(parents=True, exist_ok=True)
    for name, text in sorted(files.items()):
        (out / name).write_text(text)
        print(f"{out / name}: {len(text.encode())} bytes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
