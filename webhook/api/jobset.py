"""``jobset.x-k8s.io/v1alpha2`` JobSet: the object a TrainJob becomes (and the runtime template's spec).

The reconciler builds a JobSet from the effective job and reads back its status; runtimes embed a JobSet spec
as their template. Fields beyond what we read or set are kept verbatim (``extra="allow"``). The CRD schema of
the embedded spec is not generated from this class: it is copied from the upstream JobSet CRD
(``__crd_source__``), exactly as upstream Trainer embeds it, so JobSet's own defaults and CEL rules apply.
"""

from __future__ import annotations

from typing import Any, ClassVar

from trainguard.webhook.api.base import KubeModel, spec_field
from trainguard.webhook.api.constants import JOBSET_API_VERSION, JOBSET_KIND
from trainguard.webhook.api.core import JobTemplateSpec
from trainguard.webhook.api.meta import Condition, ObjectMeta


class DependsOn(KubeModel):
    """Start this replicatedJob only after another reached a status (``Ready`` or ``Complete``)."""

    name: str = spec_field("Name of the replicatedJob depended on.", required=True)
    status: str = spec_field("Ready or Complete.", required=True)


class ReplicatedJob(KubeModel):
    """A group of identical Jobs (``replicas`` copies of ``template``)."""

    name: str = spec_field("Name of the replicatedJob, unique in the JobSet.", required=True)
    group_name: str | None = spec_field("Group the replicatedJob belongs to (default: default).")
    replicas: int | None = spec_field("Number of Jobs created from the template (default 1).")
    template: JobTemplateSpec = spec_field("The Job template.", required=True)
    depends_on: list[DependsOn] | None = spec_field(
        "replicatedJobs that must reach a status first.", max_items=5)


class Network(KubeModel):
    """Pod DNS for the JobSet: a headless Service named ``subdomain`` (default: the JobSet name)."""

    enable_dns_hostnames: bool | None = spec_field(
        "Give pods stable hostnames <jobset>-<rjob>-<jobIdx>-<podIdx>.<subdomain>.", alias="enableDNSHostnames"
    )
    subdomain: str | None = spec_field("Name of the headless Service.")
    publish_not_ready_addresses: bool | None = spec_field("Publish DNS records before pods are ready.")


class JobSetSpec(KubeModel):
    """The desired state of a JobSet (runtime templates carry one)."""

    __crd_source__: ClassVar[tuple[str, str] | None] = ("jobset", "spec")

    replicated_jobs: list[ReplicatedJob] | None = spec_field("The replicatedJobs, in start order.")
    network: Network | None = spec_field("Pod DNS settings.")
    suspend: bool | None = spec_field("Suspend all Jobs of the JobSet.")
    managed_by: str | None = spec_field("Controller that reconciles the JobSet.")
    success_policy: dict[str, Any] | None = spec_field("When the JobSet counts as succeeded.")
    failure_policy: dict[str, Any] | None = spec_field("Restarts and failure rules.")
    startup_policy: dict[str, Any] | None = spec_field("Start order of replicatedJobs.")
    coordinator: dict[str, Any] | None = spec_field("Pod whose address is published as the coordinator.")
    ttl_seconds_after_finished: int | None = spec_field("Delete the JobSet this long after it finished.")
    volume_claim_policies: list[dict[str, Any]] | None = spec_field("PVCs created for the JobSet.")

    def replicated_job(self, name: str) -> ReplicatedJob | None:
        """The replicatedJob called ``name`` (``node``, ``launcher``, ``dataset-initializer``...), if any."""
        return next((rj for rj in self.replicated_jobs or [] if rj.name == name), None)


class ReplicatedJobStatus(KubeModel):
    """Job counts of one replicatedJob."""

    name: str = spec_field("replicatedJob name.", required=True)
    ready: int | None = spec_field("Jobs with all pods ready.")
    succeeded: int | None = spec_field("Jobs that succeeded.")
    failed: int | None = spec_field("Jobs that failed.")
    active: int | None = spec_field("Jobs with at least one active pod.")
    suspended: int | None = spec_field("Jobs that are suspended.")


class JobSetStatus(KubeModel):
    """Observed state of a JobSet."""

    conditions: list[Condition] | None = spec_field("Completed, Failed, Suspended, StartupPolicyCompleted...")
    restarts: int | None = spec_field("How many times the JobSet was recreated.")
    restarts_count_towards_max: int | None = spec_field("Restarts counted against maxRestarts.")
    terminal_state: str | None = spec_field("Completed or Failed once the JobSet finished.")
    replicated_jobs_status: list[ReplicatedJobStatus] | None = spec_field("Per-replicatedJob counts.")


class JobSet(KubeModel):
    """A ``jobset.x-k8s.io/v1alpha2`` JobSet."""

    api_version: str | None = spec_field("jobset.x-k8s.io/v1alpha2")
    kind: str | None = spec_field("JobSet")
    metadata: ObjectMeta | None = spec_field("Object metadata.")
    spec: JobSetSpec | None = spec_field("Desired state.")
    status: JobSetStatus | None = spec_field("Observed state.")

    API_VERSION: ClassVar[str] = JOBSET_API_VERSION
    KIND: ClassVar[str] = JOBSET_KIND
