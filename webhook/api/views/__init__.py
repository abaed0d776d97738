"""Read-only typed views over wire objects: the one place that knows where each field of a TrainJob, a runtime
and the JobSet template inside it lives.

The webhook, the reconciler and ``render`` receive objects as JSON dicts (an AdmissionReview, a watch event, a
file), and what they write back (a JSON Patch, the built JobSet) is computed from those dicts, most of whose fields
are opaque to us; so the code keeps the dicts and reads them through these views. A view wraps the dict it is given
without copying it and without validating it (the CRD schema and the door check
``trainguard.webhook.policy.well_formed`` have done that before any rule runs): a missing or null field reads as
the documented default; a field of the wrong type is the door check's to refuse (the properties walk the CRD's shape
with plain ``dict.get`` chains, the cheapest reads Python has, since every rule reads through them; ``resolve``
also tolerates a wrong type). Views never write; code that builds or mutates an object (patches, merges, the draft
JobSet) works on dicts and may use a view to read them.

``TrainJob`` serves TrainJobs; ``Runtime`` serves TrainingRuntimes and ClusterTrainingRuntimes alike (same spec);
both share ``KubeObject`` / ``Meta``. ``JobSetTemplate`` reads a runtime's ``spec.template`` and a runtimePatch's
``trainingRuntimeSpec.template`` (same shape), ``ReplicatedJob`` one replicated job down to its pod spec.

The runtimeRef rule: a field that is ABSENT (or null) takes the CRD default (``kind: ClusterTrainingRuntime``,
``apiGroup: trainer.kubeflow.org``), as the apiserver's structural defaulting fills only missing fields; a field
present as ``""`` stays ``""``. Upstream v2.3 does the same: the CRD default applies to an absent field only, and
``RuntimeRefToRuntimeRegistryKey`` dereferences the pointer as sent, so ``kind: ""`` keys the runtime registry as
``.trainer.kubeflow.org``, which no runtime serves: the webhook answers "unsupported runtime" and the reconciler
marks the job ``TrainingRuntimeNotSupported``.

One module per kind: ``base`` (``resolve``, ``View``, ``Meta``, ``Condition``, ``KubeObject``), ``jobset`` (the JobSet
template down to containers), ``runtime``, ``trainjob``, ``workloads`` (the live JobSet, Pod, Lease, Kueue's queueing
objects and list responses, as the reconciler and the I/O layer read them), ``dataset_cache`` (``DatasetCache``, its
``CacheSource`` and ``CacheStatus``), ``policy`` (``TrainJobPolicy``, its defaulted ``PolicySpec`` down to topology
levels and label selectors).
"""

from trainguard.webhook.api.views.base import (
    EMPTY, Condition, KubeObject, Meta, View, find_condition, object_key, object_labels, resolve, resource_version,
)
from trainguard.webhook.api.views.dataset_cache import CacheSource, CacheStatus, DatasetCache
from trainguard.webhook.api.views.jobset import (
    Container, JobSetTemplate, ReplicatedJob, iter_pod_specs, job_ancestor, patch_template, replicated_jobs,
)
from trainguard.webhook.api.views.policy import (
    LabelSelector, PolicySpec, PolicyTopology, TopologyLevel, TrainJobPolicy,
)
from trainguard.webhook.api.views.runtime import Runtime
from trainguard.webhook.api.views.trainjob import RuntimeRef, TrainJob, Trainer
from trainguard.webhook.api.views.workloads import (
    AdmissionCheck, ClusterQueue, JobSet, Lease, LocalQueue, ObjectList, Pod, Workload,
)

__all__ = [
    "AdmissionCheck",
    "CacheSource",
    "CacheStatus",
    "ClusterQueue",
    "Condition",
    "Container",
    "DatasetCache",
    "EMPTY",
    "JobSet",
    "JobSetTemplate",
    "KubeObject",
    "LabelSelector",
    "Lease",
    "LocalQueue",
    "Meta",
    "ObjectList",
    "Pod",
    "PolicySpec",
    "PolicyTopology",
    "ReplicatedJob",
    "Runtime",
    "RuntimeRef",
    "TopologyLevel",
    "TrainJob",
    "TrainJobPolicy",
    "Trainer",
    "View",
    "Workload",
    "find_condition",
    "iter_pod_specs",
    "job_ancestor",
    "object_key",
    "object_labels",
    "patch_template",
    "replicated_jobs",
    "resolve",
    "resource_version",
]
