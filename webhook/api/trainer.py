"""``trainer.kubeflow.org/v1alpha1``: TrainJob, TrainingRuntime, ClusterTrainingRuntime at the v2.3 shape.

These models are what users' manifests and the official SDK (``kubeflow`` / ``kubeflow-trainer-api`` 2.3)
produce, so field names, defaults, limits and CEL rules follow upstream v2.3 exactly. The CRDs themselves are
upstream's (``hack/gen_crds.py`` copies them from the pinned module, plus the additions listed in
``hack/crdgen/upstream.py``); the CRD facts on each field (:func:`trainguard.webhook.api.base.spec_field`) are what the door
check (``trainguard.webhook.policy.well_formed``) enforces before the schema runs, and
``tests/unit/api/test_models_match_crds.py`` holds every one of them equal to the CRD's.

One kind of fact is left to the schema on purpose: the ``minLength: 1`` of the names in a runtimePatch
(replicatedJob and container names). The mutating webhook runs before the schema, and an empty name harms no
policy code, so the schema answers it, as upstream: HTTP 422 in the apiserver's words.

Reading code must not assume a schema default was applied (an object may come from a file, not the API
server): use the ``effective_*`` helpers, which fall back to the documented defaults in ``constants``.
"""

from __future__ import annotations

from typing import Any, ClassVar

from pydantic import ConfigDict

from trainguard.webhook.api import constants as c
from trainguard.webhook.api.base import IMMUTABLE, KubeModel, rule, spec_field
from trainguard.webhook.api.core import (
    Affinity,
    EnvVar,
    LocalObjectReference,
    PodSchedulingGate,
    PodSecurityContext,
    ResourceRequirements,
    SecurityContext,
    Toleration,
    Volume,
    VolumeMount,
)
from trainguard.webhook.api.jobset import JobSetSpec
from trainguard.webhook.api.meta import Condition, ObjectMeta, TemplateMeta

# Object-level rules every trainer.kubeflow.org object of kind TrainJob carries (upstream's XValidation rules in
# ``trainjob_types.go``). Names become
# JobSet, Service and pod-hostname prefixes, hence the DNS-1035 label format.
NAME_RULES = [
    rule("self.metadata.name.matches('^[a-z]([-a-z0-9]*[a-z0-9])?$')",
         "metadata.name must match RFC 1035 DNS label format"),
    rule("size(self.metadata.name) <= 63", "metadata.name must be no more than 63 characters"),
]

_ENV_LIST = dict(list_map_keys=["name"], max_items=c.MAX_ENV)


class EmbeddedMeta(TemplateMeta):
    """The metadata of a template in a runtime or a runtimePatch: upstream's embedded ObjectMeta, whose CRD keeps
    these five fields. Only labels and annotations reach the JobSet's own metadata; a replicatedJob's or a pod
    template's name, namespace and finalizers are merged into the template as sent, as upstream does."""

    name: str | None = spec_field("Name of the object built from this template (usually left to the controller).")
    namespace: str | None = spec_field("Namespace of the object built from this template.")
    finalizers: list[str] | None = spec_field("Finalizers of the objects built from this template.")


# ============================================================================================== TrainJob spec
class RuntimeRef(KubeModel):
    """Which runtime a TrainJob runs on."""

    name: str = spec_field(
        "Name of the TrainingRuntime (in the TrainJob's namespace) or ClusterTrainingRuntime to run on.",
        required=True, min_length=1, max_length=253,
    )
    api_group: str | None = spec_field(
        "API group of the runtime. Defaults to trainer.kubeflow.org.",
        crd_default=c.DEFAULT_RUNTIME_REF_API_GROUP, max_length=253,
    )
    kind: str | None = spec_field(
        "Kind of the runtime: ClusterTrainingRuntime (default) or TrainingRuntime.",
        crd_default=c.DEFAULT_RUNTIME_REF_KIND, max_length=253,
    )

_STORAGE_URI_RULE = rule(
    "self == '' || self.matches('^[A-Za-z][A-Za-z0-9+.-]*://.+$')",
    "storageUri may be empty, or it must be a valid URI (scheme://...)",
)


class DatasetInitializer(KubeModel):
    """Where the dataset initializer downloads the training data from."""

    storage_uri: str | None = spec_field(
        "URI of the dataset, e.g. hf://tatsu-lab/alpaca, s3://bucket/path, cache://schema/table. "
        "Passed to the dataset-initializer container as STORAGE_URI.",
        max_length=c.MAX_STORAGE_URI_LENGTH, rules=[_STORAGE_URI_RULE],
    )
    env: list[EnvVar] | None = spec_field(
        "Extra environment variables for the dataset-initializer container.", **_ENV_LIST
    )
    secret_ref: LocalObjectReference | None = spec_field(
        "Secret in the TrainJob's namespace whose keys become env vars of the initializer (e.g. a token)."
    )


class ModelInitializer(KubeModel):
    """Where the model initializer downloads the pre-trained model from."""

    storage_uri: str | None = spec_field(
        "URI of the model, e.g. hf://meta-llama/Llama-3.2-1B. Passed to the model-initializer as STORAGE_URI.",
        max_length=c.MAX_STORAGE_URI_LENGTH, rules=[_STORAGE_URI_RULE],
    )
    env: list[EnvVar] | None = spec_field(
        "Extra environment variables for the model-initializer container.", **_ENV_LIST
    )
    secret_ref: LocalObjectReference | None = spec_field(
        "Secret in the TrainJob's namespace whose keys become env vars of the initializer (e.g. a token)."
    )


class Initializer(KubeModel):
    """Steps that run before training: fetch the dataset and/or the model into the shared volume."""

    dataset: DatasetInitializer | None = spec_field(
        "Dataset download; needs a replicatedJob named dataset-initializer in the runtime."
    )
    model: ModelInitializer | None = spec_field(
        "Model download; needs a replicatedJob named model-initializer in the runtime."
    )


class Trainer(KubeModel):
    """Overrides for the training step (the replicatedJob whose ancestor-step label is ``trainer``)."""

    image: str | None = spec_field(
        "Container image of the trainer; replaces the runtime's image of the node container.",
        max_length=c.MAX_IMAGE_LENGTH,
    )
    command: list[str] | None = spec_field(
        "Entrypoint of the trainer container; replaces the runtime's command as a whole.",
        list_type="atomic", max_items=c.MAX_COMMAND_ITEMS, items={"maxLength": c.MAX_COMMAND_ITEM_LENGTH},
    )
    args: list[str] | None = spec_field(
        "Arguments of the trainer container; replace the runtime's args as a whole.",
        list_type="atomic", max_items=c.MAX_COMMAND_ITEMS, items={"maxLength": c.MAX_COMMAND_ITEM_LENGTH},
    )
    env: list[EnvVar] | None = spec_field(
        "Environment variables added to (or replacing, by name) the trainer container's env.", **_ENV_LIST
    )
    num_nodes: int | None = spec_field(
        "Number of training nodes (pods). Overrides the runtime's mlPolicy.numNodes."
    )
    resources_per_node: ResourceRequirements | None = spec_field(
        "Compute resources of each training node's trainer container, merged over the runtime's resources."
    )
    num_proc_per_node: int | None = spec_field(
        "Processes per node (e.g. GPUs per node for torchrun, slots per host for MPI). Overrides the runtime."
    )


class ContainerPatch(KubeModel):
    """Additions to one container of a runtime's pod template (matched by name)."""

    name: str = spec_field("Name of the container (or init container) to patch.", required=True, max_length=253)
    env: list[EnvVar] | None = spec_field("Env vars to add or replace by name.", **_ENV_LIST)
    # The CRD's list key is the mount's name (unique in the patch); the merge into the runtime's container is by
    # mountPath, core/v1's patchMergeKey, as upstream's strategic merge does.
    volume_mounts: list[VolumeMount] | None = spec_field(
        "Volume mounts to add or replace by mountPath.", list_map_keys=["name"], max_items=128
    )
    security_context: SecurityContext | None = spec_field("Security context of the container.")


class PodSpecPatch(KubeModel):
    """Pod-spec fields a runtime patch may set. Scheduling fields stay mutable (while suspended), others not."""

    service_account_name: str | None = spec_field(
        "ServiceAccount the pods run as. Immutable.", max_length=253, rules=[IMMUTABLE]
    )
    node_selector: dict[str, str] | None = spec_field("Node labels added to the pods' nodeSelector.")
    affinity: Affinity | None = spec_field("Affinity merged into the pods' affinity.")
    tolerations: list[Toleration] | None = spec_field(
        "Tolerations of the pods; replace the runtime's list.", list_type="atomic", max_items=128
    )
    volumes: list[Volume] | None = spec_field(
        "Volumes added or replaced by name. Immutable.", list_map_keys=["name"], max_items=128, rules=[IMMUTABLE]
    )
    init_containers: list[ContainerPatch] | None = spec_field(
        "Patches of init containers, by name. Immutable.", list_map_keys=["name"], max_items=64,
        rules=[IMMUTABLE],
    )
    containers: list[ContainerPatch] | None = spec_field(
        "Patches of containers, by name. Immutable.", list_map_keys=["name"], max_items=64, rules=[IMMUTABLE]
    )
    image_pull_secrets: list[LocalObjectReference] | None = spec_field(
        "Image pull secrets added to the pods. Immutable.", list_map_keys=["name"], max_items=64, rules=[IMMUTABLE]
    )
    scheduling_gates: list[PodSchedulingGate] | None = spec_field(
        "Scheduling gates added to the pods.", list_map_keys=["name"], max_items=16
    )
    security_context: PodSecurityContext | None = spec_field(
        "Pod-level security context. Immutable.", rules=[IMMUTABLE]
    )
    termination_grace_period_seconds: int | None = spec_field(
        "Grace period for pod shutdown, in seconds. Immutable.", minimum=0, fmt="int64", rules=[IMMUTABLE]
    )


class PodTemplatePatch(KubeModel):
    """Patch of a Job's pod template."""

    metadata: EmbeddedMeta | None = spec_field("Labels and annotations added to the pods.")
    spec: PodSpecPatch | None = spec_field("Pod spec fields to patch.")


class JobSpecPatch(KubeModel):
    """Patch of a Job spec: only its pod template."""

    template: PodTemplatePatch | None = spec_field("Patch of the Job's pod template.")


class JobTemplatePatch(KubeModel):
    """Patch of one replicatedJob's Job template."""

    metadata: EmbeddedMeta | None = spec_field("Labels and annotations added to the Jobs.")
    spec: JobSpecPatch | None = spec_field("Job spec fields to patch.")


class ReplicatedJobPatch(KubeModel):
    """Patch of one replicatedJob of the runtime, matched by name."""

    name: str = spec_field("Name of the runtime replicatedJob to patch.", required=True, max_length=253)
    template: JobTemplatePatch | None = spec_field("Patch of its Job template.")


class JobSetSpecPatch(KubeModel):
    """Patch of the runtime's JobSet spec."""

    replicated_jobs: list[ReplicatedJobPatch] | None = spec_field(
        "Patches of replicatedJobs, by name.", list_map_keys=["name"], max_items=100
    )


class JobSetTemplatePatch(KubeModel):
    """Patch of the runtime's JobSet template."""

    metadata: EmbeddedMeta | None = spec_field("Labels and annotations added to the JobSet.")
    spec: JobSetSpecPatch | None = spec_field("JobSet spec fields to patch.")


class TrainingRuntimeSpecPatch(KubeModel):
    """Patch of a runtime spec; only the template can be patched."""

    template: JobSetTemplatePatch | None = spec_field("Patch of the runtime's JobSet template.")


class RuntimePatch(KubeModel):
    """Changes one manager (a user, Kueue, a platform controller) applies to the runtime for this TrainJob.

    Patches apply in list order as strategic merge patches; a later patch wins on conflicts.
    """

    manager: str = spec_field(
        "Owner of this patch as a domain-prefixed path (e.g. kueue.x-k8s.io/manager). Unique in the list.",
        required=True, min_length=1, max_length=253, rules=[IMMUTABLE],
    )
    time: str | None = spec_field(
        "When the patch was last changed; stamped by the mutating webhook.", fmt="date-time"
    )
    training_runtime_spec: TrainingRuntimeSpecPatch | None = spec_field(
        "The runtime spec patch (pod template labels, annotations and pod spec fields)."
    )


class TrainJobSpec(KubeModel):
    """The desired TrainJob: a runtime to run on plus what this job changes about it."""

    runtime_ref: RuntimeRef = spec_field(
        "Reference to the runtime this TrainJob runs on. Immutable.", required=True, rules=[IMMUTABLE]
    )
    initializer: Initializer | None = spec_field(
        "Dataset and model download before training. Immutable.", rules=[IMMUTABLE]
    )
    trainer: Trainer | None = spec_field(
        "Overrides of the training step: image, command, env, nodes, resources. Immutable.", rules=[IMMUTABLE]
    )
    runtime_patches: list[RuntimePatch] | None = spec_field(
        "Per-manager patches of the runtime (pod labels, scheduling fields, volumes...), applied in order.",
        list_map_keys=["manager"], max_items=c.MAX_RUNTIME_PATCHES,
    )
    suspend: bool | None = spec_field(
        "Suspend the TrainJob: its pods are deleted and it waits (e.g. for a Kueue admission). "
        "Defaults to false.", crd_default=False,
    )
    active_deadline_seconds: int | None = spec_field(
        "Seconds the TrainJob may run (counted from its last start or resume) before it is failed with reason "
        "DeadlineExceeded. Must be at least 1; omitted means no deadline. Immutable.",
        minimum=1, fmt="int64", rules=[IMMUTABLE],
    )
    managed_by: str | None = spec_field(
        "Controller that reconciles this TrainJob: trainer.kubeflow.org/trainjob-controller (default) or "
        "kueue.x-k8s.io/multikueue (MultiKueue dispatches it to a worker cluster). Immutable.",
        crd_default=c.DEFAULT_MANAGED_BY, max_length=253,
        rules=[
            rule(f"self in {list(c.ALLOWED_MANAGED_BY)!r}".replace('"', "'"),
                 "ManagedBy must be trainer.kubeflow.org/trainjob-controller or kueue.x-k8s.io/multikueue if set"),
            IMMUTABLE,
        ],
    )

# ============================================================================================ TrainJob status
class JobStatus(KubeModel):
    """Job counts of one replicatedJob of the TrainJob's JobSet."""

    name: str = spec_field("Name of the replicatedJob.", required=True, min_length=1, max_length=253)
    ready: int = spec_field("Jobs whose pods are all ready.", required=True, minimum=0)
    succeeded: int = spec_field("Jobs that completed successfully.", required=True, minimum=0)
    failed: int = spec_field("Jobs that failed.", required=True, minimum=0)
    active: int = spec_field("Jobs with at least one running or pending pod.", required=True, minimum=0)
    suspended: int = spec_field("Jobs that are suspended.", required=True, minimum=0)


class Metric(KubeModel):
    """A training metric reported by the trainer (e.g. loss)."""

    name: str = spec_field("Metric name.", required=True, min_length=1, max_length=64)
    value: str = spec_field("Metric value as text.", required=True, min_length=1, max_length=64)


class TrainerStatus(KubeModel):
    """Progress reported by the training code (alpha, upstream feature gate TrainJobStatus)."""

    model_config = ConfigDict(json_schema_extra={"x-kubernetes-validations": [
        rule("has(self.lastUpdatedTime)", "lastUpdatedTime is required when trainerStatus is present"),
    ]})

    progress_percentage: int | None = spec_field("Training progress, 0 to 100.", minimum=0, maximum=100)
    estimated_remaining_seconds: int | None = spec_field("Estimated seconds until training ends.", minimum=0)
    metrics: list[Metric] | None = spec_field("Latest metrics.", list_type="atomic", max_items=256)
    last_updated_time: str | None = spec_field("When this status was last reported.", fmt="date-time")


class TrainJobStatus(KubeModel):
    """Observed state of a TrainJob."""

    model_config = ConfigDict(json_schema_extra={"minProperties": 1})

    conditions: list[Condition] | None = spec_field(
        "Suspended, Complete or Failed, with reason and message.", list_map_keys=["type"],
        max_items=c.MAX_CONDITIONS,
    )
    jobs_status: list[JobStatus] | None = spec_field(
        "Job counts per replicatedJob.", list_map_keys=["name"], max_items=c.MAX_JOBS_STATUS
    )
    trainer_status: TrainerStatus | None = spec_field("Progress reported by the training code.")

class TrainJob(KubeModel):
    """A training job: a runtime reference plus job-specific overrides (trainer.kubeflow.org/v1alpha1)."""

    __crd__: ClassVar[dict[str, Any]] = {
        "group": c.TRAINER_GROUP, "version": c.TRAINER_VERSION, "kind": c.TRAINJOB_KIND,
        "plural": "trainjobs", "singular": "trainjob", "scope": "Namespaced",
        "status": True, "root_rules": NAME_RULES,
    }

    api_version: str | None = spec_field("trainer.kubeflow.org/v1alpha1")
    kind: str | None = spec_field("TrainJob")
    metadata: ObjectMeta | None = spec_field("Object metadata.")
    spec: TrainJobSpec | None = spec_field("Desired state: the runtime and this job's overrides.")
    status: TrainJobStatus | None = spec_field("Observed state, written by the controller.")


# =============================================================================================== runtimes
class TorchEnvInjectionTarget(KubeModel):
    """Containers besides ``node`` that also get the PET_* (torchrun) env vars."""

    job_name: str = spec_field(
        "Name of the replicatedJob whose containers are targeted.", required=True, min_length=1, max_length=253
    )
    container_names: list[str] = spec_field(
        "Containers (or init containers) of that replicatedJob that get the PET_* env vars.",
        required=True, list_type="set", min_items=1, max_items=8, items={"maxLength": 63},
        rules=[rule("!self.exists(c, c == 'node')",
                    "containerNames must not include the main node container because PET_* envs are always "
                    "injected into it")],
    )


class TorchEnvInjection(KubeModel):
    """Extra containers that receive the torchrun environment."""

    targets: list[TorchEnvInjectionTarget] | None = spec_field(
        "Targets, one per replicatedJob.", list_map_keys=["jobName"], max_items=16
    )


class TorchMLPolicySource(KubeModel):
    """PyTorch distributed (torchrun): PET_NNODES, PET_NPROC_PER_NODE, PET_NODE_RANK, PET_MASTER_ADDR/PORT."""

    env_injection: TorchEnvInjection | None = spec_field(
        "Also inject the PET_* env vars into these sidecar or init containers."
    )


class MPIMLPolicySource(KubeModel):
    """MPI (OpenMPI): a launcher plus nodes, an SSH key Secret and a hostfile ConfigMap."""

    num_proc_per_node: int | None = spec_field(
        "MPI slots per node. Defaults to 1. Upstream v2.3 sets no lower bound here (unlike fluxPolicy's).",
        crd_default=c.DEFAULT_MPI_NUM_PROC_PER_NODE,
    )
    mpi_implementation: str | None = spec_field(
        "MPI implementation; only OpenMPI is supported.", crd_default=c.DEFAULT_MPI_IMPLEMENTATION,
        enum=["OpenMPI", ""],
    )
    ssh_auth_mount_path: str | None = spec_field(
        "Where the SSH key Secret is mounted in launcher and nodes. Defaults to /root/.ssh.",
        crd_default=c.DEFAULT_MPI_SSH_AUTH_MOUNT_PATH, max_length=4096,
    )
    run_launcher_as_node: bool | None = spec_field(
        "Let the launcher also run a training process (it then counts as a node). Defaults to false.",
        crd_default=False,
    )


class JAXMLPolicySource(KubeModel):
    """JAX distributed: coordinator address and process ids as env vars. No settings."""


class XGBoostMLPolicySource(KubeModel):
    """XGBoost distributed (Rabit tracker env vars). No settings."""


class FluxMLPolicySource(KubeModel):
    """Flux Framework: an HPC scheduler started inside the job's pods."""

    num_proc_per_node: int | None = spec_field(
        "Processes (tasks) per node. Defaults to 1.", crd_default=c.DEFAULT_FLUX_NUM_PROC_PER_NODE,
        rules=[rule("self >= 1", "NumProcPerNode in fluxPolicy must be >= 1")],
    )


class MLPolicy(KubeModel):
    """How the training framework is set up: node count plus at most one framework."""

    model_config = ConfigDict(json_schema_extra={"x-kubernetes-validations": [
        # Upstream's expression, to the byte (its missing space included): the CRD is upstream's.
        rule("[has(self.torch), has(self.mpi), has(self.jax), has(self.xgboost),has(self.flux)]"
             ".filter(x, x).size() <= 1", "Only one of the policy can be configured"),
    ]})

    num_nodes: int | None = spec_field(
        "Number of training nodes when the TrainJob does not set trainer.numNodes. Defaults to 1."
    )
    torch: TorchMLPolicySource | None = spec_field("PyTorch distributed (torchrun) settings.")
    mpi: MPIMLPolicySource | None = spec_field("MPI settings (e.g. DeepSpeed over OpenMPI).")
    jax: JAXMLPolicySource | None = spec_field("JAX distributed.")
    xgboost: XGBoostMLPolicySource | None = spec_field("XGBoost distributed.")
    flux: FluxMLPolicySource | None = spec_field("Flux Framework.")

class CoschedulingPodGroupPolicySource(KubeModel):
    """Gang scheduling with the scheduler-plugins coscheduling plugin (a PodGroup per TrainJob)."""

    schedule_timeout_seconds: int | None = spec_field(
        "Seconds the gang may wait to be scheduled as a whole. Defaults to 60.",
        crd_default=c.DEFAULT_COSCHEDULING_TIMEOUT_SECONDS,
    )


class VolcanoNetworkTopology(KubeModel):
    """Volcano network-topology-aware placement of the gang."""

    mode: str | None = spec_field(
        "hard: the gang must fit under the allowed tier; soft: best effort. Defaults to hard.",
        crd_default=c.DEFAULT_VOLCANO_TOPOLOGY_MODE, enum=["hard", "soft"],
    )
    highest_tier_allowed: int | None = spec_field(
        "Highest network tier the gang may span. Defaults to 1.",
        crd_default=c.DEFAULT_VOLCANO_HIGHEST_TIER_ALLOWED,
    )


class VolcanoPodGroupPolicySource(KubeModel):
    """Gang scheduling with Volcano (a scheduling.volcano.sh PodGroup per TrainJob)."""

    network_topology: VolcanoNetworkTopology | None = spec_field("Network-topology-aware placement.")


class PodGroupPolicy(KubeModel):
    """Gang scheduling: exactly one scheduler integration."""

    coscheduling: CoschedulingPodGroupPolicySource | None = spec_field("scheduler-plugins coscheduling.")
    volcano: VolcanoPodGroupPolicySource | None = spec_field("Volcano.")


class JobSetTemplateSpec(KubeModel):
    """The JobSet a TrainJob of this runtime becomes, before the TrainJob's overrides."""

    model_config = ConfigDict(json_schema_extra={"minProperties": 1})

    metadata: EmbeddedMeta | None = spec_field("Labels and annotations of the JobSet.")
    spec: JobSetSpec | None = spec_field("The JobSet spec (jobset.x-k8s.io/v1alpha2).")


class TrainingRuntimeSpec(KubeModel):
    """A reusable blueprint for TrainJobs: framework policy, gang scheduling and a JobSet template."""

    model_config = ConfigDict(json_schema_extra={"minProperties": 1})

    ml_policy: MLPolicy | None = spec_field(
        "How the training framework is set up: the node count plus at most one of torch, mpi, jax, xgboost or "
        "flux (none means plain ML: no framework env vars)."
    )
    pod_group_policy: PodGroupPolicy | None = spec_field(
        "Gang scheduling: a PodGroup per TrainJob so all its pods are scheduled together (coscheduling or Volcano)."
    )
    template: JobSetTemplateSpec | None = spec_field(
        "The JobSet each TrainJob of this runtime becomes before its own overrides: replicatedJobs named node, "
        "launcher, dataset-initializer, model-initializer, marked with trainer.kubeflow.org/trainjob-ancestor-step."
    )


class TrainingRuntime(KubeModel):
    """A namespaced runtime, usable by TrainJobs in its namespace."""

    __crd__: ClassVar[dict[str, Any]] = {
        "group": c.TRAINER_GROUP, "version": c.TRAINER_VERSION, "kind": c.TRAINING_RUNTIME_KIND,
        "plural": "trainingruntimes", "singular": "trainingruntime", "scope": "Namespaced",
        "status": False, "root_rules": [],
    }

    api_version: str | None = spec_field("trainer.kubeflow.org/v1alpha1")
    kind: str | None = spec_field("TrainingRuntime")
    metadata: ObjectMeta | None = spec_field("Object metadata.")
    spec: TrainingRuntimeSpec | None = spec_field("The runtime blueprint.")


class ClusterTrainingRuntime(KubeModel):
    """A cluster-scoped runtime, usable by TrainJobs in every namespace."""

    __crd__: ClassVar[dict[str, Any]] = {
        "group": c.TRAINER_GROUP, "version": c.TRAINER_VERSION, "kind": c.CLUSTER_TRAINING_RUNTIME_KIND,
        "plural": "clustertrainingruntimes", "singular": "clustertrainingruntime", "scope": "Cluster",
        "status": False, "root_rules": [],
    }

    api_version: str | None = spec_field("trainer.kubeflow.org/v1alpha1")
    kind: str | None = spec_field("ClusterTrainingRuntime")
    metadata: ObjectMeta | None = spec_field("Object metadata.")
    spec: TrainingRuntimeSpec | None = spec_field("The runtime blueprint.")
