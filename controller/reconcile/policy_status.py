"""TrainJobPolicy status: what an admin reads with ``kubectl get tjp`` after a policy change.

Each policy's ``status`` carries ``observedGeneration``, a ``Ready`` condition (True, reason ``InForce``: the
controller reads the policy and applies it; False, reason ``Unreadable``: a stored object the current model refuses,
the message naming the field, so webhook and controller both ignore it) and ``trainJobs``: how many unfinished
TrainJobs it selects and how many of them pass, warn (findings under ``mode: Audit``) or fail (findings under
``mode: Enforce``: not built, or not resumed once suspended; a running one keeps running).

The counts are not a second evaluation: the TrainJob reconciler already asks ``pipeline.check_trainjob`` about every
unfinished job (and again, for every one, when a policy or a namespace's labels change), and that one evaluation
returns each matching policy's result (``PolicyResult``). ``PolicyTally`` keeps the latest results per TrainJob and
their counts per policy; a job that finishes or is deleted leaves it. A job the controller could not evaluate (its
runtime is missing) is not counted. A namespace-scoped controller (``--namespace``) counts its namespace only.

Writes: only through the ``/status`` subresource, only when the computed status differs from the stored one, and
coalesced per policy: a changed count marks the policy dirty once (``mark``) and the work queue hands it out no
sooner than ``interval`` seconds after its last write, so a burst of a thousand TrainJob events gives a handful of
writes, not a thousand. The controller's own status write comes back as a MODIFIED event with the same
generation, labels and annotations: that does not re-check any TrainJob (``only_status_changed``).
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, Callable, Iterable, Mapping

from trainguard.webhook.api.apimachinery import format_time
from trainguard.webhook.api.views import KubeObject, TrainJobPolicy, find_condition
from trainguard.webhook.kube.client import KubeClient
from trainguard.webhook.kube.errors import NotFound
from trainguard.webhook.kube.resources import TRAINJOB_POLICIES
from trainguard.webhook.policy.pipeline import FAIL, PASS, WARN, PolicyResult
from trainguard.webhook.policy.policy_model import PolicyParseError, parse_policy

log = logging.getLogger(__name__)

FIELD_MANAGER = "trainguard"
READY = "Ready"
REASON_IN_FORCE = "InForce"
REASON_UNREADABLE = "Unreadable"
# The condition message's bound (metav1.Condition allows 32 KiB; a parse error is one line).
MAX_MESSAGE = 1024


@dataclass(frozen=True)
class Counts:
    passed: int = 0
    warned: int = 0
    failed: int = 0

    @property
    def selected(self) -> int:
        return self.passed + self.warned + self.failed


class PolicyTally:
    """The latest per-policy results of every evaluated unfinished TrainJob (by UID), and their counts per policy.
    Pure bookkeeping: ``record`` and ``forget`` return the policies whose counts may have changed."""

    def __init__(self) -> None:
        self._by_job: dict[str, dict[str, str]] = {}
        self._counts: dict[str, Counter[str]] = {}

    def record(self, uid: str, results: Iterable[PolicyResult]) -> set[str]:
        new = {r.policy: r.result for r in results}
        old = self._by_job.get(uid, {})
        if new == old:
            return set()
        self._move(old, -1)
        self._move(new, +1)
        if new:
            self._by_job[uid] = new
        else:
            self._by_job.pop(uid, None)
        return {p for p in old.keys() | new.keys() if old.get(p) != new.get(p)}

    def forget(self, uid: str) -> set[str]:
        return self.record(uid, ())

    def counts(self, policy: str) -> Counts:
        c = self._counts.get(policy) or Counter()
        return Counts(passed=c[PASS], warned=c[WARN], failed=c[FAIL])

    def _move(self, results: Mapping[str, str], step: int) -> None:
        for policy, result in results.items():
            counter = self._counts.setdefault(policy, Counter())
            counter[result] += step
            if not any(counter.values()):
                del self._counts[policy]


def readable(policy: Mapping[str, Any]) -> PolicyParseError | None:
    """None when the model reads the policy (the same door ``parse_all`` passes every policy through)."""
    try:
        parse_policy(dict(policy))
    except PolicyParseError as err:
        return err
    return None


def desired_status(policy: Mapping[str, Any], counts: Counts, problem: PolicyParseError | None,
                   now: datetime) -> dict[str, Any]:
    """The status the controller writes; the Ready condition keeps its ``lastTransitionTime`` while its status
    stays the same. Pure."""
    view = KubeObject(policy)
    generation = view.metadata.generation
    if problem is None:
        mode = "Enforce" if TrainJobPolicy(policy).enforcing else "Audit"
        ready, reason = "True", REASON_IN_FORCE
        message = (f"in force, mode {mode}: " + ("findings deny (not built, not resumed)" if mode == "Enforce"
                                                  else "findings are warnings and PolicyViolation events"))
    else:
        ready, reason = "False", REASON_UNREADABLE
        message = (f"{problem.path}: {problem.detail}; the webhook and the controller ignore this policy until it "
                   "is fixed")
    if len(message) > MAX_MESSAGE:
        message = message[: MAX_MESSAGE - 4] + " ..."
    previous = find_condition(view.status.get("conditions") or [], READY)
    since = (previous.last_transition_time if previous is not None and previous.status == ready
             and previous.last_transition_time else format_time(now))
    condition: dict[str, Any] = {"type": READY, "status": ready, "reason": reason, "message": message,
                                 "lastTransitionTime": since}
    status: dict[str, Any] = {"conditions": [condition],
                              "trainJobs": {"selected": counts.selected, "pass": counts.passed,
                                            "warn": counts.warned, "fail": counts.failed}}
    if generation is not None:
        condition["observedGeneration"] = generation
        status["observedGeneration"] = generation
    return status


def only_status_changed(old: Mapping[str, Any] | None, new: Mapping[str, Any]) -> bool:
    """A MODIFIED policy whose spec (generation), labels and annotations are as they were: a status write, the
    controller's own. Nothing a TrainJob is judged by changed."""
    if old is None:
        return False
    a, b = KubeObject(old).metadata, KubeObject(new).metadata
    return (a.generation is not None and a.generation == b.generation and dict(a.labels) == dict(b.labels)
            and dict(a.annotations) == dict(b.annotations))


class Cache:
    def get(self, name: str, namespace: str = "") -> dict[str, Any] | None: ...


class PolicyStatusReconciler:
    """Writes each TrainJobPolicy's status from the tally; ``mark`` schedules a policy through ``schedule(name,
    delay)`` (the work queue's ``add_after``), at most once while pending and no sooner than ``interval`` after
    its last write."""

    def __init__(self, kube: KubeClient, policies: Cache, tally: PolicyTally,
                 schedule: Callable[[str, float], None], *, interval: float = 2.0,
                 clock: Callable[[], float] = time.monotonic,
                 now: Callable[[], datetime] = lambda: datetime.now(timezone.utc)) -> None:
        self._kube = kube
        self._policies = policies
        self.tally = tally
        self._schedule = schedule
        self._interval = interval
        self._clock = clock
        self._now = now
        self._pending: set[str] = set()
        self._written: dict[str, float] = {}
        self.writes = 0

    def mark(self, names: Iterable[str]) -> None:
        for name in names:
            if name in self._pending:
                continue
            self._pending.add(name)
            last = self._written.get(name)
            delay = 0.0 if last is None else max(0.0, last + self._interval - self._clock())
            self._schedule(name, delay)

    def reset(self) -> None:
        """A fresh work queue (leadership won again): nothing is pending in it."""
        self._pending.clear()

    def record(self, uid: str, results: Iterable[PolicyResult]) -> None:
        self.mark(self.tally.record(uid, results))

    def forget(self, uid: str) -> None:
        self.mark(self.tally.forget(uid))

    async def reconcile(self, name: str) -> None:
        self._pending.discard(name)
        policy = self._policies.get(name)
        if policy is None:
            self._written.pop(name, None)
            return
        status = desired_status(policy, self.tally.counts(name), readable(policy), self._now())
        if status == dict(KubeObject(policy).status):
            return
        try:
            await self._kube.merge_patch(TRAINJOB_POLICIES, name, {"status": status}, subresource="status",
                                         field_manager=FIELD_MANAGER)
        except NotFound:
            return  # deleted meanwhile
        self._written[name] = self._clock()
        self.writes += 1
