"""Wiring a TrainJob's JobSet to a node-local dataset cache (issue 7).

A TrainJob opts in with the annotation ``trainguard.io/dataset-cache: <name>``. The cache agent of that
DatasetCache (a DaemonSet built by ``trainguard.controller.reconcile.cache_daemonset``) listens on a Unix socket
inside a per-cache host directory; this module mounts that directory read-only into the trainer containers and tells the training
code where the socket is. The host-path convention lives here, not in ``controller/``, because both sides need
it and ``webhook/`` must never import ``controller/``.

Who can reach the agent: its socket is mode 0660 with group ``SOCKET_GROUP_ID`` in a directory of mode 0750 with
that group, so the trainer pods wired here also get ``SOCKET_GROUP_ID`` in ``securityContext.supplementalGroups``,
and the agent refuses any peer without it (SO_PEERGROUPS; see ``trainguard.cache.agent``). The group is no secret:
any pod author can list any GID. The boundary is reaching the socket at all, i.e. mounting its host directory,
which only these trainer pods do (TrainJobs of the cache's own namespace, built by the controller) and which Pod
Security baseline denies to pods users write themselves (hostPath volumes). The group keeps out what reaches the
node directory without being meant to use it: host users and other containers or pods that do not carry it.

When the DatasetCache sets ``spec.holdTrainersUntilWarm``, the trainer pod templates also get the scheduling gate
``trainguard.io/dataset-cache-warm`` and the label ``trainguard.io/waits-for-dataset-cache: <cache>``; the
reconciler (``trainguard.controller.reconcile.gates``) removes exactly that gate once the cache reports Ready. A gated pod has
no node yet, so "warm on its nodes" can only mean "warm on every node the cache selects" (``status.nodesReady ==
status.nodesDesired > 0``): the pod will land on one of them, and no cheaper test can know which.

Pure: no I/O, no clock. The input JobSet is never mutated; applying the wiring twice gives the same JobSet.
"""

from __future__ import annotations

import copy
import re
from typing import Any, Mapping

from trainguard.webhook.api.constants import ANNOTATION_DATASET_CACHE, LABEL_TRAINJOB_ANCESTOR
from trainguard.webhook.api.views import DatasetCache, KubeObject, ReplicatedJob, TrainJob, replicated_jobs
from trainguard.webhook.field import FieldError, aggregate, invalid, required

DATASET_CACHE_ANNOTATION = ANNOTATION_DATASET_CACHE

# Host side: one directory per DatasetCache, so two caches (or two namespaces) never share a socket, and a pod
# mounting one cache's directory cannot reach another cache's agent.
SOCKET_HOST_ROOT = "/var/run/trainguard/cache"
SOCKET_FILENAME = "agent.sock"

# Container side: a fixed path, so training code and images need not know namespace or cache name.
SOCKET_MOUNT_PATH = "/var/run/trainguard/cache"
SOCKET_VOLUME_NAME = "trainguard-dataset-cache"

# The group owning the socket and its directory, added to the trainer pods' supplementalGroups. One fixed GID
# (per-cache directories already keep caches apart), outside the ranges distributions give to users and groups
# (1000-60000) and below nobody/nogroup (65534).
SOCKET_GROUP_ID = 64320

ENV_CACHE_SOCKET = "TRAINGUARD_CACHE_SOCKET"
ENV_DATASET = "TRAINGUARD_DATASET"

# Opt-in hold (DatasetCache spec.holdTrainersUntilWarm): the gate on the trainer pods and the label naming the cache
# they wait for (the reconciler watches pods by this label; a label value fits: cache names are at most 52 chars).
WARM_GATE = "trainguard.io/dataset-cache-warm"
WAITS_FOR_LABEL = "trainguard.io/waits-for-dataset-cache"

ANCESTOR_LABEL = LABEL_TRAINJOB_ANCESTOR
TRAINER_CONTAINER = "node"

_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


class DatasetCacheWiringError(ValueError):
    """The TrainJob, the DatasetCache and the JobSet do not fit together; ``errors`` holds each reason."""

    def __init__(self, errors: list[FieldError]):
        self.errors = errors
        super().__init__(aggregate(errors))


def socket_host_directory(namespace: str, name: str) -> str:
    """The node directory holding the agent socket of DatasetCache ``namespace/name``.

    Namespace and name are DNS labels / subdomains, so they cannot contain ``/`` or ``..``; we still refuse
    anything else rather than build a host path from it.
    """
    for what, value in (("namespace", namespace), ("name", name)):
        if not value or "/" in value or value in (".", "..") or "\x00" in value:
            raise ValueError(f"dataset cache {what} {value!r} cannot be used in a host path")
    return f"{SOCKET_HOST_ROOT}/{namespace}/{name}"


def referenced_cache_name(trainjob: Mapping[str, Any]) -> str | None:
    """The DatasetCache a TrainJob opts into, or None when it does not carry the annotation."""
    value = TrainJob(trainjob).metadata.annotations.get(DATASET_CACHE_ANNOTATION)
    return value if value else None


def holds_trainers(dataset_cache: Mapping[str, Any] | None) -> bool:
    """Whether ``dataset_cache`` asks for trainer pods to be held until it is warm (``spec.holdTrainersUntilWarm``)."""
    return DatasetCache(dataset_cache).hold_trainers_until_warm


def wire_dataset_cache(jobset: dict, trainjob: Mapping[str, Any], dataset_cache: Mapping[str, Any]) -> dict:
    """Return a copy of ``jobset`` whose trainer containers can reach ``dataset_cache``'s agent.

    For every replicatedJob that is the trainer ancestor (label ``trainer.kubeflow.org/trainjob-ancestor-step:
    trainer``) or is named ``node`` (MPI workers), the pod gets a read-only hostPath volume of the cache's socket
    directory and its ``node`` container gets the mount plus ``TRAINGUARD_CACHE_SOCKET`` and
    ``TRAINGUARD_DATASET``, and the pod gets ``SOCKET_GROUP_ID`` in ``securityContext.supplementalGroups`` (after
    any groups already there, which are kept). When the cache opts into ``holdTrainersUntilWarm``, the pod template also gets the
    scheduling gate ``WARM_GATE`` (after any gates already there, which are kept) and the label
    ``WAITS_FOR_LABEL: <cache>``. Volumes are upserted by name, mounts by mountPath, env and gates by name, so the
    result is idempotent. Raises ``DatasetCacheWiringError`` when the TrainJob does not reference this cache, the namespaces
    differ, or no trainer container exists.
    """
    errors: list[FieldError] = []
    cache = DatasetCache(dataset_cache)
    cache_name = cache.metadata.name or ""
    cache_namespace = cache.metadata.namespace or ""
    referenced = referenced_cache_name(trainjob)
    annotation_path = f"metadata.annotations[{DATASET_CACHE_ANNOTATION}]"
    if referenced is None:
        errors.append(required(annotation_path, "the TrainJob does not opt into a dataset cache"))
    elif referenced != cache_name:
        errors.append(invalid(annotation_path, referenced, f"does not name the DatasetCache {cache_name!r}"))
    if cache_namespace != (TrainJob(trainjob).metadata.namespace or ""):
        errors.append(
            invalid("metadata.namespace", cache_namespace, "the DatasetCache must be in the TrainJob's namespace")
        )
    if not _DNS_LABEL.match(cache_namespace or "-") or not cache_name or "/" in cache_name:
        errors.append(invalid("metadata", f"{cache_namespace}/{cache_name}", "not a valid DatasetCache name"))
    if errors:
        raise DatasetCacheWiringError(errors)

    host_dir = socket_host_directory(cache_namespace, cache_name)
    volume = {"name": SOCKET_VOLUME_NAME, "hostPath": {"path": host_dir, "type": "DirectoryOrCreate"}}
    mount = {"name": SOCKET_VOLUME_NAME, "mountPath": SOCKET_MOUNT_PATH, "readOnly": True}
    env = [
        {"name": ENV_CACHE_SOCKET, "value": f"{SOCKET_MOUNT_PATH}/{SOCKET_FILENAME}"},
        {"name": ENV_DATASET, "value": cache_name},
    ]

    hold = cache.hold_trainers_until_warm
    wired = copy.deepcopy(jobset)
    found = False
    for job in replicated_jobs(KubeObject(wired).spec):
        if not _is_trainer_job(job):
            continue
        rjob: dict = job.raw  # type: ignore[assignment]  # a dict of ``wired``, this function's copy: wired below
        pod_template = rjob.setdefault("template", {}).setdefault("spec", {}).setdefault("template", {})
        pod_spec = pod_template.setdefault("spec", {})
        containers = [c for c in pod_spec.get("containers") or [] if c.get("name") == TRAINER_CONTAINER]
        if not containers:
            continue
        found = True
        _upsert(pod_spec.setdefault("volumes", []), volume, key="name")
        groups = pod_spec.setdefault("securityContext", {}).setdefault("supplementalGroups", [])
        if SOCKET_GROUP_ID not in groups:
            groups.append(SOCKET_GROUP_ID)
        if hold:
            _upsert(pod_spec.setdefault("schedulingGates", []), {"name": WARM_GATE}, key="name")
            pod_template.setdefault("metadata", {}).setdefault("labels", {})[WAITS_FOR_LABEL] = cache_name
        for container in containers:
            _upsert(container.setdefault("volumeMounts", []), mount, key="mountPath")
            for var in env:
                _upsert(container.setdefault("env", []), var, key="name")
    if not found:
        raise DatasetCacheWiringError(
            [
                invalid(
                    "spec.replicatedJobs",
                    None,
                    f"no trainer container {TRAINER_CONTAINER!r} to wire the dataset cache {cache_name!r} into",
                )
            ]
        )
    return wired


def _is_trainer_job(job: ReplicatedJob) -> bool:
    return job.ancestor == "trainer" or job.name == TRAINER_CONTAINER


def _upsert(items: list, item: Mapping[str, Any], *, key: str) -> None:
    """Replace the entry with the same ``key`` in place (keeping order), else append; as upstream's builder does."""
    for i, existing in enumerate(items):
        if existing.get(key) == item[key]:
            items[i] = copy.deepcopy(dict(item))
            return
    items.append(copy.deepcopy(dict(item)))
