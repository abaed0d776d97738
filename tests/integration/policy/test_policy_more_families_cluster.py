"""Upstream-parity families the other policy integration tests do not reach, through ``kubectl apply``:

* runtimePatch change refused while the live JobSet (read from the webhook's JobSet cache) has an active
  ReplicatedJob (upstream, "RuntimePatches cannot be modified when the JobSet's ReplicatedJob <name> is still active");
* Volcano: empty queue-name annotation; priorityClassName missing vs ``system-*`` (short-circuits) vs existing;
* torchtune (``trainer.command == ["tune", "run"]``) rules on model, numNodes, LoRA and immutable args (torchtune.go);
* Torch envInjection targets that the runtime does not have;
* a runtimeRef kind/group no runtime implements ("unsupported runtime: <key>", a bare 403, not a field error).
"""

from __future__ import annotations

import json
import time
from typing import Any

import pytest

from policy_cluster import (
    TRAINJOB_VALIDATOR,
    Admitted,
    Denied,
    Kube,
    Outcome,
    check,
    patch,
    rjob,
    runtime,
    trainer_job,
    trainjob,
    unique,
)

Object = dict[str, Any]


def deny(*parts: str) -> Denied:
    return Denied(TRAINJOB_VALIDATOR, parts)


def apply_until(kube: Kube, obj: Object, expected: Outcome, *, timeout: float = 30) -> None:
    """Apply until the outcome is ``expected`` (the webhook's caches catch up with objects this test just wrote);
    the last attempt is asserted with ``check`` so a failure shows the real answer."""
    deadline = time.monotonic() + timeout
    while True:
        proc = kube.apply(obj)
        try:
            check(proc, expected)
            return
        except AssertionError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.3)


# --- runtimePatches vs an active JobSet -------------------------------------------------------------------------


def _jobset(name: str, namespace: str) -> Object:
    return {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet", "metadata": {"name": name, "namespace": namespace},
            "spec": {"suspend": False, "replicatedJobs": [{"name": "node", "replicas": 1, "template": {"spec": {
                "parallelism": 2, "completions": 2, "template": {"spec": {"restartPolicy": "Never", "containers": [
                    {"name": "node", "image": "busybox:1.36", "command": ["true"]}]}}}}}]}}


def _set_active(kube: Kube, name: str, active: int) -> None:
    status = {"status": {"replicatedJobsStatus": [
        {"name": "node", "ready": active, "succeeded": 0, "failed": 0, "active": active, "suspended": 0}]}}
    kube.cluster.kubectl("patch", "jobset", name, "-n", kube.namespace, "--subresource=status", "--type=merge",
                         "-p", json.dumps(status))


def test_runtime_patch_change_refused_while_jobset_replicated_job_active(kube: Kube, namespace: str) -> None:
    rt, name = unique("rt"), unique("tj")
    kube.create(runtime(rt, namespace))
    job = trainjob(name, namespace, rt, suspend=False, patches=[patch("acme.io/a", labels={"a": "1"})])
    check(kube.apply(job), Admitted())
    kube.create(_jobset(name, namespace))
    _set_active(kube, name, 2)
    assert kube.get("jobset", name)["status"]["replicatedJobsStatus"][0]["active"] == 2

    # Suspending in the same request lifts the "only while suspended" rule, but the pods are still running.
    job["spec"]["suspend"] = True
    job["spec"]["runtimePatches"] = [patch("acme.io/a", labels={"a": "2"})]
    apply_until(kube, job, deny(
        "spec.runtimePatches: Forbidden: RuntimePatches cannot be modified when the JobSet's ReplicatedJob node is "
        "still active"))
    stored = kube.get("trainjob", name)
    assert stored["spec"]["suspend"] is False
    assert stored["spec"]["runtimePatches"][0]["trainingRuntimeSpec"]["template"]["metadata"]["labels"] == {"a": "1"}

    # Once the JobSet reports no active pods, the same request is admitted.
    _set_active(kube, name, 0)
    apply_until(kube, job, Admitted())
    assert kube.get("trainjob", name)["spec"]["runtimePatches"][0]["trainingRuntimeSpec"]["template"]["metadata"][
        "labels"] == {"a": "2"}


# --- Volcano ---------------------------------------------------------------------------------------------------


def _volcano_runtime(name: str, namespace: str, *, queue: str | None = None,
                     priority_classes: tuple[str | None, ...] = (None,)) -> Object:
    """A Volcano runtime; one replicatedJob per ``priority_classes`` entry (the last is the trainer ``node``)."""
    jobs = [rjob(f"aux{i}", containers=(f"aux{i}",)) for i in range(len(priority_classes) - 1)] + [trainer_job()]
    for rj, pc in zip(jobs, priority_classes):
        if pc is not None:
            rj["template"]["spec"]["template"]["spec"]["priorityClassName"] = pc
    obj = runtime(name, namespace, jobs=jobs)
    obj["spec"]["podGroupPolicy"] = {"volcano": {}}
    if queue is not None:
        obj["spec"]["template"]["metadata"] = {"annotations": {"scheduling.volcano.sh/queue-name": queue}}
    return obj


@pytest.mark.parametrize("queue, expected", [
    ("", deny('spec.annotations[scheduling.volcano.sh/queue-name]: Invalid value: "": Volcano queue name must not be '
              "empty")),
    ("research", Admitted()),
], ids=["empty-queue", "named-queue"])
def test_volcano_queue_name(kube: Kube, namespace: str, queue: str, expected: Outcome) -> None:
    rt = unique("rt")
    kube.create(_volcano_runtime(rt, namespace, queue=queue))
    check(kube.apply(trainjob(unique("tj"), namespace, rt)), expected)


MISSING = 'spec.templateSpec.priorityClassName: Invalid value: "{pc}": PriorityClass "{pc}" doesn\'t exist: ' \
          'priorityclasses.scheduling.k8s.io "{pc}" not found'


@pytest.mark.parametrize("classes, expected", [
    (("gold-missing",), deny(MISSING.format(pc="gold-missing"))),
    (("system-node-critical",), Admitted()),
    (("system-cluster-critical",), Admitted()),
    # Upstream stops at the first system-* class: a missing class in a later job is not checked.
    (("system-node-critical", "gold-missing"), Admitted()),
    (("gold-missing", "system-node-critical"), deny(MISSING.format(pc="gold-missing"))),
], ids=["missing", "system-node", "system-cluster", "system-first-short-circuits", "missing-before-system"])
def test_volcano_priority_class(kube: Kube, namespace: str, classes: tuple[str, ...], expected: Outcome) -> None:
    rt = unique("rt")
    kube.create(_volcano_runtime(rt, namespace, priority_classes=classes))
    check(kube.apply(trainjob(unique("tj"), namespace, rt)), expected)


def test_volcano_existing_priority_class_admitted(kube: Kube, namespace: str) -> None:
    rt, pc = unique("rt"), unique("gold")
    kube.cleanup.append(("PriorityClass", pc))
    kube.cluster.kubectl("create", "priorityclass", pc, "--value=1000")
    kube.create(_volcano_runtime(rt, namespace, priority_classes=(pc,)))
    # The webhook learns PriorityClasses from its watch; until then it would refuse the name as missing.
    apply_until(kube, trainjob(unique("tj"), namespace, rt), Admitted())


# --- torchtune ---------------------------------------------------------------------------------------------------

TUNE = ["tune", "run"]


@pytest.mark.parametrize("runtime_name, trainer, expected", [
    ("torchtune-llama3.2-1b", {"command": TUNE}, Admitted()),
    ("torchtune-gpt2-small", {"command": TUNE}, deny(
        'spec.runtimeRef.name: Invalid value: "torchtune-gpt2-small": must have a supported pretrained model, invalid '
        "model configured: gpt2/SMALL")),
    ("torchtune-llama3.2-1b", {"command": TUNE, "numNodes": 2}, deny(
        "spec.trainer.numNodes: Invalid value: 2: must be 1 for llama3_2/1B model")),
    ("torchtune-llama3.3-70b", {"command": TUNE, "numNodes": 2, "args": ["model.lora_attn_modules=[q_proj]"]}, deny(
        "spec.trainer.numNodes: Invalid value: 2: LoRA fine-tuning is not supported for multi-node training in "
        "TorchTune")),
    ("torchtune-qwen2.5-1.5b", {"command": TUNE, "args": ["model.quantize_base=True"],
                                "resourcesPerNode": {"limits": {"nvidia.com/gpu": "1"}}}, deny(
        'spec.runtimeRef.name: Invalid value: "torchtune-qwen2.5-1.5b": QLoRA is not supported for qwen2_5/1.5B model')),
    ("torchtune-llama3.2-1b", {"command": TUNE, "args": ["epochs=1", "output_dir=/tmp/x"]}, deny(
        'spec.trainer.args[1]: Invalid value: "output_dir=/tmp/x": must not set immutable config "output_dir" in '
        "trainer args; it is managed by the runtime")),
    # Not torchtune unless the command is exactly ["tune", "run"]: the model rules do not apply.
    ("torchtune-gpt2-small", {"command": ["torchrun", "train.py"], "numNodes": 2}, Admitted()),
], ids=["supported", "unsupported-model", "multi-node-small-model", "lora-multi-node", "qlora-qwen",
        "immutable-arg", "not-torchtune"])
def test_torchtune_rules(kube: Kube, namespace: str, runtime_name: str, trainer: Object, expected: Outcome) -> None:
    # A namespaced runtime: the model comes from the runtime's name, which must therefore be exactly this one.
    kube.create(runtime(runtime_name, namespace, kind="TrainingRuntime"))
    check(kube.apply(trainjob(unique("tj"), namespace, runtime_name, kind="TrainingRuntime", trainer=trainer)), expected)


# --- Torch envInjection ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("target, expected", [
    ({"jobName": "node", "containerNames": ["metrics"]}, Admitted()),
    ({"jobName": "node", "containerNames": ["setup"]}, Admitted()),  # an initContainer is a valid target
    ({"jobName": "node", "containerNames": ["ghost"]}, deny(
        "spec.runtimeRef: Invalid value: ",
        'envInjection target podSet "node" container "ghost" not found in runtime template')),
    ({"jobName": "evaluator", "containerNames": ["metrics"]}, deny(
        'envInjection target podSet "evaluator" container "metrics" not found in runtime template')),
], ids=["container", "init-container", "missing-container", "missing-job"])
def test_torch_env_injection_target(kube: Kube, namespace: str, target: Object, expected: Outcome) -> None:
    rt = unique("rt")
    kube.create(runtime(rt, namespace, ml_policy={"numNodes": 1, "torch": {"envInjection": {"targets": [target]}}},
                        jobs=[trainer_job(containers=("node", "metrics"), init_containers=("setup",))]))
    check(kube.apply(trainjob(unique("tj"), namespace, rt, trainer={"numNodes": 1})), expected)


# --- unsupported runtime kind ------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind, group, key", [
    ("CustomRuntime", "trainer.kubeflow.org", "CustomRuntime.trainer.kubeflow.org"),
    ("TrainingRuntime", "acme.io", "TrainingRuntime.acme.io"),
], ids=["unknown-kind", "foreign-group"])
def test_unsupported_runtime_kind(kube: Kube, namespace: str, kind: str, group: str, key: str) -> None:
    job = trainjob(unique("tj"), namespace, "anything", kind=kind)
    job["spec"]["runtimeRef"]["apiGroup"] = group
    proc = kube.apply(job, wait_cache=False)
    check(proc, deny(f"unsupported runtime: {key}"))
    assert proc.stderr.rstrip().endswith(f"denied the request: unsupported runtime: {key}"), proc.stderr
