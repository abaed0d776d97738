"""The contract between the admission server (or ``trainguard render``) and the policy engine.

The server decodes an AdmissionReview into an ``AdmissionInput``, takes a ``ClusterSnapshot`` from its
watch-backed caches, calls one pure function of ``trainguard.webhook.policy`` and encodes the ``Verdict``: the JSON patch is
computed by the server from the original object and ``Verdict.obj``, never by re-serialising the whole object.
Objects are plain JSON dicts as the apiserver sent them; the engine parses them into typed models itself.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal, Mapping

from trainguard.webhook.policy.dataset_cache import DatasetCacheSources
from trainguard.webhook.policy.dataset_cache_agents import DatasetCacheAgents

Operation = Literal["CREATE", "UPDATE", "DELETE", "CONNECT"]
Object = dict[str, Any]


@dataclass(frozen=True)
class ClusterSnapshot:
    """Cluster state an admission decision may read; served from caches, never fetched per request."""

    # (namespace, name) -> TrainingRuntime object
    training_runtimes: Mapping[tuple[str, str], Object] = field(default_factory=dict)
    # name -> ClusterTrainingRuntime object
    cluster_training_runtimes: Mapping[str, Object] = field(default_factory=dict)
    # name -> TrainJobPolicy object (cluster-scoped)
    policies: Mapping[str, Object] = field(default_factory=dict)
    # name -> labels of the Namespace, for policy namespace selectors
    namespace_labels: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    # (namespace, name) -> DatasetCache object
    dataset_caches: Mapping[tuple[str, str], Object] = field(default_factory=dict)
    # (namespace, name) -> JobSet object, for the "patch only while no replicated job is active" rule
    jobsets: Mapping[tuple[str, str], Object] = field(default_factory=dict)
    # names of PriorityClasses, for the Volcano priorityClassName rule
    priority_classes: frozenset[str] = frozenset()
    # Where DatasetCaches may read from: the admin's setting (webhook flags), not a watched object, so no namespace
    # user can write it. The default refuses every hostPath source.
    dataset_cache_sources: DatasetCacheSources = DatasetCacheSources()
    # What DatasetCaches may ask for their agents (priority classes, tolerations, node selector, memory budget): the
    # admin's setting too. The default allows no priority class, no toleration, at most 64Gi.
    dataset_cache_agents: DatasetCacheAgents = DatasetCacheAgents()
    # Kueue's queues, for MultiKueue's managedBy defaulting (``multikueue``); empty where Kueue is not installed.
    # (namespace, LocalQueue name) -> the LocalQueue's ClusterQueue
    kueue_local_queues: Mapping[tuple[str, str], str] = field(default_factory=dict)
    # ClusterQueue name -> the names of its AdmissionChecks
    kueue_cluster_queues: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    # AdmissionCheck name -> its controllerName
    kueue_admission_checks: Mapping[str, str] = field(default_factory=dict)
    # ClusterQueue name -> {"cohort": name or None, "flavors": {flavor: {resource: (nominalQuota, borrowingLimit)}}},
    # for the capacity check at the door (``capacity``)
    kueue_quotas: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    # On a MultiKueue worker: the usernames MultiKueue's kubeconfigs authenticate as. The admin's setting (webhook
    # flag), not a watched object: only a TrainJob these users create can be taken as a manager's copy.
    multikueue_dispatchers: frozenset[str] = frozenset()


@dataclass(frozen=True)
class AdmissionInput:
    operation: Operation
    obj: Object
    old_obj: Object | None
    # Admission time: the only clock the engine sees (runtimePatches[].time stamping).
    now: datetime
    dry_run: bool = False
    namespace: str = ""
    # The requester's ``userInfo.username``: read only to tell MultiKueue's copies from users' objects.
    username: str = ""


@dataclass(frozen=True)
class Verdict:
    allowed: bool
    # Mutating webhooks: the object as it should be stored (None: unchanged). Validating webhooks: None.
    obj: Object | None = None
    warnings: tuple[str, ...] = ()
    # Denial message in the upstream aggregate format (trainguard.webhook.field.aggregate); None when allowed.
    message: str | None = None
    # Short machine-readable reason for metrics and logs, e.g. "UpstreamValidation", "PolicyLimits", "Topology".
    reason: str | None = None

    @staticmethod
    def allow(obj: Object | None = None, warnings: tuple[str, ...] | list[str] = ()) -> "Verdict":
        return Verdict(True, obj, tuple(warnings))

    @staticmethod
    def deny(message: str, reason: str, warnings: tuple[str, ...] | list[str] = ()) -> "Verdict":
        return Verdict(False, None, tuple(warnings), message, reason)
