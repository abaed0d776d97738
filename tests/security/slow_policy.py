"""A policy module for ``trainguard webhook --policy-module`` in tests: trainguard.webhook.policy.pipeline, except that a TrainJob
labelled ``test.trainguard.io/spin: <seconds>`` makes the validator spin the CPU that long first (a stand-in for
policy work that runs long on hostile input; the server cannot tell the two apart)."""

from __future__ import annotations

import time

from trainguard.webhook.policy import pipeline
from trainguard.webhook.policy.verdict import AdmissionInput, ClusterSnapshot, Verdict

SPIN_LABEL = "test.trainguard.io/spin"

mutate_trainjob = pipeline.mutate_trainjob
validate_training_runtime = pipeline.validate_training_runtime
validate_cluster_training_runtime = pipeline.validate_cluster_training_runtime
validate_trainjob_policy = pipeline.validate_trainjob_policy
validate_dataset_cache = pipeline.validate_dataset_cache


def validate_trainjob(inp: AdmissionInput, snapshot: ClusterSnapshot) -> Verdict:
    seconds = float(((inp.obj.get("metadata") or {}).get("labels") or {}).get(SPIN_LABEL, 0))
    end = time.monotonic() + seconds
    n = 0
    while time.monotonic() < end:  # busy, holding the GIL as much as Python lets it
        n += 1
    return pipeline.validate_trainjob(inp, snapshot)
