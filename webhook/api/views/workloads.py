"""The other kinds the reconciler and the I/O layer read: the JobSet it builds and watches, the Pods it ungates, its
Lease, Kueue's queueing objects the webhook consults, the Workloads of blocked TrainJobs, and list responses.

Only the fields trainguard reads are here; everything else about these objects is opaque to it. These objects are
written by other controllers and users, not checked at trainguard's door, and some are read by watch transforms,
where an exception would keep the object out of the cache for good: so every path is walked tolerantly (a ``spec`` or
``status`` that is not an object reads as empty, with ``_in``). A scalar is returned as
written, and so is ``replicatedJobsStatus``: the code reading it says what a value of the wrong type means (the
admission rule on it reports one).
"""

from __future__ import annotations

from typing import Any, Mapping

from trainguard.webhook.api.views.base import KubeObject, View, _in, _list, _mapping
from trainguard.webhook.api.views.jobset import ReplicatedJob, replicated_jobs


class JobSet(KubeObject):
    """A ``jobset.x-k8s.io`` JobSet as the apiserver returns it (``spec`` as built, ``status`` from the JobSet
    controller)."""

    __slots__ = ()

    @property
    def replicated_jobs(self) -> list[ReplicatedJob]:
        """``spec.replicatedJobs`` (the template is ``JobSetTemplate``'s to read; this is the live object)."""
        return replicated_jobs(self._one("spec"))

    @property
    def conditions(self) -> list[Mapping[str, Any]]:
        """``status.conditions`` (``Completed``, ``Failed``, ``Suspended``...); [] when absent or not a list."""
        return _list(_in(self.raw, "status", "conditions"))

    @property
    def replicated_jobs_status(self) -> Any:
        """``status.replicatedJobsStatus`` as written (None when absent or null): a list of per-replicated-job counts
        from the JobSet controller; the TrainJob UPDATE rule refuses anything else, so it is not coerced here."""
        return _in(self.raw, "status", "replicatedJobsStatus")


class Pod(KubeObject):
    """A Pod: the reconciler reads only what the DatasetCache gate needs (labels are ``metadata``'s)."""

    __slots__ = ()

    @property
    def scheduling_gates(self) -> list[Mapping[str, Any]]:
        """``spec.schedulingGates`` (order matters: a gate is removed by its index); [] when absent."""
        return _list(_in(self.raw, "spec", "schedulingGates"))


class Lease(KubeObject):
    """A ``coordination.k8s.io/v1`` Lease: the leader election record, every field as written (None when absent),
    because election compares records as they were read and writes back what it does not change."""

    __slots__ = ()

    @property
    def holder_identity(self) -> str | None:
        return _in(self.raw, "spec", "holderIdentity")

    @property
    def lease_duration_seconds(self) -> int | None:
        return _in(self.raw, "spec", "leaseDurationSeconds")

    @property
    def acquire_time(self) -> str | None:
        return _in(self.raw, "spec", "acquireTime")

    @property
    def renew_time(self) -> str | None:
        return _in(self.raw, "spec", "renewTime")

    @property
    def lease_transitions(self) -> int | None:
        return _in(self.raw, "spec", "leaseTransitions")

    @property
    def record(self) -> tuple[Any, ...]:
        """The election record (holder, duration, acquire time, renew time, transitions): a change of it, not of the
        resourceVersion, is what tells a standby the holder is alive (client-go ``observedRecord``)."""
        return (self.holder_identity, self.lease_duration_seconds, self.acquire_time, self.renew_time,
                self.lease_transitions)


class LocalQueue(KubeObject):
    """A Kueue LocalQueue: which ClusterQueue it feeds (MultiKueue's managedBy defaulting)."""

    __slots__ = ()

    @property
    def cluster_queue(self) -> Any:
        """``spec.clusterQueue`` as written (None when absent)."""
        return _in(self.raw, "spec", "clusterQueue")


class ClusterQueue(KubeObject):
    """A Kueue ClusterQueue: the admission checks it runs (MultiKueue's is one of them) and its quotas."""

    __slots__ = ()

    @property
    def cohort_name(self) -> Any:
        """``spec.cohortName`` (v1beta2) as written (None when absent)."""
        return _in(self.raw, "spec", "cohortName")

    @property
    def resource_groups(self) -> list[Any]:
        """``spec.resourceGroups`` as written (``{coveredResources, flavors: [{name, resources: [{name, nominalQuota,
        borrowingLimit, lendingLimit}]}]}``); [] when absent or not a list."""
        return _list(_in(self.raw, "spec", "resourceGroups"))

    @property
    def admission_checks(self) -> list[Any]:
        """``spec.admissionChecksStrategy.admissionChecks`` (entries as written: ``{name, onFlavors}``); [] when absent
        or not a list."""
        strategy = _mapping(_in(self.raw, "spec", "admissionChecksStrategy"))
        return _list(strategy.get("admissionChecks"))


class AdmissionCheck(KubeObject):
    """A Kueue AdmissionCheck: which controller runs it."""

    __slots__ = ()

    @property
    def controller_name(self) -> Any:
        """``spec.controllerName`` as written (None when absent)."""
        return _in(self.raw, "spec", "controllerName")


class Workload(KubeObject):
    """A Kueue Workload (``kueue.x-k8s.io/v1beta2``): the reconciler deactivates the one of a Blocked TrainJob
    (``trainguard.controller.reconcile.quota``)."""

    __slots__ = ()

    @property
    def active(self) -> bool:
        """``spec.active``: absent or null reads as the CRD default, true; anything but ``false`` is active."""
        return _in(self.raw, "spec", "active") is not False

    @property
    def conditions(self) -> list[Mapping[str, Any]]:
        """``status.conditions`` (``QuotaReserved``, ``Admitted``, ``Evicted``, ``Finished``...); [] when absent."""
        return _list(_in(self.raw, "status", "conditions"))


class ObjectList(View):
    """A list response (``kind: ...List``): its items and its ``ListMeta``."""

    __slots__ = ()

    @property
    def items(self) -> list[Any]:
        return _list(self._one("items"))

    @property
    def continue_token(self) -> str | None:
        """``metadata.continue``: the next page's token; None on the last page (absent or empty)."""
        return _in(self.raw, "metadata", "continue") or None

    @property
    def resource_version(self) -> str:
        """``metadata.resourceVersion``: the point a watch following the list starts from ("" when absent)."""
        return str(_in(self.raw, "metadata", "resourceVersion") or "")
