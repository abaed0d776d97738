"""``trainguard.io/v1alpha1``: TrainJobPolicy (cluster-scoped) and DatasetCache (namespaced).

TrainJobPolicy is how a platform team states, once, what every matching TrainJob gets (scheduling defaults,
GPU-topology placement, default labels and deadlines) and what it may not do (limits). DatasetCache asks the
node-local cache agent to keep a dataset's shards resident on a set of nodes.

Order of application when several TrainJobPolicies match one TrainJob (documented on ``spec.priority`` too):
policies are sorted by ``spec.priority`` descending, then ``metadata.name`` ascending - a total order that does
not depend on the order the API server lists them in. Then

* defaults and scheduling/topology settings: the first policy in that order that sets a value wins; later
  policies only fill what is still unset (a value the TrainJob itself sets is never overwritten). A scheduling
  value (Kueue queue and priority, KAI queue, schedulerName) is also the only one a TrainJob may run with, unless
  that same policy lists alternatives (``allowed*``): another is denied (Enforce) or warned (Audit);
* limits: every matching policy's limits apply (the strictest wins), so adding a policy can only tighten;
* mode: each policy's violations are reported under its own mode (Enforce denies, Audit warns).
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from pydantic import ConfigDict

from trainguard.webhook.api import constants as c
from trainguard.webhook.api.base import KubeModel, QuantityValue, rule, spec_field
from trainguard.webhook.api.core import Toleration
from trainguard.webhook.api.meta import Condition, LabelSelector, ObjectMeta

# ================================================================================================ policy
class RuntimeSelector(KubeModel):
    """Which runtimes (referenced by ``spec.runtimeRef``) a policy applies to. Empty matches every runtime."""

    names: list[str] | None = spec_field(
        "Runtime names; the TrainJob's runtimeRef.name must be one of them.",
        list_type="set", max_items=64, items={"maxLength": 253},
    )
    kinds: list[Literal["TrainingRuntime", "ClusterTrainingRuntime"]] | None = spec_field(
        "Runtime kinds; the TrainJob's runtimeRef.kind must be one of them.",
        list_type="set", max_items=2, items={"enum": ["TrainingRuntime", "ClusterTrainingRuntime"]},
    )
    label_selector: LabelSelector | None = spec_field(
        "Labels of the runtime object, e.g. trainer.kubeflow.org/framework: torch."
    )


class PolicySelector(KubeModel):
    """Which TrainJobs a policy applies to: all given selectors must match. Empty matches every TrainJob."""

    namespace_selector: LabelSelector | None = spec_field("Labels of the TrainJob's namespace.")
    runtime_selector: RuntimeSelector | None = spec_field("The runtime the TrainJob references.")
    train_job_selector: LabelSelector | None = spec_field("Labels of the TrainJob itself.")


# Scheduling values are pinned: ``trainguard.webhook.policy.pinning`` checks every place they take effect.
PINNED = ("The only value a matching TrainJob may carry, on itself or in the templates of its runtime and "
          "runtimePatches (another is denied under Enforce, warned under Audit), unless listed in {allowed}.")


class KueueScheduling(KubeModel):
    """Kueue queue and priority: set as TrainJob labels when absent, and the only values a matching TrainJob may
    run with unless alternatives are listed."""

    queue_name: str | None = spec_field(
        "LocalQueue name, set as label kueue.x-k8s.io/queue-name when absent. "
        + PINNED.format(allowed="allowedQueueNames"), max_length=63
    )
    allowed_queue_names: list[str] | None = spec_field(
        "Other LocalQueues a matching TrainJob may name in kueue.x-k8s.io/queue-name (queueName is always "
        "allowed and stays the default). Requires queueName.",
        list_type="set", max_items=64, items={"maxLength": 63},
    )
    priority_class: str | None = spec_field(
        "WorkloadPriorityClass name, set as label kueue.x-k8s.io/priority-class when absent. "
        + PINNED.format(allowed="allowedPriorityClasses"), max_length=253
    )
    allowed_priority_classes: list[str] | None = spec_field(
        "Other WorkloadPriorityClasses a matching TrainJob may name in kueue.x-k8s.io/priority-class "
        "(priorityClass is always allowed and stays the default). Requires priorityClass.",
        list_type="set", max_items=64, items={"maxLength": 253},
    )


class KAIScheduling(KubeModel):
    """NVIDIA KAI scheduler queue."""

    queue: str | None = spec_field(
        "KAI queue name, set as the kai.scheduler/queue label of the TrainJob and its JobSet when absent. "
        "A kai.scheduler/queue label on the TrainJob, or in the JobSet, job or pod templates of its runtime or "
        "runtimePatches, must name it unless the queue is listed in allowedQueues (denied under Enforce, "
        "warned under Audit).", max_length=63)
    allowed_queues: list[str] | None = spec_field(
        "Other KAI queues a matching TrainJob may name (queue is always allowed and stays the default). "
        "Requires queue.",
        list_type="set", max_items=64, items={"maxLength": 63},
    )


class SchedulingDefaults(KubeModel):
    """Scheduler settings given to matching TrainJobs that do not choose their own; under Enforce the only ones
    they may run with (Audit warns), unless alternatives are listed."""

    kueue: KueueScheduling | None = spec_field("Kueue queue and priority.")
    kai: KAIScheduling | None = spec_field("KAI queue.")
    scheduler_name: str | None = spec_field(
        "schedulerName of the training pods, recorded as annotation trainguard.io/scheduler-name when absent and "
        "applied to every pod template that names no scheduler. The annotation, and a schedulerName in the pod "
        "templates of the runtime or runtimePatches, must name it unless listed in allowedSchedulerNames "
        "(denied under Enforce, warned under Audit).", max_length=253)
    allowed_scheduler_names: list[str] | None = spec_field(
        "Other schedulerNames a matching TrainJob's pods may use (schedulerName is always allowed and stays the "
        "default). Requires schedulerName.",
        list_type="set", max_items=64, items={"maxLength": 253},
    )


class TopologyLevel(KubeModel):
    """One level of the GPU network hierarchy, e.g. host, NVLink domain, block."""

    node_label: str = spec_field(
        "Node label whose value names the domain at this level (e.g. kubernetes.io/hostname, "
        "nvidia.com/gpu.clique).", required=True, min_length=1, max_length=317,
    )
    gpus_per_domain: int = spec_field(
        "GPUs one domain at this level holds (host = 8, NVLink domain = 72, block = 512).",
        required=True, minimum=1,
    )


class GpuTopology(KubeModel):
    """GPU-topology-aware placement: keep a job's nodes inside the smallest domain that holds all its GPUs."""

    gpu_resource_name: str | None = spec_field(
        "Extended resource that counts GPUs. Defaults to nvidia.com/gpu.", crd_default="nvidia.com/gpu",
        max_length=253,
    )
    levels: list[TopologyLevel] = spec_field(
        "Topology levels from the narrowest (fewest GPUs) to the widest.", required=True,
        list_map_keys=["nodeLabel"], min_items=1, max_items=8,
        rules=[rule("self.map(l, l.gpusPerDomain).isSorted()",
                    "levels must be ordered from the narrowest domain (fewest GPUs) to the widest")],
    )
    placement: Literal["Required", "Preferred"] | None = spec_field(
        "Required: the job must fit in one domain of the chosen level; Preferred: best effort. "
        "Defaults to Preferred.", crd_default="Preferred", enum=["Required", "Preferred"],
    )
    target: Literal["Kueue", "KAI", "Both"] | None = spec_field(
        "Which scheduler receives the placement: Kueue topology-aware scheduling, KAI, or both. "
        "Defaults to Kueue.", crd_default="Kueue", enum=["Kueue", "KAI", "Both"],
    )
    kai_topology: str | None = spec_field(
        "Name of the KAI Topology object describing these levels, written as the kai.scheduler/topology "
        "annotation. Required for KAI placement hints (target KAI or Both).", max_length=253,
    )


class PolicyLimits(KubeModel):
    """Bounds a matching TrainJob must stay within; a violation is denied (Enforce) or warned (Audit)."""

    max_nodes: int | None = spec_field("Most training nodes per TrainJob.", minimum=1)
    max_gpus_per_node: int | None = spec_field(
        "Most GPUs per training node, and per pod of any other replicatedJob.", minimum=0)
    max_total_gpus: int | None = spec_field("Most GPUs per TrainJob (nodes x GPUs per node).", minimum=0)
    allowed_runtimes: list[str] | None = spec_field(
        "Runtimes a TrainJob may reference, by kind and name: ClusterTrainingRuntime/<name>, "
        "TrainingRuntime/<name>, or a plain <name> meaning the ClusterTrainingRuntime of that name only "
        "(a namespaced TrainingRuntime of the same name is not allowed by it); empty allows all.",
        list_type="set", max_items=256,
        items={"maxLength": 253},
    )
    allowed_image_prefixes: list[str] | None = spec_field(
        "Every container and init container image of every replicatedJob the TrainJob builds (trainer, "
        "initializers, any other job of the runtime) must start with one of these (e.g. ghcr.io/acme/); "
        "empty allows all.",
        list_type="set", max_items=64, items={"maxLength": 500},
    )
    required_resource_requests: list[str] | None = spec_field(
        "Resources every trainer node must request (e.g. cpu, memory).", list_type="set", max_items=16,
        items={"maxLength": 253},
    )
    pod_security: Literal["Baseline"] | None = spec_field(
        "Baseline: refuse pod settings the Pod Security Standards' baseline level forbids (privileged, host "
        "namespaces, hostPath volumes, hostPort, added capabilities, procMount) in every pod of the merged job "
        "(runtime, runtimePatches, trainer), at apply time. Unset: not checked.",
        enum=["Baseline"],
    )


class PolicyDefaults(KubeModel):
    """Values given to matching TrainJobs that do not set them."""

    active_deadline_seconds: int | None = spec_field(
        "spec.activeDeadlineSeconds for TrainJobs without one.", minimum=1, fmt="int64"
    )
    labels: dict[str, str] | None = spec_field("Labels added to the TrainJob (existing keys are kept).")
    node_selector: dict[str, str] | None = spec_field("nodeSelector entries added to the training pods.")
    tolerations: list[Toleration] | None = spec_field(
        "Tolerations added to the training pods.", list_type="atomic", max_items=64
    )


class TrainJobPolicySpec(KubeModel):
    """What a policy applies to, how strictly, and what it sets or limits."""

    selector: PolicySelector | None = spec_field("Which TrainJobs this policy applies to; empty: all.")
    mode: Literal["Enforce", "Audit"] | None = spec_field(
        "Enforce denies violating TrainJobs; Audit admits them with warnings. Defaults to Enforce.",
        crd_default="Enforce", enum=["Enforce", "Audit"],
    )
    priority: int | None = spec_field(
        "Order among matching policies: higher first, ties by name. The first policy that sets a default "
        "wins; limits of all matching policies apply. Defaults to 0.", crd_default=0,
        minimum=-1000, maximum=1000,
    )
    scheduling: SchedulingDefaults | None = spec_field(
        "Scheduler defaults (Kueue, KAI, schedulerName), and the only values a matching TrainJob may run with "
        "unless alternatives are listed.")
    topology: GpuTopology | None = spec_field("GPU-topology-aware placement.")
    limits: PolicyLimits | None = spec_field("Limits matching TrainJobs must respect.")
    defaults: PolicyDefaults | None = spec_field("Defaults for matching TrainJobs.")


class PolicyTrainJobCounts(KubeModel):
    """What the policy makes of the unfinished TrainJobs it selects, as the controller last evaluated them."""

    selected: int | None = spec_field("Unfinished TrainJobs the policy selects.", minimum=0, fmt="int64")
    pass_: int | None = spec_field("Selected TrainJobs the policy finds nothing wrong with.", alias="pass",
                                   minimum=0, fmt="int64")
    warn: int | None = spec_field("Selected TrainJobs with findings under mode Audit (allowed, warned).",
                                  minimum=0, fmt="int64")
    fail: int | None = spec_field("Selected TrainJobs with findings under mode Enforce (denied: not built or "
                                  "resumed; a running one keeps running).", minimum=0, fmt="int64")


class TrainJobPolicyStatus(KubeModel):
    """Observed state of a policy, written by the controller."""

    observed_generation: int | None = spec_field("metadata.generation last processed.", fmt="int64")
    conditions: list[Condition] | None = spec_field(
        "Ready (True: the policy is read and in force; False: the controller cannot read it, the message names "
        "the field) and similar conditions.", list_map_keys=["type"], max_items=8
    )
    train_jobs: PolicyTrainJobCounts | None = spec_field(
        "Counts of the unfinished TrainJobs the policy selects, by result.")


class TrainJobPolicy(KubeModel):
    """Cluster-wide rules and defaults for TrainJobs (trainguard.io/v1alpha1)."""

    __crd__: ClassVar[dict[str, Any]] = {
        "group": c.TRAINGUARD_GROUP, "version": c.TRAINGUARD_VERSION, "kind": c.TRAINJOB_POLICY_KIND,
        "plural": "trainjobpolicies", "singular": "trainjobpolicy", "scope": "Cluster", "short_names": ["tjp"],
        "status": True, "root_rules": [],
        "printer_columns": [
            {"name": "Mode", "type": "string", "jsonPath": ".spec.mode"},
            {"name": "Ready", "type": "string", "jsonPath": ".status.conditions[?(@.type==\"Ready\")].status"},
            {"name": "Selected", "type": "integer", "jsonPath": ".status.trainJobs.selected"},
            {"name": "Pass", "type": "integer", "jsonPath": ".status.trainJobs.pass"},
            {"name": "Warn", "type": "integer", "jsonPath": ".status.trainJobs.warn"},
            {"name": "Fail", "type": "integer", "jsonPath": ".status.trainJobs.fail"},
            {"name": "Priority", "type": "integer", "jsonPath": ".spec.priority", "priority": 1},
            {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
        ],
    }

    api_version: str | None = spec_field("trainguard.io/v1alpha1")
    kind: str | None = spec_field("TrainJobPolicy")
    metadata: ObjectMeta | None = spec_field("Object metadata.")
    spec: TrainJobPolicySpec = spec_field("The policy.", required=True)
    status: TrainJobPolicyStatus | None = spec_field("Observed state.")


# ================================================================================================ cache
class HostPathSource(KubeModel):
    """Dataset shards in a directory of each node."""

    path: str = spec_field(
        "Absolute directory on the node.", required=True, max_length=4096,
        rules=[rule("self.startsWith('/')", "path must be absolute")],
    )


class PVCSource(KubeModel):
    """Dataset shards on a PersistentVolumeClaim in the DatasetCache's namespace."""

    claim_name: str = spec_field("Name of the PVC.", required=True, min_length=1, max_length=253)
    path: str | None = spec_field(
        "Directory inside the volume (relative, default: its root).", max_length=4096,
        rules=[rule("!self.startsWith('/') && !self.contains('..')",
                    "path must be relative to the volume root and must not contain '..'")],
    )


# The shard glob's bounds: the agent matches it in linear time whatever it is (``trainguard.cache.shard_glob``), and
# these keep each match cheap too; no real dataset needs more.
MAX_SHARD_GLOB_LENGTH = 256
MAX_SHARD_GLOB_WILDCARDS = 8


class DatasetSource(KubeModel):
    """Where the shards are: exactly one of hostPath or persistentVolumeClaim, plus a glob."""

    model_config = ConfigDict(json_schema_extra={"x-kubernetes-validations": [
        rule("[has(self.hostPath), has(self.persistentVolumeClaim)].filter(x, x).size() == 1",
             "exactly one of hostPath or persistentVolumeClaim must be set"),
    ]})

    host_path: HostPathSource | None = spec_field("A directory on each node.")
    persistent_volume_claim: PVCSource | None = spec_field("A PersistentVolumeClaim.")
    shards: str = spec_field(
        "Glob of shard files relative to the source directory, e.g. train-*.arrow: * and ? within one directory, "
        "[...] a character class, **/ any number of directories.",
        required=True, min_length=1, max_length=MAX_SHARD_GLOB_LENGTH,
        rules=[rule("!self.startsWith('/') && !self.contains('..')",
                    "shards must be a relative glob and must not contain '..'"),
               rule(f"size(self) - size(self.replace('*', '')) <= {MAX_SHARD_GLOB_WILDCARDS}",
                    f"shards must contain at most {MAX_SHARD_GLOB_WILDCARDS} '*' characters")],
    )


class DatasetCacheSpec(KubeModel):
    """A dataset to keep resident in node memory, where, and how much memory it may use."""

    source: DatasetSource = spec_field("Where the dataset's shards are.", required=True)
    node_selector: dict[str, str] | None = spec_field(
        "Labels of the nodes to cache on (the cache agent DaemonSet's nodeSelector); empty: all nodes."
    )
    tolerations: list[Toleration] | None = spec_field(
        "Tolerations of the cache agent pods (e.g. for tainted GPU nodes).", list_type="atomic", max_items=64
    )
    memory_budget: QuantityValue = spec_field(
        "Most memory the cache may hold per node (e.g. 64Gi); shards beyond it are not cached.",
        required=True, rules=[rule("quantity(string(self)).isGreaterThan(quantity('0'))",
                                   "memoryBudget must be greater than zero")],
    )
    priority_class_name: str | None = spec_field(
        "PriorityClass of the cache agent pods, so they are not preempted before the training pods that read "
        "from them.", max_length=253,
    )
    hold_trainers_until_warm: bool | None = spec_field(
        "Hold the trainer pods of TrainJobs that use this cache (annotation trainguard.io/dataset-cache) with the "
        "scheduling gate trainguard.io/dataset-cache-warm until the cache is warm on every node it selects "
        "(status.nodesReady == status.nodesDesired > 0): gated pods have no node yet, and they will land on some "
        "of the selected nodes. Default false: trainer pods start at once and read the files directly while the "
        "cache warms. Read when a TrainJob's JobSet is built; turning it off releases pods already held."
    )


class DatasetCacheStatus(KubeModel):
    """Cache state across the selected nodes."""

    nodes_desired: int | None = spec_field("Nodes selected for caching.", minimum=0)
    nodes_ready: int | None = spec_field("Nodes whose cache holds every shard that fits the budget.", minimum=0)
    bytes_resident: int | None = spec_field("Bytes held in memory, summed over nodes.", minimum=0, fmt="int64")
    shards: int | None = spec_field("Shard files matched by the glob.", minimum=0)
    observed_generation: int | None = spec_field("metadata.generation last processed.", fmt="int64")
    conditions: list[Condition] | None = spec_field("Ready and similar conditions.", list_map_keys=["type"],
                                                   max_items=8)


class DatasetCache(KubeModel):
    """A dataset cached in the memory of selected nodes by trainguard's cache agent (trainguard.io/v1alpha1)."""

    __crd__: ClassVar[dict[str, Any]] = {
        "group": c.TRAINGUARD_GROUP, "version": c.TRAINGUARD_VERSION, "kind": c.DATASET_CACHE_KIND,
        "plural": "datasetcaches", "singular": "datasetcache", "scope": "Namespaced", "short_names": ["dsc"],
        "status": True,
        "root_rules": [rule("size(self.metadata.name) <= 52",
                            "metadata.name must be no more than 52 characters")],
        "printer_columns": [
            {"name": "Ready", "type": "integer", "jsonPath": ".status.nodesReady"},
            {"name": "Desired", "type": "integer", "jsonPath": ".status.nodesDesired"},
            {"name": "Budget", "type": "string", "jsonPath": ".spec.memoryBudget"},
            {"name": "Resident", "type": "integer", "jsonPath": ".status.bytesResident"},
            {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
        ],
    }

    api_version: str | None = spec_field("trainguard.io/v1alpha1")
    kind: str | None = spec_field("DatasetCache")
    metadata: ObjectMeta | None = spec_field("Object metadata.")
    spec: DatasetCacheSpec = spec_field("What to cache and where.", required=True)
    status: DatasetCacheStatus | None = spec_field("Observed cache state.")


