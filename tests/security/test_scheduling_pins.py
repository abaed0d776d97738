"""Issue 22 part 1: stepping around the scheduling an Enforce TrainJobPolicy sets, played as a namespace user against
the real apiserver, ``trainguard webhook`` and the example ``gpu-teams`` policy (examples/gpu-topology-policy.yaml,
Kueue queue ``team-gpu``, priority ``standard``) with a KAI queue and schedulerName added.

Before, defaults were only defaults ("users win"): a user's own priority class (the cluster's highest), queue,
``trainguard.io/scheduler-name`` annotation, a runtimePatch's ``kai.scheduler/queue`` or a TrainingRuntime's
``schedulerName`` was stored and took effect, and removing the policy's annotation after admission was allowed. Each
is now denied naming the field and the allowed values; the policy's own values still pass.
"""

from __future__ import annotations

import copy
import json
import uuid
from typing import Any, Iterator

import pytest
import yaml

from tests.security.test_policy_bypass import (
    GOOD_IMAGE, VALIDATOR, create, ctr_runtime, example, get, trainjob, wait_until,
)

PRIORITY = "kueue.x-k8s.io/priority-class"
QUEUE = "kueue.x-k8s.io/queue-name"
KAI = "kai.scheduler/queue"
SCHED = "trainguard.io/scheduler-name"


@pytest.fixture
def pinned(cluster, namespace: str, admission) -> Iterator[dict[str, str]]:
    """The example policy plus a KAI queue and schedulerName, allowing the per-test ClusterTrainingRuntime and a
    TrainingRuntime the user may write (so only scheduling can deny a job on it)."""
    suffix = uuid.uuid4().hex[:6]
    runtime, user_runtime = f"torch-{suffix}", f"mine-{suffix}"
    policy = copy.deepcopy(example("TrainJobPolicy"))
    policy["metadata"]["name"] = f"gpu-teams-{suffix}"
    policy["spec"]["limits"]["allowedRuntimes"] = [runtime, f"TrainingRuntime/{user_runtime}"]
    policy["spec"]["scheduling"].update({"kai": {"queue": "team-gpu"}, "schedulerName": "kai-scheduler"})
    cluster.kubectl("label", "namespace", namespace, "trainguard.io/tier=gpu")
    cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump_all([ctr_runtime(runtime), policy]))
    probe = trainjob("probe", runtime, nodes=100)  # a limit, so the wait itself does not depend on pinning
    try:
        wait_until(lambda: "maxTotalGpus" in cluster.kubectl(
            "create", "--dry-run=server", "-n", namespace, "-f", "-", input=json.dumps(probe), check=False).stderr,
            "the webhook to enforce the policy")
        yield {"runtime": runtime, "user_runtime": user_runtime, "policy": policy["metadata"]["name"]}
    finally:
        cluster.kubectl("delete", "trainjobpolicy", policy["metadata"]["name"], "--ignore-not-found", check=False)
        cluster.kubectl("delete", "clustertrainingruntime", runtime, "--ignore-not-found", check=False)


def denied(proc, *parts: str) -> None:
    assert proc.returncode != 0, proc.stdout
    assert VALIDATOR in proc.stderr, proc.stderr
    for part in parts:
        assert part in proc.stderr, proc.stderr


def of(pinned, allowed: str, field: str) -> str:
    return f'TrainJobPolicy "{pinned["policy"]}" allows only ["{allowed}"] ({field})'


def test_own_priority_class_and_queue_labels_are_denied(cluster, namespace, namespace_user, pinned):
    proc = create(namespace_user, trainjob("top-priority", pinned["runtime"], labels={PRIORITY: "highest"}))
    denied(proc, f'metadata.labels[{PRIORITY}]: Invalid value: "highest": '
           + of(pinned, "standard", "spec.scheduling.kueue.priorityClass"), 'leave the label out to get "standard"')
    proc = create(namespace_user, trainjob("other-queue", pinned["runtime"], labels={QUEUE: "other-team"}))
    denied(proc, f'metadata.labels[{QUEUE}]: Invalid value: "other-team": '
                 + of(pinned, "team-gpu", "spec.scheduling.kueue.queueName"))
    assert get(cluster, namespace, "top-priority") is None and get(cluster, namespace, "other-queue") is None
    # The neighbour: the policy's own values, written by the user, are admitted.
    ok = trainjob("own-values", pinned["runtime"], labels={PRIORITY: "standard", QUEUE: "team-gpu"})
    assert create(namespace_user, ok).returncode == 0


def test_scheduler_name_annotation_cannot_be_chosen_or_removed(cluster, namespace, namespace_user, pinned):
    job = trainjob("own-scheduler", pinned["runtime"])
    job["metadata"]["annotations"] = {SCHED: "default-scheduler"}
    denied(create(namespace_user, job), f'metadata.annotations[{SCHED}]: Invalid value: "default-scheduler": '
           + of(pinned, "kai-scheduler", "spec.scheduling.schedulerName"))

    assert create(namespace_user, trainjob("admitted", pinned["runtime"])).returncode == 0
    assert get(cluster, namespace, "admitted")["metadata"]["annotations"][SCHED] == "kai-scheduler"
    removed = namespace_user.kubectl("annotate", "trainjob", "admitted", f"{SCHED}-", check=False)
    denied(removed, f"metadata.annotations[{SCHED}]: Forbidden: cannot be removed while TrainJobPolicy "
                    f'"{pinned["policy"]}" selects this job')
    changed = namespace_user.kubectl("annotate", "--overwrite", "trainjob", "admitted", f"{SCHED}=other", check=False)
    denied(changed, f"metadata.annotations[{SCHED}]: Forbidden: cannot be changed to 'other'")
    assert get(cluster, namespace, "admitted")["metadata"]["annotations"][SCHED] == "kai-scheduler"
    # The neighbour: an unrelated annotation edit.
    assert namespace_user.kubectl("annotate", "trainjob", "admitted", "note=ok").returncode == 0


def kai_patch(queue: str) -> dict[str, Any]:
    return {"manager": "acme.io/user", "trainingRuntimeSpec": {"template": {
        "metadata": {"labels": {KAI: queue}},
        "spec": {"replicatedJobs": [{"name": "node", "template": {"spec": {"template": {
            "metadata": {"labels": {KAI: queue}}}}}}]}}}}


def test_runtime_patch_kai_queue_is_denied_on_create_and_update(cluster, namespace, namespace_user, pinned):
    path = "spec.runtimePatches[acme.io/user].trainingRuntimeSpec.template"
    job = trainjob("kai-patch", pinned["runtime"])
    job["spec"]["runtimePatches"] = [kai_patch("other")]
    denied(create(namespace_user, job),
           f'{path}.metadata.labels[{KAI}]: Invalid value: "other": '
           + of(pinned, "team-gpu", "spec.scheduling.kai.queue"),
           f'{path}.spec.replicatedJobs[node].template.spec.template.metadata.labels[{KAI}]: Invalid value: "other"')
    assert get(cluster, namespace, "kai-patch") is None

    # UPDATE: the same patch added to an admitted job. The neighbour: a patch naming the policy's queue.
    assert create(namespace_user, trainjob("kai-later", pinned["runtime"])).returncode == 0
    patches = get(cluster, namespace, "kai-later")["spec"]["runtimePatches"]
    added = namespace_user.kubectl("patch", "trainjob", "kai-later", "--type", "merge", "-p", json.dumps(
        {"spec": {"runtimePatches": patches + [kai_patch("other")]}}), check=False)
    denied(added, f'{path}.metadata.labels[{KAI}]: Invalid value: "other"')
    same = namespace_user.kubectl("patch", "trainjob", "kai-later", "--type", "merge", "-p", json.dumps(
        {"spec": {"runtimePatches": patches + [kai_patch("team-gpu")]}}), check=False)
    assert same.returncode == 0, same.stderr


def user_runtime(name: str, scheduler: str | None) -> dict[str, Any]:
    rt = ctr_runtime(name)
    rt["kind"] = "TrainingRuntime"
    pod = rt["spec"]["template"]["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]
    pod["containers"][0]["image"] = GOOD_IMAGE
    if scheduler:
        pod["schedulerName"] = scheduler
    return rt


def test_a_users_training_runtime_cannot_name_its_own_scheduler(cluster, namespace, namespace_user, pinned):
    name = pinned["user_runtime"]
    assert namespace_user.kubectl("create", "-f", "-", input=json.dumps(user_runtime(name, "other"))).returncode == 0
    proc = create(namespace_user, trainjob("own-runtime-scheduler", name, kind="TrainingRuntime"))
    denied(proc, f'spec.runtimeRef: Invalid value: "other": TrainingRuntime "{name}" sets it at spec.template.spec.'
                 "replicatedJobs[node].template.spec.template.spec.schedulerName; "
                 + of(pinned, "kai-scheduler", "spec.scheduling.schedulerName"))
    assert get(cluster, namespace, "own-runtime-scheduler") is None
    # The neighbour: the same runtime without a scheduler of its own.
    namespace_user.kubectl("delete", "trainingruntime", name)
    namespace_user.kubectl("create", "-f", "-", input=json.dumps(user_runtime(name, None)))
    wait_until(lambda: create(namespace_user, trainjob("on-own-runtime", name, kind="TrainingRuntime")).returncode == 0,
               "the webhook's runtime cache to see the change")
