"""The JobSet plugin (upstream's ``plugins/jobset``): initializer and runtimePatches rules, and JobSet assembly.

Validation here is about the runtime's shape and the patches: a TrainJob asking for a dataset/model
initializer needs the runtime jobs to receive it; a patch may only touch jobs and containers the runtime has,
may not set env on the containers whose env the TrainJob API owns, and may change only while the job is
suspended (before or after the update, so Kueue can patch and resume in one request) and while no replicated
job is still active. Deliberate difference: upstream checks the patch targets against the template after the
patches were merged into it, where a patch naming a job or container the runtime lacks has already created it, so
upstream admits and then builds a job without containers or a container without an image; here the targets are
checked against the runtime's own template and such a patch is denied (a typo must not silently lose a setting).

Build steps (applied by ``effective``): the trainer layer (image/command/args/env into ``node``), initializer
env (``STORAGE_URI``, user env, ``envFrom`` secretRef), ``replicas: 1`` on ancestor jobs, and parallelism/
completions from the pod counts. ``build_jobset`` wraps the effective spec into the object; ``is_running``
is the "never mutate a running JobSet" rule.
"""

from __future__ import annotations

import re
from typing import Any, Mapping

from trainguard.webhook.api.views import KubeObject, ReplicatedJob, TrainJob, patch_template
from trainguard.webhook.field import FieldError, forbidden, internal, invalid, required
from trainguard.webhook.runtime.draft import RUNTIME_NODE_ARGS, Draft, ancestor_of, pod_spec, resources_targets, runtime_patches
from trainguard.webhook.runtime.merge import override_container, upsert
from trainguard.webhook.runtime.names import (
    ANCESTOR_DATASET_INITIALIZER,
    ANCESTOR_MODEL_INITIALIZER,
    ANCESTOR_TRAINER,
    DATASET_INITIALIZER,
    JOBSET_API_VERSION,
    MODEL_INITIALIZER,
    NODE,
    STORAGE_URI_ENV,
)
from trainguard.webhook.runtime.objects import owner_reference

RUNTIME_REF = "spec.runtimeRef"
RUNTIME_PATCHES = "spec.runtimePatches"
INITIALIZER_VOLUME = "initializer"
ENV_OWNED_CONTAINERS = (DATASET_INITIALIZER, MODEL_INITIALIZER, NODE)

_DNS1123_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_HTTP_PATH = re.compile(r"^[A-Za-z0-9/\-._~%!$&'()*+,;=:]+$")
_DNS1123_MESSAGE = (
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must "
    "start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is "
    "'[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"
)
_PATH_MESSAGE = "Invalid path (regex used for validation is '[A-Za-z0-9/\\-._~%!$&'()*+,;=:]+')"


# -- validation -------------------------------------------------------------------------------------------


def validate(draft: Draft, old_trainjob: Mapping[str, Any] | None, jobset: Mapping[str, Any] | None) -> list[FieldError]:
    return _initializer_errors(draft) + _patch_errors(draft) + _patch_update_errors(draft, old_trainjob, jobset)


def _initializer_errors(draft: Draft) -> list[FieldError]:
    errors: list[FieldError] = []
    # Upstream quotes the runtimeRef as sent (not defaulted) in these messages.
    ref = draft.trainjob_view.raw_runtime_ref
    for key, job_name, config in (("dataset", DATASET_INITIALIZER, "datasetConfig"), ("model", MODEL_INITIALIZER, "modelConfig")):
        if draft.trainjob_view.initializer(key) is None:
            continue
        rj = draft.job(job_name)
        if rj is None:
            errors.append(invalid(RUNTIME_REF, ref, f"must have {job_name} job when trainJob is configured with input {config}"))
            continue
        container = draft.container(rj, job_name)
        if container is None:
            errors.append(invalid(RUNTIME_REF, ref, f"must have container with name - {job_name} in the {job_name} job"))
        elif not any(m.get("name") == INITIALIZER_VOLUME for m in container.get("volumeMounts") or []):
            errors.append(
                invalid(
                    RUNTIME_REF,
                    ref,
                    f"must have volumeMount with name - {INITIALIZER_VOLUME} in container {job_name} of the {job_name} job",
                )
            )
    return errors


def domain_prefixed_path_errors(path: str, value: str) -> list[FieldError]:
    """apimachinery ``IsDomainPrefixedPath``: ``<DNS-1123 subdomain>/<http path>``."""
    if not value:
        return [required(path)]
    host, sep, rest = value.partition("/")
    if not sep or not host or not rest:
        return [invalid(path, value, 'must be a domain-prefixed path (such as "acme.io/foo")')]
    errors: list[FieldError] = []
    if len(host) > 253:
        errors.append(invalid(path, host, "must be no more than 253 characters"))
    if not _DNS1123_SUBDOMAIN.match(host):
        errors.append(invalid(path, host, _DNS1123_MESSAGE))
    if not _HTTP_PATH.match(rest):
        errors.append(invalid(path, rest, _PATH_MESSAGE))
    return errors


def _patch_errors(draft: Draft) -> list[FieldError]:
    errors: list[FieldError] = []
    patches = runtime_patches(draft.trainjob)
    if not patches:
        return errors
    template_jobs = {rj.raw.get("name"): rj for rj in draft.runtime_view.template.replicated_jobs()}
    # Upstream checks patch targets against the union of the job's containers and init containers; each job's set
    # is made once, however many patches name the job (16 patches x 100 jobs may all name one).
    job_containers: dict[str, set[str | None]] = {}
    for patch in patches:
        errors += domain_prefixed_path_errors(f"{RUNTIME_PATCHES}.manager", patch.get("manager") or "")
        for rj_patch in patch_template(patch).replicated_jobs():
            name = rj_patch.raw.get("name")
            if name not in template_jobs:
                errors.append(invalid(RUNTIME_PATCHES, patches, "must not have replicated job that doesn't exist in the runtime job template"))
                continue
            names = job_containers.get(name)
            if names is None:
                names = job_containers[name] = template_jobs[name].container_names()
            for c in rj_patch.containers(init=True):
                if c.get("name") not in names:
                    errors.append(invalid(RUNTIME_PATCHES, patches, f"must not have initContainer that doesn't exist in the runtime job {name}"))
            for c in rj_patch.containers():
                if c.get("name") not in names:
                    errors.append(invalid(RUNTIME_PATCHES, patches, f"must not have container that doesn't exist in the runtime job {name}"))
                elif c.get("env") and c.get("name") in ENV_OWNED_CONTAINERS:
                    errors.append(
                        invalid(
                            RUNTIME_PATCHES,
                            patches,
                            f"must not have envs for the {DATASET_INITIALIZER}, {MODEL_INITIALIZER}, {NODE} containers",
                        )
                    )
    return errors


def _patch_update_errors(
    draft: Draft, old_trainjob: Mapping[str, Any] | None, jobset: Mapping[str, Any] | None
) -> list[FieldError]:
    if old_trainjob is None:
        return []
    old, new = TrainJob(old_trainjob), draft.trainjob_view
    if old.runtime_patches == new.runtime_patches:
        return []
    if not old.suspend and not new.suspend:
        return [forbidden(RUNTIME_PATCHES, "RuntimePatches can only be modified when the TrainJob is suspended before or after the update")]
    if jobset is None:
        return []
    statuses = KubeObject(jobset).get("status.replicatedJobsStatus")
    if statuses is not None and not isinstance(statuses, list):
        return [internal(RUNTIME_PATCHES, "JobSet status.replicatedJobsStatus is not a list")]
    return [
        forbidden(RUNTIME_PATCHES, f"RuntimePatches cannot be modified when the JobSet's ReplicatedJob {s.get('name')} is still active")
        for s in statuses or []
        if (s.get("active") or 0) > 0
    ]


# -- build steps ------------------------------------------------------------------------------------------


def apply_trainer(draft: Draft) -> None:
    """The trainer layer: image/command/args into the trainer's ``node`` container, env into every trainer target."""
    trainer = draft.trainer
    for rj in draft.jobs():
        if ancestor_of(rj) in (ANCESTOR_TRAINER, ANCESTOR_DATASET_INITIALIZER, ANCESTOR_MODEL_INITIALIZER):
            rj["replicas"] = 1
    if not draft.has_trainer:
        return
    trainer_rj = draft.trainer_job()
    if trainer_rj is not None:
        draft.facts[RUNTIME_NODE_ARGS] = (draft.container(trainer_rj, NODE) or {}).get("args")
        draft.edit_container(
            trainer_rj,
            NODE,
            lambda c: override_container(c, image=trainer.image, command=trainer.command, args=trainer.args),
        )
    if trainer.env:
        for rj in resources_targets(draft):
            draft.edit_container(rj, NODE, lambda c: override_container(c, env=trainer.env))


def apply_initializers(draft: Draft) -> None:
    """STORAGE_URI, user env and the secretRef into the same-named container of each initializer job."""
    for key, ancestor in (("dataset", ANCESTOR_DATASET_INITIALIZER), ("model", ANCESTOR_MODEL_INITIALIZER)):
        config = draft.trainjob_view.initializer(key)
        if config is None:
            continue
        for rj in draft.jobs():
            if ancestor_of(rj) != ancestor:
                continue

            def edit(c: dict, config: Mapping[str, Any] = config) -> dict:
                out = dict(c)
                envs = ([{"name": STORAGE_URI_ENV, "value": config["storageUri"]}] if config.get("storageUri") else []) + list(
                    config.get("env") or []
                )
                if envs:
                    out["env"] = upsert(out.get("env"), envs, "name")
                secret = (config.get("secretRef") or {}).get("name")
                if secret:
                    source = {"secretRef": {"name": secret}}
                    existing = list(out.get("envFrom") or [])
                    out["envFrom"] = existing if source in existing else existing + [source]
                return out

            draft.edit_container(rj, ancestor, edit)


def sync_counts(draft: Draft) -> None:
    """Each replicatedJob runs ``count`` pods: parallelism = completions = count (v2.3 SyncParallelCount)."""
    for rj in draft.jobs():
        job_spec = rj.setdefault("template", {}).setdefault("spec", {})
        count = draft.counts.get(rj.get("name"), 1)
        job_spec["parallelism"] = count
        job_spec["completions"] = count
        pod_spec(rj)  # every replicatedJob has a pod spec from here on


# -- the object -------------------------------------------------------------------------------------------


def is_running(trainjob: Mapping[str, Any], existing: Mapping[str, Any] | None) -> bool:
    """A JobSet that exists while neither it nor the TrainJob is suspended must not be re-applied."""
    if existing is None:
        return False
    return not TrainJob(trainjob).suspend and not KubeObject(existing).get("spec.suspend")


def build_jobset(trainjob: Mapping[str, Any], labels: Mapping[str, str], annotations: Mapping[str, str], spec: Mapping[str, Any]) -> dict:
    meta = TrainJob(trainjob).metadata
    metadata: dict[str, Any] = {"name": meta.name, "namespace": meta.namespace}
    if labels:
        metadata["labels"] = dict(labels)
    if annotations:
        metadata["annotations"] = dict(annotations)
    metadata["ownerReferences"] = [owner_reference(trainjob)]
    body = dict(spec)
    body["suspend"] = TrainJob(trainjob).suspend
    return {"apiVersion": JOBSET_API_VERSION, "kind": "JobSet", "metadata": metadata, "spec": body}
