"""The runtime framework: TrainJob + runtime -> effective job -> the objects the reconciler applies.

This is trainguard's re-implementation of Kubeflow Trainer v2.3's runtime framework (``pkg/runtime``). The mutating
webhook and the reconciler both call it, so the job a policy reasons about is exactly the job that gets built.
Everything here is pure: inputs are JSON dicts (or ``trainguard.webhook.api`` models, which are dumped to dicts at the door),
outputs are new dicts; nothing reads the network, the clock or globals. Randomness (MPI SSH keys, Flux CURVE
certificates) is injected through ``KeySource`` so a build is a function of its arguments.

Public API (stable; the policy engine, the reconciler and ``trainguard render`` code against it)::

    effective_job(trainjob, runtime) -> EffectiveJob
        The merged JobSet spec (runtime template ⊕ runtimePatches ⊕ trainer overrides ⊕ ML/pod-group policy
        enforcement ⊕ trainguard extras) plus its pod sets. ``EffectiveJob`` fields:
          name, namespace, labels, annotations      JobSet metadata (template.metadata ∪ patches' metadata)
          spec                                      the JobSet spec exactly as it will be applied
          pod_sets: tuple[PodSet, ...]              one per replicatedJob, template order
          ml_policy: str                            "torch" | "mpi" | "jax" | "xgboost" | "flux" | "plain"
          pod_group_policy: str | None              "coscheduling" | "volcano" | None
          trainer_jobs: tuple[str, ...]             replicatedJob names that run the trainer (topology target)
          num_nodes: int                            pods of the node pod set
          gpus_per_node: int                        GPUs one node pod requests (merged view, not raw override)
          total_gpus: int                           Σ over pod sets of GPUs per pod × count
        ``PodSet`` fields: name, ancestor (str | None), count (pods per replica), replicas, pods (count ×
        replicas), requests (dict[str, trainguard.webhook.api.quantity.Quantity] for ONE pod; limits stand in for missing
        requests), gpus (per pod), containers / init_containers (names).

    validate_trainjob(trainjob, old_trainjob, runtime, jobset_obj, *, priority_classes=None)
            -> tuple[list[FieldError], list[str]]
        Upstream's CustomValidation plugins (run after the runtime lookup):
        initializer checks, runtimePatches checks (domain-prefixed manager,
        targets exist, no env on reserved containers, update only while suspended, not while a replicated job
        is active), Torch (+torchtune), MPI, XGBoost, Flux, Volcano. ``old_trainjob`` is None on CREATE;
        ``jobset`` is the live JobSet or None; ``priority_classes`` is the set of PriorityClass names
        (None: unknown, the Volcano existence check is skipped). Returns (errors, warnings); render errors
        with ``trainguard.webhook.field.aggregate``.

    build_objects(trainjob, runtime, *, keys, existing=ExistingObjects(), dataset_cache=None) -> list[dict]
        ``ExistingObjects(jobset=None, podgroup=False, mpi_ssh_secret=False, flux_curve_secret=False)``.
        Every object the reconciler server-side-applies, in order: JobSet (omitted when it is running:
        existing and both suspends false), MPI SSH Secret (only when ``existing.mpi_ssh_secret`` is False),
        MPI hostfile ConfigMap, PodGroup (coscheduling/volcano; omitted when it exists and the TrainJob is not
        suspended), Flux entrypoint ConfigMap and CURVE Secret (Secret only when not existing). All carry one
        controller ownerReference to the TrainJob. ``keys``: ``placeholder_keys()`` for render,
        ``generated_keys()`` for the reconciler. ``dataset_cache``: the DatasetCache named by annotation
        ``trainguard.io/dataset-cache`` (required when the annotation is present).

    apply_order(objects) -> list[dict]     the reconciler's write order: dependants first, the JobSet last

    build_runtime_snapshot(trainjob, runtime, namespace) -> dict   ConfigMap ``runtime-snapshot-<uid>`` in the
        controller's namespace, key ``runtime.json`` (JSON, size-capped, labelled with the TrainJob; see ``snapshot``)
    runtime_from_snapshot(configmap, trainjob, namespace) -> dict  raises ``InvalidRuntimeSnapshot``

    BuildError(ValueError)     a TrainJob/runtime pair that cannot produce objects (message says why)

Plugins: ``torch`` (with ``torchtune``), ``mpi``, ``jax``, ``xgboost``, ``flux``, ``plain`` (ML policies) and
``coscheduling``, ``volcano`` (pod groups) are modules of one shape (``plugin``: ``NAME``, ``KIND``, ``enforce``,
optionally ``validate`` / ``build`` / ``trainer_jobs`` + ``num_nodes``), listed once in ``registry``; ``effective``,
``validate`` and ``build`` iterate the registry. A new ML policy is one module and one line in
``registry.PLUGINS``.

Lower-level pieces, one concept per module: ``merge`` (strategic merge, patches, trainer overrides),
``draft`` (the job under construction), ``resources`` (pod requests, GPU/CPU counting), ``effective`` (the
pipeline), ``reserved_env`` (env names a policy owns), ``jobset`` (JobSet rules and assembly), ``validate``,
``build``, ``snapshot``, ``keys``, ``objects`` (owner references), ``extras`` (trainguard effects),
``dataset_cache`` (a DatasetCache wired into the JobSet), ``names`` (reserved names), ``json_copy`` (deep copy of
JSON data), ``flux_scripts`` (upstream's Flux scripts, byte for byte). Fields of the TrainJob and the runtime are
read through ``trainguard.webhook.api.views``.
"""

from __future__ import annotations

from trainguard.webhook.runtime.build import ExistingObjects, apply_order, build_objects
from trainguard.webhook.runtime.draft import BuildError
from trainguard.webhook.runtime.effective import EffectiveJob, PodSet, effective_job
from trainguard.webhook.runtime.keys import KeySource, generated_keys, placeholder_keys
from trainguard.webhook.runtime.snapshot import InvalidRuntimeSnapshot, build_runtime_snapshot, runtime_from_snapshot
from trainguard.webhook.runtime.validate import validate_trainjob

__all__ = [
    "BuildError",
    "EffectiveJob",
    "ExistingObjects",
    "InvalidRuntimeSnapshot",
    "KeySource",
    "PodSet",
    "apply_order",
    "build_objects",
    "build_runtime_snapshot",
    "effective_job",
    "generated_keys",
    "placeholder_keys",
    "runtime_from_snapshot",
    "validate_trainjob",
]
