"""runtimePatches naming a replicated job or container the runtime lacks: a deliberate difference from upstream.

Upstream v2.3 states these rules (its JobSet plugin's messages are reproduced here verbatim) but checks them against
the template AFTER the patches were merged into it: a strategic merge keyed by name has already added the unknown
job or container, so the check always passes and upstream admits, then builds a JobSet with a job that has no
containers or a container that has no image, which the apiserver refuses: the TrainJob is stuck. A typo in a
policy's or user's patch would silently lose that setting. trainguard checks the patches against the runtime's own
template and denies (403) at apply.
"""

from __future__ import annotations

import pytest

from trainguard.webhook.field import aggregate
from trainguard.webhook.runtime import validate_trainjob
from trainguard.webhook.runtime.merge import merge_runtime_patches

from .fixtures import PLAIN_BATCH, trainjob


def _patched(rj_patch):
    patch = {"manager": "acme.io/platform", "trainingRuntimeSpec": {"template": {"spec": {"replicatedJobs": [rj_patch]}}}}
    return trainjob("t", "plain-batch", kind="TrainingRuntime", runtimePatches=[patch])


def _pod(job, **pod):
    return {"name": job, "template": {"spec": {"template": {"spec": pod}}}}


CASES = [
    ("unknown replicated job", _pod("nodes", nodeSelector={"pool": "a100"}),
     "must not have replicated job that doesn't exist in the runtime job template"),
    ("unknown container", _pod("node", containers=[{"name": "nod", "resources": {"limits": {"nvidia.com/gpu": "8"}}}]),
     "must not have container that doesn't exist in the runtime job node"),
    ("unknown init container", _pod("node", initContainers=[{"name": "warmup", "args": ["--fast"]}]),
     "must not have initContainer that doesn't exist in the runtime job node"),
]


@pytest.mark.parametrize(("case", "rj_patch", "detail"), CASES, ids=[c[0] for c in CASES])
def test_patch_naming_a_missing_target_deliberately_differs_from_upstream(case, rj_patch, detail):
    tj = _patched(rj_patch)
    message = aggregate(validate_trainjob(tj, None, PLAIN_BATCH, None)[0])
    assert message.startswith("spec.runtimePatches: Invalid value: ") and message.endswith(detail), message
    # What upstream validates instead: the merged template, where the patch has created its own target, so the
    # same check finds nothing to say.
    merged = merge_runtime_patches(PLAIN_BATCH["spec"]["template"]["spec"], tj["spec"]["runtimePatches"])
    job = next((rj for rj in merged["replicatedJobs"] if rj["name"] == rj_patch["name"]), None)
    assert job is not None
    pod = job["template"]["spec"]["template"]["spec"]
    patched_names = {c["name"] for key in ("containers", "initContainers") for c in rj_patch["template"]["spec"]["template"]["spec"].get(key, [])}
    assert patched_names <= {c["name"] for key in ("containers", "initContainers") for c in pod.get(key) or []}
