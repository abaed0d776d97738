"""The TrainJobPolicy fields the engine reads, as a typed view.

LOCAL STAND-IN: the API engineer owns the TrainJobPolicy model (``webhook/api``). Until it lands, this module
parses the wire object itself, with the field names below; when the real model lands, ``parse_policy`` becomes a
thin conversion from it and nothing else in ``webhook/policy`` changes. Wire shape (camelCase)::

    apiVersion: trainguard.io/v1alpha1
    kind: TrainJobPolicy            # cluster-scoped
    spec:
      mode: Enforce | Audit         # default Enforce; Audit turns violations into warnings
      priority: 0                   # higher applies first; ties broken by name (see matching.py)
      namespaceSelector: <LabelSelector>    # absent: every namespace
      runtimeSelector: <LabelSelector>      # on the runtime object's labels; absent: every runtime
      scheduling:
        kueue: {queueName, priorityClass}
        kai: {queue, schedulerName}
      topology:
        gpuResourceName: nvidia.com/gpu     # default
        placement: Required | Preferred     # default Required
        schedulers: [Kueue, KAI]            # which annotations to write; default [Kueue]
        kaiTopology: <name of the KAI Topology object>   # needed when KAI is a target
        levels:                             # narrowest first
        - {nodeLabel: kubernetes.io/hostname, gpusPerDomain: 8}
        - {nodeLabel: nvidia.com/gpu.clique, gpusPerDomain: 72}
      limits: {maxNodes, maxGPUsPerNode, maxTotalGPUs, allowedRuntimes: [..], allowedImagePrefixes: [..],
               requiredRequests: [cpu, memory]}
      defaults: {activeDeadlineSeconds, labels: {..}, nodeSelector: {..}, tolerations: [..]}
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError
from pydantic.alias_generators import to_camel

from webhook.api.meta import LabelSelector

DEFAULT_GPU_RESOURCE = "nvidia.com/gpu"


class _Model(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="ignore", frozen=True)


class KueueSettings(_Model):
    queue_name: str | None = None
    priority_class: str | None = None


class KaiSettings(_Model):
    queue: str | None = None
    scheduler_name: str | None = None


class Scheduling(_Model):
    kueue: KueueSettings | None = None
    kai: KaiSettings | None = None


class TopologyLevel(_Model):
    node_label: str
    gpus_per_domain: int


class Topology(_Model):
    gpu_resource_name: str = DEFAULT_GPU_RESOURCE
    placement: Literal["Required", "Preferred"] = "Required"
    schedulers: tuple[Literal["Kueue", "KAI"], ...] = ("Kueue",)
    kai_topology: str | None = None
    levels: tuple[TopologyLevel, ...] = ()


class Limits(_Model):
    max_nodes: int | None = None
    max_gpus_per_node: int | None = Field(None, alias="maxGPUsPerNode")
    max_total_gpus: int | None = Field(None, alias="maxTotalGPUs")
    allowed_runtimes: tuple[str, ...] | None = None
    allowed_image_prefixes: tuple[str, ...] | None = None
    required_requests: tuple[str, ...] | None = None


class Defaults(_Model):
    active_deadline_seconds: int | None = None
    labels: dict[str, str] | None = None
    node_selector: dict[str, str] | None = None
    tolerations: tuple[dict[str, Any], ...] | None = None


class PolicySpec(_Model):
    mode: Literal["Enforce", "Audit"] = "Enforce"
    priority: int = 0
    namespace_selector: LabelSelector | None = None
    runtime_selector: LabelSelector | None = None
    scheduling: Scheduling = Scheduling()
    topology: Topology | None = None
    limits: Limits = Limits()
    defaults: Defaults = Defaults()


class Policy(_Model):
    name: str
    spec: PolicySpec

    @property
    def enforcing(self) -> bool:
        return self.spec.mode == "Enforce"


class PolicyParseError(ValueError):
    """A TrainJobPolicy the engine cannot read; the message names the policy and the field."""

    def __init__(self, policy: str, path: str, value: Any, detail: str):
        self.policy, self.path, self.value, self.detail = policy, path, value, detail
        super().__init__(f'TrainJobPolicy "{policy}": {path}: {detail}')


def parse_policy(obj: dict[str, Any]) -> Policy:
    name = str((obj.get("metadata") or {}).get("name") or "")
    try:
        return Policy(name=name, spec=PolicySpec.model_validate(obj.get("spec") or {}))
    except ValidationError as e:
        first = e.errors()[0]
        where = "spec" + "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in first["loc"])
        raise PolicyParseError(name, where, first.get("input"), first["msg"]) from e
