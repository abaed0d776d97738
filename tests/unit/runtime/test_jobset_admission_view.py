"""The webhook caches JobSets as ``jobset_admission_view`` (name, namespace, resourceVersion and each
replicatedJobsStatus entry's name and active count): every TrainJob UPDATE verdict is the same as with the whole
JobSet, and the pod templates, the rest of the status and the managedFields are not kept."""

from __future__ import annotations

import pytest

from trainguard.webhook.field import aggregate
from trainguard.webhook.kube import resources as r
from trainguard.webhook.kube.snapshot import SNAPSHOT_FIELDS, jobset_admission_view
from trainguard.webhook.runtime import validate_trainjob

from .fixtures import PLAIN_BATCH, TAB_TRAIN, deep


def whole_jobset(statuses: object) -> dict:
    status = {"conditions": [{"type": "StartupPolicyCompleted", "status": "True"}], "restarts": 0,
              "terminalState": "", "replicatedJobsStatus": statuses}
    return {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
            "metadata": {"name": "tab-train", "namespace": "team-a", "resourceVersion": "42", "uid": "u",
                         "labels": {"a": "b"}, "managedFields": [{"manager": "trainguard", "fieldsV1": {"f:spec": {}}}]},
            "spec": deep(PLAIN_BATCH["spec"]["template"]["spec"]), "status": status}


def entry(name: str, active: int) -> dict:
    return {"name": name, "active": active, "ready": active, "succeeded": 0, "failed": 0, "suspended": 0}


STATUSES = {
    "active": [entry("dataset-initializer", 0), entry("node", 2)],
    "idle": [entry("node", 0)],
    "no-active-field": [{"name": "node", "ready": 1}],
    "empty": [],
    "not-a-list": {"node": 1},
    "entry-not-a-dict": ["node"],
}


def update_pair(old_suspend: bool, new_suspend: bool) -> tuple[dict, dict]:
    old, new = deep(TAB_TRAIN), deep(TAB_TRAIN)
    old["spec"]["suspend"], new["spec"]["suspend"] = old_suspend, new_suspend
    new["spec"]["runtimePatches"][0]["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"][0]["template"][
        "spec"]["template"]["spec"]["nodeSelector"] = {"pool": "gpu"}
    return old, new


def verdict(new: dict, old: dict, jobset: dict | None) -> str:
    try:
        return aggregate(validate_trainjob(new, old, PLAIN_BATCH, jobset)[0])
    except Exception as e:  # the rule's own failure on a malformed status must stay the same failure
        return f"raised {type(e).__name__}"


@pytest.mark.parametrize("statuses", STATUSES.values(), ids=STATUSES.keys())
@pytest.mark.parametrize("suspends", [(True, False), (False, True), (False, False)], ids=["resume", "suspend", "running"])
def test_every_update_verdict_is_the_same_as_with_the_whole_jobset(statuses: object, suspends: tuple[bool, bool]) -> None:
    old, new = update_pair(*suspends)
    whole = whole_jobset(statuses)
    assert verdict(new, old, jobset_admission_view(whole)) == verdict(new, old, whole)


def test_the_active_case_is_really_denied() -> None:
    old, new = update_pair(True, False)
    assert "ReplicatedJob node is still active" in verdict(new, old, jobset_admission_view(whole_jobset(STATUSES["active"])))


def test_only_what_the_rule_reads_is_kept() -> None:
    view = jobset_admission_view(whole_jobset(STATUSES["active"]))
    assert view == {"metadata": {"name": "tab-train", "namespace": "team-a", "resourceVersion": "42"},
                    "status": {"replicatedJobsStatus": [{"name": "dataset-initializer", "active": 0},
                                                        {"name": "node", "active": 2}]}}
    assert jobset_admission_view({"metadata": {"name": "j"}}) == {"metadata": {"name": "j"}}  # no status yet


def test_the_webhook_caches_jobsets_through_the_view() -> None:
    field = next(f for f in SNAPSHOT_FIELDS if f.name == "jobsets")
    assert field.resource is r.JOBSETS and field.transform is jobset_admission_view
