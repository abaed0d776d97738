"""A trainer pod may not run as a dataset cache agent's ServiceAccount.

Each DatasetCache's agents run as ServiceAccount ``trainguard-cache-<cache>`` (``agent_name`` in
``trainguard.controller.reconcile.cache_daemonset``), whose Role may patch pods. A namespace user who names that
ServiceAccount in a TrainingRuntime or a TrainJob's runtimePatches would get a pod carrying the agent's token. The
apiserver already makes that harmless (``trainguard.controller.reconcile.cache_agent_policy``: an agent token may only
write the report annotations of the pod it is bound to); this check refuses it at ``kubectl apply`` with a message naming the field, instead of admitting a job whose
pods hold an identity they have no use for. Both ``serviceAccountName`` and its deprecated alias
``serviceAccount`` are checked, on every pod template of the merged job. Upstream Kubeflow Trainer v2.3 has no
dataset cache agents, so it admits any ServiceAccount name; trainguard denies this prefix only.

Pure: no I/O. ``webhook/`` never imports ``controller/``, so the prefix is repeated here and a unit test pins it to
``agent_name()``.
"""

from __future__ import annotations

import json
from typing import Any, Mapping

from trainguard.webhook.api.views import Runtime, replicated_jobs
from trainguard.webhook.field import FieldError, forbidden
from trainguard.webhook.policy import framework

AGENT_SERVICE_ACCOUNT_PREFIX = "trainguard-cache-"
_KEYS = ("serviceAccountName", "serviceAccount")


def agent_identity_errors(jobset_spec: Mapping[str, Any], prefix: str = "") -> list[FieldError]:
    """A finding for each pod template of ``jobset_spec`` that runs as a cache agent's ServiceAccount; ``prefix``
    is prepended to each field path (e.g. ``spec.template.spec.`` for a TrainingRuntime)."""
    errors: list[FieldError] = []
    for rjob in replicated_jobs(jobset_spec):
        for key in _KEYS:
            name = rjob.pod_spec.get(key)
            if isinstance(name, str) and name.startswith(AGENT_SERVICE_ACCOUNT_PREFIX):
                path = f"{prefix}replicatedJobs[{rjob.name}].template.spec.template.spec.{key}"
                errors.append(forbidden(path, f"{json.dumps(name)} is a dataset cache agent's ServiceAccount; "
                                              "trainer pods may not run as it"))
    return errors


def trainjob_errors(trainjob: dict[str, Any], runtime: dict[str, Any]) -> list[FieldError]:
    """The findings on the job ``trainjob`` builds from ``runtime`` (its runtimePatches and overrides merged)."""
    effective = framework.effective_job_or_none(trainjob, runtime)
    return [] if effective is None else agent_identity_errors(effective.spec)


def runtime_errors(runtime: dict[str, Any]) -> list[FieldError]:
    """The findings on a TrainingRuntime's or ClusterTrainingRuntime's own template."""
    return agent_identity_errors(Runtime(runtime).template.spec, "spec.template.spec.")
