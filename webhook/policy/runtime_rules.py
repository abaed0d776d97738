"""Validation of TrainingRuntime and ClusterTrainingRuntime objects (upstream's
``pkg/webhooks/trainingruntime_webhook.go``) plus trainguard's stricter checks.

Upstream parity (same paths and messages):

* every replicatedJob whose ancestor label is ``trainer``, ``dataset-initializer`` or ``model-initializer`` must
  have ``replicas`` 1 ("always must be 1") and contain the mapped container (trainer -> ``node``, others -> their
  own name) ("must contain the required container for the ancestor: <ancestor>"); unknown ancestors are ignored;
* creating a ClusterTrainingRuntime labelled ``trainer.kubeflow.org/support: deprecated`` warns.

Deliberate differences from upstream, so that a runtime that cannot produce a valid JobSet is refused at
``kubectl apply`` instead of when the first TrainJob fails:

* TrainingRuntime UPDATEs are validated too (upstream's ``ValidateUpdate`` returns nil for TrainingRuntime only);
* duplicate replicatedJob names are refused (JobSet would reject the built object);
* ``dependsOn`` must name a replicatedJob listed EARLIER in the template (JobSet's own rule, applied at build time
  upstream);
* an ML policy that addresses pods as ``<trainjob>-node-0-0`` (torch, jax, xgboost, mpi, flux) needs a replicatedJob
  named ``node``;
* at most one replicatedJob may carry the ``trainer`` ancestor label (upstream silently uses the last one);
* ``podGroupPolicy`` may set only one of ``coscheduling`` and ``volcano`` (no CEL enforces it upstream; the build
  would create two PodGroups).
Container values in messages are shown as the list of container names, not the whole container objects.
"""

from __future__ import annotations

from typing import Any, Mapping

from trainguard.webhook.api.constants import LABEL_TRAINJOB_ANCESTOR
from trainguard.webhook.api.views import ReplicatedJob, Runtime
from trainguard.webhook.field import FieldError, duplicate, forbidden, invalid
from trainguard.webhook.runtime import registry

Object = dict[str, Any]

ANCESTOR_LABEL = LABEL_TRAINJOB_ANCESTOR
ANCESTOR_CONTAINER = {
    "trainer": "node",
    "dataset-initializer": "dataset-initializer",
    "model-initializer": "model-initializer",
}
RJOBS_PATH = "spec.template.spec.replicatedJobs"


def replicated_jobs(runtime: Object) -> list[Object]:
    rjobs = Runtime(runtime).template.spec.get("replicatedJobs")
    return [r for r in rjobs if isinstance(r, dict)] if isinstance(rjobs, list) else []


def pod_spec(rjob: Object) -> Mapping[str, Any]:
    return ReplicatedJob(rjob).pod_spec


def container_names(rjob: Object, *, include_init: bool = False) -> list[str]:
    spec = pod_spec(rjob)
    names = [c.get("name") for c in spec.get("containers") or [] if isinstance(c, dict)]
    if include_init:
        names += [c.get("name") for c in spec.get("initContainers") or [] if isinstance(c, dict)]
    return [n for n in names if n is not None]


def ancestor(rjob: Object) -> str | None:
    return ReplicatedJob(rjob).ancestor


def containers_as_go_writes_them(rjob: Object) -> list[Any]:
    """The job's containers as upstream quotes them in its message: the decoded Go structs, where the non-pointer
    ``resources`` struct is always present (``{}`` when unset) and everything else as written."""
    return [{**c, "resources": c.get("resources") or {}} if isinstance(c, dict) else c
            for c in pod_spec(rjob).get("containers") or []]


def upstream_replicated_job_errors(runtime: Object) -> list[FieldError]:
    """Upstream's ``validateReplicatedJobs``: replicas and required container for ancestor-labelled jobs."""
    errors: list[FieldError] = []
    for i, rjob in enumerate(replicated_jobs(runtime)):
        step = ancestor(rjob)
        if step not in ANCESTOR_CONTAINER:
            continue
        replicas = rjob.get("replicas", 1)  # the CRD schema defaults replicas to 1
        if replicas != 1:
            errors.append(invalid(f"{RJOBS_PATH}[{i}].replicas", replicas, "always must be 1"))
        if ANCESTOR_CONTAINER[step] not in container_names(rjob):
            errors.append(invalid(
                f"{RJOBS_PATH}[{i}].template.spec.template.spec.containers", containers_as_go_writes_them(rjob),
                f"must contain the required container for the ancestor: {step}",
            ))
    return errors


def stricter_errors(runtime: Object) -> list[FieldError]:
    """trainguard's checks that a runtime can produce a valid JobSet (see the module docstring)."""
    errors: list[FieldError] = []
    rjobs = replicated_jobs(runtime)
    names = [r.get("name") for r in rjobs]
    first: dict[Any, int] = {}  # name -> index of its first job: each dependsOn is one lookup, not a scan
    for i, name in enumerate(names):
        if _hashable(name):
            first.setdefault(name, i)
    listed = _listed(names)
    for i, name in enumerate(names):
        if _hashable(name) and first[name] != i:
            errors.append(duplicate(f"{RJOBS_PATH}[{i}].name", name))
        for j, dep in enumerate(rjobs[i].get("dependsOn") or []):
            target = dep.get("name") if isinstance(dep, dict) else None
            at = first.get(target) if _hashable(target) else None
            if at is None or at >= i:
                where = "is defined after this job" if at is not None else "does not exist"
                errors.append(invalid(
                    f"{RJOBS_PATH}[{i}].dependsOn[{j}].name", target,
                    f"must name a replicatedJob defined before {name!s}; this one {where} (replicatedJobs: {listed})",
                ))
    trainers = [i for i, r in enumerate(rjobs) if ancestor(r) == "trainer"]
    for i in trainers[1:]:
        errors.append(invalid(
            f"{RJOBS_PATH}[{i}].template.metadata.labels[{ANCESTOR_LABEL}]", "trainer",
            f"only one replicatedJob may be the trainer; {names[trainers[0]]!s} already is",
        ))
    view = Runtime(runtime)
    for source in registry.node_job_policies():
        if view.ml_policy_source(source) is not None and "node" not in names:
            errors.append(invalid(
                RJOBS_PATH, names,
                f'mlPolicy.{source} needs a replicatedJob named "node" (its pods are addressed as '
                "<trainjob>-node-0-0)",
            ))
    if view.pod_group_policy_source("coscheduling") is not None and view.pod_group_policy_source("volcano") is not None:
        errors.append(forbidden("spec.podGroupPolicy", "only one of coscheduling and volcano may be set"))
    return errors


# A message names at most this many jobs (the list is built once, not per error).
LISTED_NAMES = 16


def _listed(names: list[Any]) -> str:
    shown = ", ".join(str(n) for n in names[:LISTED_NAMES])
    return shown if len(names) <= LISTED_NAMES else f"{shown}, ... ({len(names)} in all)"


def _hashable(value: Any) -> bool:
    return isinstance(value, (str, int, float, bool, type(None)))


def runtime_errors(runtime: Object) -> list[FieldError]:
    return upstream_replicated_job_errors(runtime) + stricter_errors(runtime)
