"""JobSet plugin rules (upstream's plugins/jobset): initializers, runtimePatches targets/manager/env, update rules."""

from __future__ import annotations

import pytest

from trainguard.webhook.field import aggregate
from trainguard.webhook.runtime import validate_trainjob

from .fixtures import PLAIN_BATCH, TAB_TRAIN, deep, trainjob

REF = '{"name":"plain-batch","kind":"TrainingRuntime"}'


def _validate(tj, old=None, rt=PLAIN_BATCH, jobset=None):
    return aggregate(validate_trainjob(tj, old, rt, jobset)[0])


def _runtime_without(mutate):
    rt = deep(PLAIN_BATCH)
    mutate(rt["spec"]["template"]["spec"]["replicatedJobs"][0])
    return rt


@pytest.mark.parametrize(
    "initializer, rt, message",
    [
        ({"dataset": {"storageUri": "hf://x"}}, _runtime_without(lambda rj: rj.update(name="other")),
         f"spec.runtimeRef: Invalid value: {REF}: must have dataset-initializer job when trainJob is configured with input datasetConfig"),
        ({"dataset": {}}, _runtime_without(lambda rj: rj["template"]["spec"]["template"]["spec"]["containers"][0].update(name="x")),
         f"spec.runtimeRef: Invalid value: {REF}: must have container with name - dataset-initializer in the dataset-initializer job"),
        ({"dataset": {}}, _runtime_without(lambda rj: rj["template"]["spec"]["template"]["spec"]["containers"][0].pop("volumeMounts")),
         f"spec.runtimeRef: Invalid value: {REF}: must have volumeMount with name - initializer in container dataset-initializer of the dataset-initializer job"),
        ({"model": {"storageUri": "hf://m"}}, PLAIN_BATCH,
         f"spec.runtimeRef: Invalid value: {REF}: must have model-initializer job when trainJob is configured with input modelConfig"),
        ({"dataset": {"storageUri": "hf://x"}}, PLAIN_BATCH, ""),
        ({}, _runtime_without(lambda rj: rj.update(name="other")), ""),
    ],
    ids=["reject-no-job", "reject-no-container", "reject-no-mount", "reject-model", "accept", "accept-no-initializer"],
)
def test_initializer_rules(initializer, rt, message):
    tj = trainjob("t", "plain-batch", kind="TrainingRuntime", initializer=initializer)
    assert _validate(tj, rt=rt) == message


def _with_patch(*replicated_jobs, manager="acme.io/platform", metadata=None):
    template = {"spec": {"replicatedJobs": list(replicated_jobs)}}
    if metadata:
        template["metadata"] = metadata
    return trainjob("t", "plain-batch", kind="TrainingRuntime", runtimePatches=[{"manager": manager, "trainingRuntimeSpec": {"template": template}}])


def _pod_patch(job, **pod):
    return {"name": job, "template": {"spec": {"template": {"spec": pod}}}}


@pytest.mark.parametrize(
    "tj, detail",
    [
        (_with_patch(_pod_patch("ghost", nodeSelector={"a": "b"})), "must not have replicated job that doesn't exist in the runtime job template"),
        (_with_patch(_pod_patch("node", containers=[{"name": "ghost"}])), "must not have container that doesn't exist in the runtime job node"),
        (_with_patch(_pod_patch("node", initContainers=[{"name": "ghost"}])), "must not have initContainer that doesn't exist in the runtime job node"),
        (_with_patch(_pod_patch("node", containers=[{"name": "node", "env": [{"name": "A", "value": "1"}]}])),
         "must not have envs for the dataset-initializer, model-initializer, node containers"),
        (_with_patch(_pod_patch("dataset-initializer", containers=[{"name": "dataset-initializer", "env": [{"name": "A", "value": "1"}]}])),
         "must not have envs for the dataset-initializer, model-initializer, node containers"),
    ],
    ids=["reject-job", "reject-container", "reject-init-container", "reject-node-env", "reject-initializer-env"],
)
def test_patch_target_rules_reject(tj, detail):
    errors, _ = validate_trainjob(tj, None, PLAIN_BATCH, None)
    assert [(e.path, e.detail) for e in errors] == [("spec.runtimePatches", detail)]
    assert str(errors[0]).startswith('spec.runtimePatches: Invalid value: [{"manager":"acme.io/platform"')


@pytest.mark.parametrize(
    "tj",
    [
        _with_patch(_pod_patch("node", nodeSelector={"a": "b"}, tolerations=[{"key": "k", "operator": "Exists"}])),
        _with_patch(_pod_patch("node", containers=[{"name": "node", "volumeMounts": [{"name": "x", "mountPath": "/x"}]}])),
        _with_patch(metadata={"labels": {"a": "b"}}),
    ],
    ids=["accept-scheduling", "accept-mounts", "accept-metadata"],
)
def test_patch_target_rules_accept(tj):
    assert _validate(tj) == ""


@pytest.mark.parametrize(
    "manager, message",
    [
        ("platform", 'spec.runtimePatches.manager: Invalid value: "platform": must be a domain-prefixed path (such as "acme.io/foo")'),
        ("Acme.io/x", 'spec.runtimePatches.manager: Invalid value: "Acme.io": a lowercase RFC 1123 subdomain must consist of'),
        ("acme.io/a b", 'spec.runtimePatches.manager: Invalid value: "a b": Invalid path'),
        ("kueue.x-k8s.io/manager", ""),
    ],
    ids=["reject-no-domain", "reject-bad-domain", "reject-bad-path", "accept"],
)
def test_manager_must_be_domain_prefixed(manager, message):
    assert _validate(_with_patch(manager=manager)).startswith(message)
    assert bool(message) == bool(_validate(_with_patch(manager=manager)))


def _pair(old_suspend, new_suspend):
    old = deep(TAB_TRAIN)
    old["spec"]["suspend"] = old_suspend
    new = deep(TAB_TRAIN)
    new["spec"]["suspend"] = new_suspend
    new["spec"]["runtimePatches"][0]["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]["nodeSelector"] = {"pool": "gpu"}
    return old, new


ACTIVE = {"status": {"replicatedJobsStatus": [{"name": "dataset-initializer", "active": 0}, {"name": "node", "active": 2}]}}
IDLE = {"status": {"replicatedJobsStatus": [{"name": "node", "active": 0}]}}


@pytest.mark.parametrize(
    "old_suspend, new_suspend, jobset, message",
    [
        (False, False, None, "spec.runtimePatches: Forbidden: RuntimePatches can only be modified when the TrainJob is suspended before or after the update"),
        (True, False, ACTIVE, "spec.runtimePatches: Forbidden: RuntimePatches cannot be modified when the JobSet's ReplicatedJob node is still active"),
        (True, False, None, ""),  # Kueue: patch and resume in one request
        (False, True, IDLE, ""),
        (True, True, IDLE, ""),
    ],
    ids=["reject-running", "reject-active", "accept-resume", "accept-suspend", "accept-suspended"],
)
def test_patch_update_rules(old_suspend, new_suspend, jobset, message):
    old, new = _pair(old_suspend, new_suspend)
    assert _validate(new, old, jobset=jobset) == message


def test_unchanged_patches_on_running_job_are_fine():
    old = deep(TAB_TRAIN)
    assert _validate(deep(old), old, jobset=ACTIVE) == ""
