"""Topology hints on the cluster shapes of the issue's "Done when" table (host 8, NVLink 72, block 512, zone 4096)."""

from __future__ import annotations

import pytest

from policy_helpers import GPU_LEVELS
from trainguard.webhook.api.views import PolicyTopology
from trainguard.webhook.policy.topology import (
    KAI_PREFERRED,
    KAI_REQUIRED,
    KAI_TOPOLOGY,
    KUEUE_PREFERRED,
    KUEUE_REQUIRED,
    KUEUE_SLICE_REQUIRED,
    KUEUE_SLICE_SIZE,
    JobShape,
    NoFit,
    Placement,
    hints,
    place,
)

# Levels as the rules get them: read through the policy view of a topology that lists GPU_LEVELS.
LEVELS = PolicyTopology({"levels": GPU_LEVELS}).levels
TARGETS = {("Kueue",): "Kueue", ("KAI",): "KAI", ("Kueue", "KAI"): "Both"}  # the schedulers each spec.topology.target names
HOST, CLIQUE, BLOCK, ZONE = (lv.node_label for lv in LEVELS)


@pytest.mark.parametrize(
    ("case", "shape", "level", "slice_level", "slice_size"),
    [
        ("1 GPU", JobShape(1, 1, 1), HOST, None, None),
        ("8 GPUs on one host", JobShape(1, 8, 8), HOST, None, None),
        ("64 GPUs in one NVLink domain of 72", JobShape(8, 8, 64), CLIQUE, None, None),
        ("72 GPUs fill the NVLink domain", JobShape(9, 8, 72), CLIQUE, None, None),
        ("80 GPUs spill into a block, sliced per NVLink domain", JobShape(10, 8, 80), BLOCK, CLIQUE, 5),
        ("1024 GPUs across blocks, sliced per block", JobShape(128, 8, 1024), ZONE, BLOCK, 64),
        ("4 pods of 2 GPUs share one host", JobShape(4, 2, 8), HOST, None, None),
    ],
)
def test_narrowest_level_holding_the_job(case, shape, level, slice_level, slice_size):
    placement = place(shape, LEVELS)
    assert isinstance(placement, Placement), case
    assert placement.level.node_label == level
    assert (placement.slice_level.node_label if placement.slice_level else None) == slice_level
    assert placement.slice_size == slice_size


@pytest.mark.parametrize(
    ("case", "shape", "numbers"),
    [
        ("too large for any level", JobShape(1024, 8, 8192), ["8192 GPUs", "1024 nodes x 8 GPUs", "4096 GPUs"]),
        ("one pod larger than a host", JobShape(1, 16, 16), ["16 GPUs per node", "8 GPUs"]),
    ],
)
def test_job_that_fits_no_level(case, shape, numbers):
    result = place(shape, LEVELS)
    assert isinstance(result, NoFit), case
    for n in numbers:
        assert n in result.reason


def test_nodes_are_indivisible_when_choosing_a_level():
    # 9 pods x 7 GPUs = 63 GPUs <= 72, but 72 // 7 = 10 pods fit: NVLink level. 11 pods x 7 = 77 > 72: block.
    assert place(JobShape(9, 7, 63), LEVELS).level.node_label == CLIQUE
    assert place(JobShape(11, 7, 77), LEVELS).level.node_label == BLOCK


def test_no_gpus_no_hint():
    assert place(JobShape(4, 0, 0), LEVELS) is None
    assert place(JobShape(1, 8, 8), ()) is None


@pytest.mark.parametrize(
    ("placement_mode", "target", "pod", "job"),
    [
        ("Required", ("Kueue",), {KUEUE_REQUIRED: ZONE, KUEUE_SLICE_REQUIRED: BLOCK, KUEUE_SLICE_SIZE: "64"}, {}),
        ("Preferred", ("Kueue",), {KUEUE_PREFERRED: ZONE, KUEUE_SLICE_REQUIRED: BLOCK, KUEUE_SLICE_SIZE: "64"}, {}),
        ("Required", ("KAI",), {}, {KAI_TOPOLOGY: "gpu-topology", KAI_REQUIRED: ZONE}),
        ("Preferred", ("Kueue", "KAI"), {KUEUE_PREFERRED: ZONE, KUEUE_SLICE_REQUIRED: BLOCK, KUEUE_SLICE_SIZE: "64"},
         {KAI_TOPOLOGY: "gpu-topology", KAI_PREFERRED: ZONE}),
    ],
)
def test_annotations_per_target(placement_mode, target, pod, job):
    topology = PolicyTopology({"placement": placement_mode, "target": TARGETS[target], "kaiTopology": "gpu-topology",
                               "levels": GPU_LEVELS})
    assert topology.schedulers == target
    written = hints(place(JobShape(128, 8, 1024), LEVELS), topology)
    assert written.pod_annotations == pod
    assert written.job_annotations == job
