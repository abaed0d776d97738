"""``trainguard test``'s engine: expected policy results for TrainJobs, checked offline (pure).

A test file (YAML, ``kind: Test``, strictly decoded: a misspelt key is an error naming it) lists the manifest files
it needs and what each (TrainJob, TrainJobPolicy) pair should come to, as ``kyverno test`` does for Kyverno::

    apiVersion: trainguard.io/v1alpha1
    kind: Test
    metadata: {name: gpu-limits}
    files: [runtime.yaml, policy.yaml, jobs.yaml]     # relative to the test file: runtimes, policies, TrainJobs, ...
    results:
    - {trainJob: team-a/small, policy: gpu-limits, result: pass}
    - {trainJob: team-a/too-big, policy: gpu-limits, result: fail, message: "exceed maxNodes 4"}
    - trainJob: team-a/small
      policy: gpu-limits
      result: pass
      mutated: {metadata: {labels: {kueue.x-k8s.io/queue-name: team-gpu}}}   # must be part of the admitted TrainJob

A result is what the cluster would do on ``kubectl apply`` of the TrainJob (CREATE) with the other documents in
place: ``pass`` (the policy selects it and finds nothing), ``warn`` (an Audit policy's finding: admitted with a
warning), ``fail`` (an Enforce policy's finding: denied), ``skip`` (the policy does not select it) and ``error``
(admission refuses it for a reason that is no policy's, e.g. upstream's validation, or the runtime cannot be built).
It comes from the webhook's own pipeline: the mutating webhook, then ``pipeline.check_trainjob`` on the admitted
object (the findings the validating webhook and the controller compute). ``message`` must be a substring of that
policy's findings; ``mutated`` is a partial object that must match the admitted TrainJob (mappings by key, lists
element by element).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

from xml.sax.saxutils import escape, quoteattr

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from trainguard.webhook.offline import Doc, InputError, build_snapshot
from trainguard.webhook.policy import pipeline
from trainguard.webhook.policy.runtime_ref import resolve_runtime
from trainguard.webhook.policy.verdict import AdmissionInput

RESULTS = ("pass", "warn", "fail", "skip", "error")
# Bounds: a test file is hostile input too.
MAX_FILES = 256
MAX_RESULTS = 10_000


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)


class Expected(_Strict):
    trainjob: str = Field(alias="trainJob", min_length=1, max_length=317)  # "<namespace>/<name>" or "<name>"
    policy: str = Field(min_length=1, max_length=253)
    result: Literal["pass", "warn", "fail", "skip", "error"]
    message: str | None = Field(default=None, max_length=4096)
    mutated: dict[str, Any] | None = None


class TestMeta(_Strict):
    name: str = Field(min_length=1, max_length=253)


class TestFile(_Strict):
    api_version: Literal["trainguard.io/v1alpha1"] = Field(alias="apiVersion")
    kind: Literal["Test"]
    metadata: TestMeta
    files: list[str] = Field(min_length=1, max_length=MAX_FILES)
    results: list[Expected] = Field(min_length=1, max_length=MAX_RESULTS)


def parse_test(origin: str, text: str) -> TestFile:
    """The test file, strictly: an unknown key, a wrong type or a missing field is an ``InputError`` naming it."""
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise InputError(f"{origin}: not valid YAML: {getattr(e, 'problem', None) or e}") from e
    if not isinstance(doc, dict):
        raise InputError(f"{origin}: expected a Test (a mapping with kind: Test)")
    try:
        return TestFile.model_validate(doc)
    except ValidationError as e:
        problems = [f"{origin}: {'.'.join(str(p) for p in err['loc'])}: {err['msg']}" for err in e.errors()[:20]]
        raise InputError("\n".join(problems)) from e


@dataclass(frozen=True)
class Outcome:
    """One expected result, checked."""

    expected: Expected
    got: str
    messages: tuple[str, ...]
    problems: tuple[str, ...]  # empty: the expectation holds

    @property
    def ok(self) -> bool:
        return not self.problems


@dataclass(frozen=True)
class _Admission:
    admitted: dict[str, Any] | None
    results: dict[str, tuple[str, tuple[str, ...]]]  # policy -> (result, its findings' messages)
    error: str | None


def _key(doc: Doc) -> str:
    return f"{doc.namespace or 'default'}/{doc.name}"


def _admit(doc: Doc, docs: list[Doc], now: datetime) -> _Admission:
    snapshot = build_snapshot(docs)
    obj, namespace = doc.obj, doc.namespace or "default"
    mutated = pipeline.mutate_trainjob(AdmissionInput("CREATE", obj, None, now, namespace=namespace), snapshot)
    if not mutated.allowed:
        return _Admission(None, {}, mutated.message or "denied by the mutating webhook")
    admitted = mutated.obj if mutated.obj is not None else obj
    validated = pipeline.validate_trainjob(AdmissionInput("CREATE", admitted, None, now, namespace=namespace),
                                           snapshot)
    runtime = resolve_runtime(admitted, namespace, snapshot).runtime
    if runtime is None:
        return _Admission(admitted, {}, validated.message or "the runtime is missing")
    check = pipeline.check_trainjob(admitted, runtime, namespace, snapshot)
    denial = check.verdict.message or ""
    results: dict[str, tuple[str, tuple[str, ...]]] = {}
    for r in check.results:
        if r.result == pipeline.WARN:
            messages = tuple(a.message for a in check.audit if a.policy == r.policy)
        elif r.result == pipeline.FAIL:
            messages = (denial,)  # the denial the user would read, every Enforce finding in it
        else:
            messages = ()
        results[r.policy] = (r.result, messages)
    if not validated.allowed and not any(res == pipeline.FAIL for res, _ in results.values()):
        return _Admission(admitted, results, validated.message)  # denied, but by no policy
    return _Admission(admitted, results, None)


def subset_problems(expected: Any, actual: Any, path: str = "") -> list[str]:
    """Where ``expected`` is not part of ``actual`` (mappings by key, lists element by element)."""
    where = path or "(the object)"
    if isinstance(expected, dict):
        if not isinstance(actual, dict):
            return [f"{where}: expected a mapping, got {_short(actual)}"]
        out: list[str] = []
        for k, v in expected.items():
            sub = f"{path}.{k}" if path else str(k)
            if k not in actual:
                out.append(f"{sub}: expected {_short(v)}, but it is not there")
            else:
                out += subset_problems(v, actual[k], sub)
        return out
    if isinstance(expected, list):
        if not isinstance(actual, list) or len(actual) != len(expected):
            return [f"{where}: expected {_short(expected)}, got {_short(actual)}"]
        return [p for i, (e, a) in enumerate(zip(expected, actual)) for p in subset_problems(e, a, f"{path}[{i}]")]
    if expected != actual and str(expected) != str(actual):
        return [f"{where}: expected {_short(expected)}, got {_short(actual)}"]
    return []


def _short(value: Any) -> str:
    text = yaml.safe_dump(value, default_flow_style=True, sort_keys=True).strip().removesuffix("...").strip()
    return text if len(text) <= 200 else text[:200] + "..."


def run_test(test: TestFile, docs: list[Doc], now: datetime) -> list[Outcome]:
    """Every expected result of ``test`` against the documents of its files."""
    trainjobs = {_key(d): d for d in docs if d.kind == "TrainJob"}
    known_policies = {d.name for d in docs if d.kind == "TrainJobPolicy"}
    context = [d for d in docs if d.kind != "TrainJob"]
    admissions: dict[str, _Admission] = {}
    outcomes: list[Outcome] = []
    for exp in test.results:
        key = exp.trainjob if "/" in exp.trainjob else f"default/{exp.trainjob}"
        doc = trainjobs.get(key)
        if doc is None:
            outcomes.append(Outcome(exp, "", (), (f"no TrainJob {key} in the test's files "
                                                 f"(there are: {', '.join(sorted(trainjobs)) or 'none'})",)))
            continue
        if exp.policy not in known_policies:
            outcomes.append(Outcome(exp, "", (), (f"no TrainJobPolicy {exp.policy!r} in the test's files "
                                                 f"(there are: {', '.join(sorted(known_policies)) or 'none'})",)))
            continue
        if key not in admissions:
            admissions[key] = _admit(doc, context + [doc], now)
        adm = admissions[key]
        if adm.error is not None:
            got, messages = "error", (adm.error,)
        elif exp.policy in adm.results:
            got, messages = adm.results[exp.policy]
        else:
            got, messages = "skip", ()
        problems: list[str] = []
        if got != exp.result:
            problems.append(f"expected {exp.result}, got {got}" + (f": {' | '.join(messages)}" if messages else ""))
        if exp.message is not None and not any(exp.message in m for m in messages):
            problems.append(f"no finding contains {exp.message!r}" + (f": {' | '.join(messages)}" if messages else ""))
        if exp.mutated is not None:
            if adm.admitted is None:
                problems.append("mutated: nothing was admitted")
            else:
                problems += [f"mutated: {p}" for p in subset_problems(exp.mutated, adm.admitted)]
        outcomes.append(Outcome(exp, got, messages, tuple(problems)))
    return outcomes


def junit(test_name: str, outcomes: list[Outcome]) -> str:
    """A JUnit XML report: one testcase per expected result."""
    failures = sum(not o.ok for o in outcomes)
    lines = [f'<testsuite name={quoteattr(test_name)} tests="{len(outcomes)}" failures="{failures}">']
    for o in outcomes:
        case = f"{o.expected.trainjob} {o.expected.policy} {o.expected.result}"
        if o.ok:
            lines.append(f"  <testcase classname={quoteattr(test_name)} name={quoteattr(case)}/>")
        else:
            lines.append(f"  <testcase classname={quoteattr(test_name)} name={quoteattr(case)}>")
            lines.append(f"    <failure message={quoteattr(o.problems[0])}>{escape(chr(10).join(o.problems))}</failure>")
            lines.append("  </testcase>")
    lines.append("</testsuite>")
    return "\n".join(lines) + "\n"
