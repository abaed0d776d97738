"""The engine's typed, immutable view of a TrainJobPolicy, read from the API model ``trainguard.webhook.api.trainguard``.

The wire object is parsed by the API model (the single source of truth for the CRD); this module flattens it into
frozen values with the CRD defaults applied (mode Enforce, priority 0, placement Preferred, target Kueue, GPU
resource ``nvidia.com/gpu``), so the rules read plain attributes and never re-implement defaulting.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, ValidationError

from trainguard.webhook.api.meta import LabelSelector
from trainguard.webhook.api.trainguard import TrainJobPolicy

DEFAULT_GPU_RESOURCE = "nvidia.com/gpu"


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True)


class KueueSettings(_Frozen):
    queue_name: str | None = None
    priority_class: str | None = None


class Scheduling(_Frozen):
    kueue: KueueSettings | None = None
    kai_queue: str | None = None
    scheduler_name: str | None = None


class TopologyLevel(_Frozen):
    node_label: str
    gpus_per_domain: int


class Topology(_Frozen):
    gpu_resource_name: str = DEFAULT_GPU_RESOURCE
    placement: Literal["Required", "Preferred"] = "Preferred"
    schedulers: tuple[Literal["Kueue", "KAI"], ...] = ("Kueue",)
    kai_topology: str | None = None
    levels: tuple[TopologyLevel, ...] = ()


class Limits(_Frozen):
    max_nodes: int | None = None
    max_gpus_per_node: int | None = None
    max_total_gpus: int | None = None
    allowed_runtimes: tuple[str, ...] = ()          # empty: all allowed (API doc)
    allowed_image_prefixes: tuple[str, ...] = ()    # empty: all allowed
    required_requests: tuple[str, ...] = ()
    pod_security: Literal["Baseline"] | None = None


class Defaults(_Frozen):
    active_deadline_seconds: int | None = None
    labels: dict[str, str] | None = None
    node_selector: dict[str, str] | None = None
    tolerations: tuple[dict[str, Any], ...] | None = None


class Selector(_Frozen):
    namespace: LabelSelector | None = None
    trainjob: LabelSelector | None = None
    runtime_names: tuple[str, ...] | None = None
    runtime_kinds: tuple[str, ...] | None = None
    runtime_labels: LabelSelector | None = None


class PolicySpec(_Frozen):
    mode: Literal["Enforce", "Audit"] = "Enforce"
    priority: int = 0
    selector: Selector = Selector()
    scheduling: Scheduling = Scheduling()
    topology: Topology | None = None
    limits: Limits = Limits()
    defaults: Defaults = Defaults()


class Policy(_Frozen):
    name: str
    spec: PolicySpec

    @property
    def enforcing(self) -> bool:
        return self.spec.mode == "Enforce"


class PolicyParseError(ValueError):
    """A TrainJobPolicy the engine cannot read; carries the field path, the bad value and why."""

    def __init__(self, policy: str, path: str, value: Any, detail: str):
        self.policy, self.path, self.value, self.detail = policy, path, value, detail
        super().__init__(f'TrainJobPolicy "{policy}": {path}: {detail}')


_TARGETS = {"Kueue": ("Kueue",), "KAI": ("KAI",), "Both": ("Kueue", "KAI")}


def parse_policy(obj: dict[str, Any]) -> Policy:
    name = str((obj.get("metadata") or {}).get("name") or "")
    try:
        model = TrainJobPolicy.parse(obj)
    except ValidationError as e:
        first = e.errors()[0]
        where = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in first["loc"]).lstrip(".")
        raise PolicyParseError(name, where, first.get("input"), first["msg"]) from e
    spec = model.spec
    sel = spec.selector
    rsel = sel.runtime_selector if sel else None
    sched = spec.scheduling
    topology = None
    if spec.topology is not None:
        t = spec.topology
        topology = Topology(
            gpu_resource_name=t.gpu_resource_name or DEFAULT_GPU_RESOURCE,
            placement=t.placement or "Preferred",
            schedulers=_TARGETS[t.target or "Kueue"],
            kai_topology=t.kai_topology,
            levels=tuple(TopologyLevel(node_label=lv.node_label, gpus_per_domain=lv.gpus_per_domain)
                         for lv in t.levels),
        )
    lim = spec.limits
    dflt = spec.defaults
    return Policy(name=name, spec=PolicySpec(
        mode=spec.mode or "Enforce",
        priority=spec.priority if spec.priority is not None else 0,
        selector=Selector(
            namespace=sel.namespace_selector if sel else None,
            trainjob=sel.train_job_selector if sel else None,
            runtime_names=tuple(rsel.names) if rsel and rsel.names else None,
            runtime_kinds=tuple(rsel.kinds) if rsel and rsel.kinds else None,
            runtime_labels=rsel.label_selector if rsel else None,
        ),
        scheduling=Scheduling(
            kueue=KueueSettings(queue_name=sched.kueue.queue_name, priority_class=sched.kueue.priority_class)
            if sched and sched.kueue else None,
            kai_queue=sched.kai.queue if sched and sched.kai else None,
            scheduler_name=sched.scheduler_name if sched else None,
        ),
        topology=topology,
        limits=Limits(
            max_nodes=lim.max_nodes, max_gpus_per_node=lim.max_gpus_per_node, max_total_gpus=lim.max_total_gpus,
            allowed_runtimes=tuple(lim.allowed_runtimes or ()),
            allowed_image_prefixes=tuple(lim.allowed_image_prefixes or ()),
            required_requests=tuple(lim.required_resource_requests or ()),
            pod_security=lim.pod_security,
        ) if lim else Limits(),
        defaults=Defaults(
            active_deadline_seconds=dflt.active_deadline_seconds,
            labels=dict(dflt.labels) if dflt.labels else None,
            node_selector=dict(dflt.node_selector) if dflt.node_selector else None,
            tolerations=tuple(t.dump() for t in dflt.tolerations) if dflt.tolerations else None,
        ) if dflt else Defaults(),
    ))
