"""Applying the corpus to both sides at once and reading back what each side did.

Each object is applied with its own ``kubectl apply`` (admin), so its admission result is its own; the calls of a
phase run concurrently on both sides, then the phase waits once until both sides are quiet (what the controllers
created stops changing). Results are attributed to cases by object name (TrainJobs, runtimes) or by the owning
TrainJob (JobSets, ConfigMaps, Secrets, PodGroups).
"""

from __future__ import annotations

import json
import re
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Sequence

from tests.conftest import Cluster
from tests.parity.corpus import Case

WORKERS = 6
# kinds read back from the case namespace; cluster runtimes are read by the scope label
NAMESPACED = ("trainjobs.trainer.kubeflow.org,trainingruntimes.trainer.kubeflow.org,jobsets.jobset.x-k8s.io,"
              "configmaps,secrets,podgroups.scheduling.x-k8s.io")
_SERVER_ERROR = re.compile(r"^Error from server(?: \((?P<reason>[A-Za-z]+)\))?: (?P<rest>.*)$", re.S)
# kubectl -v=6 logs each request; the status of its last write (POST/PATCH/PUT) is the HTTP status the user got
_KLOG = re.compile(r"^[IWEF]\d{4} \d{2}:\d{2}:\d{2}\.\d+ ")
_WRITE_STATUS = re.compile(r'"Response" verb="(?:POST|PATCH|PUT)" .*status="(\d{3})')
# kubectl wraps the server's message in its own context ("error when creating "STDIN": ...", or for a patch the
# patch, the object and then "for: "STDIN": error when patching "STDIN": ..."): keep the server's words only
_CONTEXT = re.compile(r'^.*error when (?:creating|patching|retrieving current configuration of|replacing) [^:]*"STDIN": ', re.S)
_INVALID = re.compile(r'^The [A-Za-z.]+ "[^"]*" is invalid: ', re.S)


@dataclass
class Side:
    name: str
    cluster: Cluster
    namespace: str
    scope: dict[str, str]

    def kubectl(self, *args: str, input: str | None = None, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        return self.cluster.kubectl(*args, input=input, check=False, timeout=timeout)


@dataclass
class Applied:
    """One ``kubectl apply`` of one object, as a user sees it."""

    ok: bool
    code: int | None  # HTTP status of the write (kubectl -v=6); None when kubectl never sent it
    reason: str
    message: str
    warnings: tuple[str, ...] = ()

    def as_dict(self) -> dict[str, Any]:
        return {"ok": self.ok, "code": self.code, "reason": self.reason, "message": self.message,
                "warnings": list(self.warnings)}


def _split_klog(stderr: str) -> tuple[list[int], list[str]]:
    """kubectl -v=6 stderr -> (HTTP statuses of its writes, in order; the lines a user sees without -v)."""
    statuses: list[int] = []
    shown: list[str] = []
    in_dump = False
    for line in stderr.splitlines():
        if in_dump:
            in_dump = line != "}]"
            continue
        if _KLOG.match(line):
            m = _WRITE_STATUS.search(line)
            if m:
                statuses.append(int(m.group(1)))
            in_dump = "server response object" in line and not line.rstrip().endswith("}]")
            continue
        shown.append(line)
    return statuses, shown


def parse_apply(proc: subprocess.CompletedProcess[str]) -> Applied:
    statuses, shown = _split_klog(proc.stderr)
    warnings = tuple(sorted(line.removeprefix("Warning: ").strip() for line in shown if line.startswith("Warning: ")))
    rest = "\n".join(line for line in shown if not line.startswith("Warning: ")).strip()
    code = statuses[-1] if statuses else None
    if proc.returncode == 0:
        return Applied(True, code, "", "", warnings)
    m = _SERVER_ERROR.match(rest)
    if not m:
        # kubectl renders a 422 as 'The <Kind> "<name>" is invalid: ...' rather than "Error from server (Invalid)"
        if _INVALID.match(rest):
            return Applied(False, code, "Invalid", rest, warnings)
        return Applied(False, code, "ClientError", rest, warnings)
    message = _CONTEXT.sub("", m.group("rest")).strip()
    return Applied(False, code, m.group("reason") or "", message, warnings)


def object_key(obj: dict[str, Any]) -> str:
    return f"{obj['kind']}/{obj['metadata']['name']}"


@dataclass
class CaseRecord:
    case: Case
    admission: dict[str, dict[str, Any]] = field(default_factory=dict)  # "<phase>:<Kind/name>" -> Applied
    objects: dict[str, dict[str, Any]] = field(default_factory=dict)  # "<Kind/name>" -> object as stored


@dataclass
class Run:
    records: dict[str, dict[str, CaseRecord]]  # side name -> case name -> record
    timings: dict[str, float]


def _apply_one(side: Side, obj: dict[str, Any]) -> Applied:
    args = ["apply", "-v=6", "-f", "-"]
    if obj["kind"] != "ClusterTrainingRuntime":
        args += ["-n", side.namespace]
    return parse_apply(side.kubectl(*args, input=json.dumps(obj)))


def _phase(sides: Sequence[Side], cases: Sequence[Case], label: str, pick: Any,
           records: dict[str, dict[str, CaseRecord]], pool: ThreadPoolExecutor) -> int:
    futures = []
    for case in cases:
        for obj in pick(case):
            for side in sides:
                futures.append((side.name, case.name, f"{label}:{object_key(obj)}", pool.submit(_apply_one, side, obj)))
    for side_name, case_name, key, fut in futures:
        records[side_name][case_name].admission[key] = fut.result().as_dict()
    return len(futures)


def read_side(side: Side) -> list[dict[str, Any]]:
    """Everything the suite compares that exists on one side now."""
    items: list[dict[str, Any]] = []
    proc = side.kubectl("get", NAMESPACED, "-n", side.namespace, "-o", "json")
    if proc.returncode != 0:
        raise AssertionError(f"{side.name}: kubectl get failed:\n{proc.stderr}")
    items += json.loads(proc.stdout)["items"]
    selector = ",".join(f"{k}={v}" for k, v in side.scope.items())
    proc = side.kubectl("get", "clustertrainingruntimes.trainer.kubeflow.org", "-l", selector, "-o", "json")
    if proc.returncode != 0:
        raise AssertionError(f"{side.name}: kubectl get failed:\n{proc.stderr}")
    items += json.loads(proc.stdout)["items"]
    return items


def _fingerprint(items: list[dict[str, Any]]) -> list[tuple[str, str, str]]:
    return sorted((o["kind"], o["metadata"]["name"], o["metadata"].get("resourceVersion", "")) for o in items)


def settle(sides: Sequence[Side], *, quiet: float = 2.5, minimum: float = 1.5, timeout: float = 60) -> dict[str, list[dict[str, Any]]]:
    """Poll both sides until neither has changed anything for ``quiet`` seconds; return the last reading."""
    start = time.monotonic()
    last: dict[str, Any] = {}
    stable_since = start
    while True:
        with ThreadPoolExecutor(len(sides)) as pool:
            reading = dict(zip([s.name for s in sides], pool.map(read_side, sides)))
        prints = {k: _fingerprint(v) for k, v in reading.items()}
        now = time.monotonic()
        if prints != last:
            last, stable_since = prints, now
        elif now - stable_since >= quiet and now - start >= minimum:
            return reading
        if now - start > timeout:
            return reading
        time.sleep(0.5)


def attribute(cases: Sequence[Case], items: list[dict[str, Any]]) -> dict[str, dict[str, dict[str, Any]]]:
    """case name -> {Kind/name: object}: runtimes and TrainJobs by name, the rest by their owning TrainJob."""
    by_object: dict[tuple[str, str], str] = {}
    for case in cases:
        for obj in case.objects():
            by_object[(obj["kind"], obj["metadata"]["name"])] = case.name
    out: dict[str, dict[str, dict[str, Any]]] = {c.name: {} for c in cases}
    for item in items:
        kind, name = item["kind"], item["metadata"]["name"]
        owner = by_object.get((kind, name))
        if owner is None:
            for ref in item["metadata"].get("ownerReferences") or []:
                if ref.get("kind") == "TrainJob" and ("TrainJob", ref.get("name")) in by_object:
                    owner = by_object[("TrainJob", ref["name"])]
        if owner is None:
            # JobSets, PodGroups and Secrets are named after their TrainJob even when they carry no owner
            named = [n for (k, n) in by_object if k == "TrainJob" and (name == n or name.startswith(n + "-"))]
            if named:
                owner = by_object[("TrainJob", max(named, key=len))]
        if owner is not None:
            out[owner][f"{kind}/{name}"] = item
    return out


def run_corpus(sides: Sequence[Side], cases: Sequence[Case]) -> Run:
    records = {s.name: {c.name: CaseRecord(c) for c in cases} for s in sides}
    timings: dict[str, float] = {}
    t0 = time.monotonic()
    with ThreadPoolExecutor(WORKERS) as pool:
        _phase(sides, cases, "create", lambda c: c.runtimes, records, pool)
        # both webhooks read runtimes from watch caches: let them see the new runtimes before the TrainJobs come
        settle(sides, quiet=1.0, minimum=1.0)
        timings["runtimes_s"] = time.monotonic() - t0
        t1 = time.monotonic()
        timings["jobs_applies"] = _phase(sides, cases, "create", lambda c: c.jobs, records, pool)
        timings["jobs_apply_s"] = time.monotonic() - t1
        settle(sides)
        timings["jobs_s"] = time.monotonic() - t1
        steps = max((len(c.updates) for c in cases), default=0)
        for i in range(steps):
            t2 = time.monotonic()
            _phase(sides, [c for c in cases if len(c.updates) > i], f"update{i + 1}",
                   lambda c, i=i: c.updates[i], records, pool)
            settle(sides)
            timings[f"update{i + 1}_s"] = time.monotonic() - t2
    with ThreadPoolExecutor(len(sides)) as pool:
        final = dict(zip([s.name for s in sides], pool.map(read_side, sides)))
    for side in sides:
        for case_name, objects in attribute(cases, final[side.name]).items():
            records[side.name][case_name].objects = objects
    timings["total_s"] = time.monotonic() - t0
    return Run(records, timings)
