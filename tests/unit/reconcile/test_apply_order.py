"""The reconciler writes a TrainJob's dependants before its JobSet, and stops at the first one the apiserver refuses.

A JobSet's pods need their gang PodGroup, MPI keys and hostfile, Flux scripts: written after the JobSet, a PodGroup
whose CRD is missing left a JobSet running without its gang. Now the JobSet comes last; a refused write is reported
as upstream reports any failed object (Warning ``TrainJobResourcesCreationFailed``, "TrainJob resources
reconciliation failed: ...", the REST mapper's "no matches for kind" for a kind the apiserver does not serve) and
retried with backoff; once the apiserver accepts it, the JobSet follows.
"""

from __future__ import annotations

import copy

import pytest
from test_trainjob import FakeKube, reconciler, runtime, trainjob

from trainguard.controller.reconcile.trainjob import ReconcileError
from trainguard.webhook.kube.errors import ApiError, Invalid, NotFound
from trainguard.webhook.runtime import apply_order


def _runtime(kind: str) -> dict:
    """ClusterTrainingRuntime ``rt`` with the given ML policy (+ pod-group policy)."""
    ml, _, pod_group = kind.partition("+")
    rt = runtime(mpi=ml == "mpi")
    if ml == "flux":
        rt["spec"]["mlPolicy"] = {"numNodes": 1, "flux": {"numProcPerNode": 1}}
    if pod_group == "volcano":
        rt["spec"]["podGroupPolicy"] = {"volcano": {}}
    elif pod_group == "coscheduling":
        rt["spec"]["podGroupPolicy"] = {"coscheduling": {"scheduleTimeoutSeconds": 60}}
    return rt


class RefusingKube(FakeKube):
    """Refuses every write of one kind (runtime snapshots aside) with ``error`` until ``refuse`` is cleared."""

    def __init__(self, kind: str, error: ApiError) -> None:
        super().__init__()
        self.refuse: tuple[str, ApiError] | None = (kind, error)

    def _check(self, resource, obj) -> None:
        if self.refuse and resource.kind == self.refuse[0] and not obj["metadata"]["name"].startswith("runtime-snapshot-"):
            self.calls.append(("refused", resource.kind, obj["metadata"]["name"]))
            raise self.refuse[1]

    async def create(self, resource, obj, namespace=None):
        self._check(resource, obj)
        return await super().create(resource, obj, namespace)

    async def apply(self, resource, obj, *, field_manager, force=True):
        self._check(resource, obj)
        return await super().apply(resource, obj, field_manager=field_manager, force=force)


def _writes(kube: FakeKube) -> list[tuple[str, str]]:
    """(verb, kind) of each object write, the runtime snapshot and the TrainJob's own patches left out."""
    return [(v, k) for v, k, name in kube.verbs() if v in ("create", "apply", "refused") and k != "TrainJob"
            and not name.startswith("runtime-snapshot-")]


@pytest.mark.parametrize(
    ("kind", "writes"),
    [
        ("torch", [("apply", "JobSet")]),
        ("torch+volcano", [("apply", "PodGroup"), ("apply", "JobSet")]),
        ("torch+coscheduling", [("apply", "PodGroup"), ("apply", "JobSet")]),
        ("mpi", [("create", "Secret"), ("apply", "ConfigMap"), ("apply", "JobSet")]),
        ("mpi+volcano", [("create", "Secret"), ("apply", "ConfigMap"), ("apply", "PodGroup"), ("apply", "JobSet")]),
        ("flux", [("apply", "ConfigMap"), ("create", "Secret"), ("apply", "JobSet")]),
    ],
)
async def test_dependants_are_written_before_the_jobset(kind, writes) -> None:
    r, kube, _ = reconciler(trainjob(), rt=_runtime(kind))
    await r.reconcile("ns", "job")
    assert _writes(kube) == writes


NO_VOLCANO = NotFound(404, "NotFound", "the server could not find the requested resource")
FORBIDDEN = ApiError(403, "Forbidden", 'secrets "job-mpi-ssh-auth" is forbidden: exceeded quota: secrets')
INVALID = Invalid(422, "Invalid", 'ConfigMap "job-mpi-hostfile" is invalid: data: Too long')


@pytest.mark.parametrize(
    ("kind", "refused", "error", "written", "message"),
    [
        ("torch+volcano", "PodGroup", NO_VOLCANO, [],
         'no matches for kind "PodGroup" in version "scheduling.volcano.sh/v1beta1"'),
        ("torch+coscheduling", "PodGroup", NO_VOLCANO, [],
         'no matches for kind "PodGroup" in version "scheduling.x-k8s.io/v1alpha1"'),
        ("mpi+volcano", "Secret", FORBIDDEN, [], 'secrets "job-mpi-ssh-auth" is forbidden: exceeded quota: secrets'),
        ("mpi+volcano", "ConfigMap", INVALID, [("create", "Secret")], 'ConfigMap "job-mpi-hostfile" is invalid: data: Too long'),
        ("mpi+volcano", "PodGroup", NO_VOLCANO, [("create", "Secret"), ("apply", "ConfigMap")],
         'no matches for kind "PodGroup" in version "scheduling.volcano.sh/v1beta1"'),
    ],
)
async def test_refused_dependant_stops_before_the_jobset_then_the_retry_proceeds(kind, refused, error, written, message) -> None:
    job = trainjob()
    r, _, events = reconciler(job, rt=_runtime(kind))
    kube = RefusingKube(refused, error)
    r._kube = kube
    with pytest.raises(ReconcileError):
        await r.reconcile("ns", "job")
    assert _writes(kube) == [*written, ("refused", refused)]
    assert ("Warning", "TrainJobResourcesCreationFailed", f"TrainJob resources reconciliation failed: {message}") in events.events
    assert not [e for e in events.events if e[1] == "Created"]

    kube.refuse = None  # the CRD is installed, the quota raised...
    kube.calls.clear()
    await r.reconcile("ns", "job")
    assert _writes(kube)[-1] == ("apply", "JobSet")
    assert ("Normal", "Created", "Created JobSet ns/job") in events.events


def test_apply_order_moves_only_the_jobset() -> None:
    objs = [{"kind": "JobSet", "n": 0}, {"kind": "Secret", "n": 1}, {"kind": "ConfigMap", "n": 2}, {"kind": "PodGroup", "n": 3}]
    before = copy.deepcopy(objs)
    assert [o["n"] for o in apply_order(objs)] == [1, 2, 3, 0]
    assert objs == before
    assert apply_order([]) == []
