"""Embedded Kubernetes ``core/v1`` and ``batch/v1`` types: the pod and job templates runtimes carry.

We type the fields trainguard reads or writes (names, images, env, resources, ports, mounts, volumes,
scheduling fields) and keep everything else through ``extra="allow"``, so a pod field added in a newer
Kubernetes passes through untouched. The CRD schemas for these types do not come from these classes: each
names its OpenAPI definition (``__openapi__``) and the generator copies the real API server's schema.

List keys (how Kubernetes merges and identifies list items; upserts must use the same keys):

* ``env``: by ``name``;  ``volumes``, ``containers``, ``initContainers``: by ``name``
* ``ports``: by ``containerPort`` (+ ``protocol``);  ``volumeMounts``: by ``mountPath``
* ``tolerations``: atomic (replaced as a whole)
"""

from __future__ import annotations

from typing import Any

from trainguard.webhook.api.base import IntOrString, KubeModel, QuantityValue, spec_field
from trainguard.webhook.api.meta import ObjectMeta


class ObjectFieldSelector(KubeModel):
    """Downward-API selector of a pod field (``metadata.annotations['...']``)."""

    __openapi__ = "io.k8s.api.core.v1.ObjectFieldSelector"

    field_path: str = spec_field("Path of the field to select.", required=True)
    api_version: str | None = spec_field("Version of the schema the path is written in.")


class EnvVarSource(KubeModel):
    """Where an env var's value comes from when it is not a literal."""

    __openapi__ = "io.k8s.api.core.v1.EnvVarSource"

    field_ref: ObjectFieldSelector | None = spec_field("A field of the pod.")
    config_map_key_ref: dict[str, Any] | None = spec_field("A key of a ConfigMap.")
    secret_key_ref: dict[str, Any] | None = spec_field("A key of a Secret.")
    resource_field_ref: dict[str, Any] | None = spec_field("A resource of the container.")


class EnvVar(KubeModel):
    """A container environment variable (list key: ``name``)."""

    __openapi__ = "io.k8s.api.core.v1.EnvVar"

    name: str = spec_field("Variable name.", required=True)
    value: str | None = spec_field("Literal value.")
    value_from: EnvVarSource | None = spec_field("Source of the value when not literal.")


class LocalObjectReference(KubeModel):
    """Reference to an object in the same namespace, by name."""

    __openapi__ = "io.k8s.api.core.v1.LocalObjectReference"

    name: str | None = spec_field("Name of the referent.")


class EnvFromSource(KubeModel):
    """Import all keys of a ConfigMap or Secret as env vars."""

    __openapi__ = "io.k8s.api.core.v1.EnvFromSource"

    prefix: str | None = spec_field("Prefix added to each key.")
    config_map_ref: dict[str, Any] | None = spec_field("The ConfigMap.")
    secret_ref: dict[str, Any] | None = spec_field("The Secret.")


class ResourceRequirements(KubeModel):
    """Compute resources of a container: ``requests`` and ``limits`` (quantities as on the wire)."""

    __openapi__ = "io.k8s.api.core.v1.ResourceRequirements"

    requests: dict[str, QuantityValue] | None = spec_field("Minimum resources the scheduler reserves.")
    limits: dict[str, QuantityValue] | None = spec_field("Maximum resources the container may use.")
    claims: list[dict[str, Any]] | None = spec_field("Dynamic resource claims used by the container.")

class ContainerPort(KubeModel):
    """A port a container exposes (list key: ``containerPort`` + ``protocol``)."""

    __openapi__ = "io.k8s.api.core.v1.ContainerPort"

    container_port: int = spec_field("Port number on the pod IP.", required=True)
    name: str | None = spec_field("IANA_SVC_NAME name of the port.")
    protocol: str | None = spec_field("TCP (default), UDP or SCTP.")
    host_port: int | None = spec_field("Port on the host.")


class VolumeMount(KubeModel):
    """A volume mounted into a container (list key: ``mountPath``)."""

    __openapi__ = "io.k8s.api.core.v1.VolumeMount"

    name: str = spec_field("Name of the pod volume.", required=True)
    mount_path: str = spec_field("Path inside the container.", required=True)
    read_only: bool | None = spec_field("Mount read-only.")
    sub_path: str | None = spec_field("Sub-path of the volume to mount.")


class Container(KubeModel):
    """A container of a pod template (list key: ``name``)."""

    __openapi__ = "io.k8s.api.core.v1.Container"

    name: str = spec_field("Container name, unique in the pod.", required=True)
    image: str | None = spec_field("Container image.")
    command: list[str] | None = spec_field("Entrypoint (replaces the image's ENTRYPOINT).")
    args: list[str] | None = spec_field("Arguments (replace the image's CMD).")
    env: list[EnvVar] | None = spec_field("Environment variables.")
    env_from: list[EnvFromSource] | None = spec_field("Env vars imported from ConfigMaps/Secrets.")
    resources: ResourceRequirements | None = spec_field("Compute resources.")
    ports: list[ContainerPort] | None = spec_field("Exposed ports.")
    volume_mounts: list[VolumeMount] | None = spec_field("Mounted volumes.")
    security_context: dict[str, Any] | None = spec_field("Container security options.")
    restart_policy: str | None = spec_field("``Always`` marks an init container as a sidecar.")


class Volume(KubeModel):
    """A pod volume (list key: ``name``); the source (PVC, hostPath, ...) is kept as sent."""

    __openapi__ = "io.k8s.api.core.v1.Volume"

    name: str = spec_field("Volume name, unique in the pod.", required=True)
    persistent_volume_claim: dict[str, Any] | None = spec_field("A PersistentVolumeClaim source.")
    host_path: dict[str, Any] | None = spec_field("A hostPath source.")
    empty_dir: dict[str, Any] | None = spec_field("An emptyDir source.")
    config_map: dict[str, Any] | None = spec_field("A ConfigMap source.")
    secret: dict[str, Any] | None = spec_field("A Secret source.")


class Toleration(KubeModel):
    """A taint toleration (the list is atomic: replaced as a whole)."""

    __openapi__ = "io.k8s.api.core.v1.Toleration"

    key: str | None = spec_field("Taint key; empty with Exists tolerates everything.")
    operator: str | None = spec_field("Exists or Equal (default).")
    value: str | None = spec_field("Taint value for Equal.")
    effect: str | None = spec_field("NoSchedule, PreferNoSchedule or NoExecute; empty matches all.")
    toleration_seconds: int | None = spec_field("How long a NoExecute taint is tolerated.")


class PodSchedulingGate(KubeModel):
    """A gate that keeps a pod unschedulable until removed (list key: ``name``)."""

    __openapi__ = "io.k8s.api.core.v1.PodSchedulingGate"

    name: str = spec_field("Gate name.", required=True)


class Affinity(KubeModel):
    """Node and pod (anti-)affinity; kept structurally as sent (we only add terms, never rewrite them)."""

    __openapi__ = "io.k8s.api.core.v1.Affinity"

    node_affinity: dict[str, Any] | None = spec_field("Node affinity.")
    pod_affinity: dict[str, Any] | None = spec_field("Pod affinity.")
    pod_anti_affinity: dict[str, Any] | None = spec_field("Pod anti-affinity.")


class PodSecurityContext(KubeModel):
    """Pod-level security options (opaque to trainguard)."""

    __openapi__ = "io.k8s.api.core.v1.PodSecurityContext"


class SecurityContext(KubeModel):
    """Container-level security options (opaque to trainguard)."""

    __openapi__ = "io.k8s.api.core.v1.SecurityContext"


class PodSpec(KubeModel):
    """A pod's spec; the scheduling-related fields are typed because policies set them."""

    __openapi__ = "io.k8s.api.core.v1.PodSpec"

    containers: list[Container] | None = spec_field("Main containers.")
    init_containers: list[Container] | None = spec_field("Init (and sidecar) containers.")
    volumes: list[Volume] | None = spec_field("Pod volumes.")
    node_selector: dict[str, str] | None = spec_field("Node labels the pod must run on.")
    affinity: Affinity | None = spec_field("Scheduling constraints.")
    tolerations: list[Toleration] | None = spec_field("Taints the pod tolerates.")
    scheduling_gates: list[PodSchedulingGate] | None = spec_field("Gates blocking scheduling.")
    scheduler_name: str | None = spec_field("Scheduler that places the pod.")
    service_account_name: str | None = spec_field("ServiceAccount the pod runs as.")
    priority_class_name: str | None = spec_field("PriorityClass of the pod.")
    restart_policy: str | None = spec_field("Always, OnFailure or Never.")
    image_pull_secrets: list[LocalObjectReference] | None = spec_field("Registry credentials.")
    security_context: PodSecurityContext | None = spec_field("Pod security options.")
    termination_grace_period_seconds: int | None = spec_field("Grace period for shutdown.")
    subdomain: str | None = spec_field("DNS subdomain of the pod.")
    hostname: str | None = spec_field("Hostname of the pod.")

class PodTemplateSpec(KubeModel):
    """Pod metadata plus spec, as embedded in a Job template."""

    __openapi__ = "io.k8s.api.core.v1.PodTemplateSpec"

    metadata: ObjectMeta | None = spec_field("Pod metadata (labels, annotations).")
    spec: PodSpec | None = spec_field("Pod spec.")


class JobSpec(KubeModel):
    """A ``batch/v1`` Job spec (the fields the runtime build sets or reads)."""

    __openapi__ = "io.k8s.api.batch.v1.JobSpec"

    parallelism: int | None = spec_field("Pods running at once.")
    completions: int | None = spec_field("Successful pods needed.")
    completion_mode: str | None = spec_field("NonIndexed or Indexed.")
    backoff_limit: int | None = spec_field("Retries before the Job fails.")
    active_deadline_seconds: int | None = spec_field("Job deadline.")
    template: PodTemplateSpec = spec_field("The pod template.", required=True)


class JobTemplateSpec(KubeModel):
    """A Job's metadata plus spec, as embedded in a JobSet replicatedJob."""

    __openapi__ = "io.k8s.api.batch.v1.JobTemplateSpec"

    metadata: ObjectMeta | None = spec_field("Job metadata.")
    spec: JobSpec | None = spec_field("Job spec.")


__all__ = [
    "Affinity", "Container", "ContainerPort", "EnvFromSource", "EnvVar", "EnvVarSource", "IntOrString",
    "JobSpec", "JobTemplateSpec", "LocalObjectReference", "ObjectFieldSelector", "PodSchedulingGate",
    "PodSecurityContext", "PodSpec", "PodTemplateSpec", "ResourceRequirements", "SecurityContext",
    "Toleration", "Volume", "VolumeMount",
]
