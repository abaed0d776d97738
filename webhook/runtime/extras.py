"""trainguard effects the TrainJob API cannot carry, applied at build time and recorded on the JobSet.

The policy webhook decides (e.g. "this job is scheduled by KAI") and writes the decision on the TrainJob as an
annotation; the build applies it to the pods. What was applied is recorded in the JobSet annotation
``trainguard.io/policy-effects`` (compact JSON, sorted keys) so a user can see why a pod template differs from
the runtime. A pod template that already names a scheduler keeps it: the runtime author's choice wins.
"""

from __future__ import annotations

import json

from trainguard.webhook.runtime.draft import Draft
from trainguard.webhook.runtime.names import POLICY_EFFECTS_ANNOTATION, SCHEDULER_NAME_ANNOTATION


def apply(draft: Draft) -> None:
    effects: dict[str, object] = {}
    scheduler = draft.trainjob_view.metadata.annotations.get(SCHEDULER_NAME_ANNOTATION)
    if scheduler:
        applied = []
        for rj, spec in draft.all_pod_specs():
            if not spec.get("schedulerName"):
                spec["schedulerName"] = scheduler
                applied.append(rj.get("name"))
        if applied:
            effects["schedulerName"] = {"value": scheduler, "replicatedJobs": applied}
    if effects:
        draft.annotations[POLICY_EFFECTS_ANNOTATION] = json.dumps(effects, sort_keys=True, separators=(",", ":"))
