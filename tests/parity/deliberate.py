"""The differences from upstream that trainguard accepts, and how each is recognised in a comparison.

``DELIBERATE`` maps a name to (reason, README table row); ``ACCEPT`` maps the same name to a function that takes
the two normalised readings of one case (upstream's, trainguard's), checks that their difference has exactly the
accepted shape, and returns them with that difference removed. A case names the entries that explain it
(``Case.deliberate``); ``IMPLICIT`` entries apply to every case. Whatever difference is left fails the case.

Each row below is in README.md's table "Where trainguard deliberately differs" (the row text is kept here so the
two can be compared); the test of each is the parity case that names it.
"""

from __future__ import annotations

import copy
import json
import re
from typing import Any, Callable

Reading = dict[str, Any]  # {"admission": {...}, "objects": {...}} as tests/parity/normalize.py makes it

DELIBERATE: dict[str, tuple[str, str]] = {
    "runtime-snapshot": (
        "upstream keeps the runtime snapshot as <job>-runtime-snapshot in the job's namespace, where a user who can "
        "write ConfigMaps rewrites what the controller builds; trainguard keeps it in the controller's namespace",
        "| runtime snapshot | `<job>-runtime-snapshot` in the job's namespace (YAML), trusted when its ownerReference "
        "matches, so a user who can write ConfigMaps rewrites what the controller builds | `runtime-snapshot-<uid>` in "
        "the controller's namespace (`--snapshot-namespace`), ... | `webhook/runtime/snapshot.py`, "
        "`tests/security/test_controller_trust.py` |",
    ),
    "runtimepatch-missing-target": (
        "a runtimePatch naming a replicatedJob or container the runtime lacks would be silently ignored by the build; "
        "trainguard denies it at apply so the user learns the patch does nothing",
        "| runtimePatches naming a job or container the runtime lacks | admitted, the patch is ignored by the build | "
        "denied (403) naming `spec.runtimePatches` | `webhook/runtime/jobset.py`, `tests/parity/` cases "
        "`patch-missing-job`, `patch-missing-container` |",
    ),
    "podgroup-limit-only-resources": (
        "upstream leaves limit-only resources (e.g. GPUs) out of PodGroup minResources (#2980, #2549)",
        "| PodGroup `minResources` | limit-only resources (e.g. GPUs) not counted (#2980, #2549) | a limit stands in "
        "for a missing request, as the apiserver defaults it | `webhook/runtime/resources.py`, "
        "`tests/unit/runtime/test_plain_coscheduling.py` |",
    ),
    "runtime-webhook-opt-out": (
        "a namespaced TrainingRuntime is written by namespace users, so it cannot opt out of validation",
        "| opt-out labels | `trainer.kubeflow.org/webhook-validation: disabled` skips TrainingRuntime and "
        "ClusterTrainingRuntime validation | honoured on ClusterTrainingRuntimes only (admin-written); ... | "
        "`webhook/admission/registration.py`, `tests/security/test_policy_bypass.py` |",
    ),
    "trainingruntime-update-validation": (
        "upstream validates TrainingRuntimes on CREATE only, so an UPDATE makes any runtime admissible",
        "| TrainingRuntime updates | validated on CREATE only | validated on UPDATE too, plus stricter checks ... | "
        "`webhook/policy/runtime_rules.py`, `tests/unit/policy/test_runtime_validation.py` |",
    ),
    "value-rendering": (
        "values in messages are rendered as JSON with sorted keys; upstream renders them as JSON in Go struct field "
        "order (the same value, another key order)",
        "| bad values in messages | JSON in Go struct field order (`{\"name\":...,\"apiGroup\":...}`) | JSON with sorted "
        "keys (`\"x\"`, `8`, `[\"a\"]`, `{\"apiGroup\":...,\"name\":...}`) | `webhook/field.py` |",
    ),
    "trainingruntime-stricter-checks": (
        "a runtime whose ML policy has no replicatedJob named node cannot be built; trainguard denies it at apply",
        "| TrainingRuntime updates | validated on CREATE only | validated on UPDATE too, plus stricter checks "
        "(duplicate replicatedJob names, `dependsOn` to an earlier job, a `node` job for ML policies) | "
        "`webhook/policy/runtime_rules.py`, `tests/unit/policy/test_runtime_validation.py` |",
    ),
    "negative-numnodes": (
        "a negative trainer.numNodes would subtract the trainer's GPUs from a job's total, slipping its other "
        "replicated jobs past a policy limit; upstream admits it and builds parallelism -1",
        "| negative `trainer.numNodes` | admitted; the trainer job gets parallelism and completions -1 | denied (403) "
        "naming `spec.trainer.numNodes` | `webhook/runtime/validate.py`, `tests/unit/runtime/test_num_nodes.py`, "
        "parity case `numnodes-negative` |",
    ),
    "flux-default-numnodes": (
        "upstream's Flux plugin dereferences trainer.numNodes unguarded: its reconciler panics (recovered, retried "
        "forever) and builds nothing; trainguard runs the job on the runtime's count",
        "| Flux TrainJob without `trainer.numNodes` | the reconciler panics on a nil pointer (recovered, retried) and "
        "nothing is built | built on the runtime's `mlPolicy.numNodes` | `webhook/runtime/flux.py`, "
        "`tests/unit/runtime/test_flux_upstream.py`, parity case `flux-no-numnodes` |",
    ),
    "door-check": (
        "a malformed object is denied (403) naming the field before any policy work; upstream's defaulter answers "
        "400 for what it cannot decode",
        "| malformed or oversized objects | the defaulter answers 400 for what it cannot decode; ... | every webhook "
        "first checks the CRD's types and limits and denies (403) naming the field and the limit, ... | "
        "`webhook/policy/well_formed.py`, `tests/unit/policy/test_well_formed.py` |",
    ),
    "resume-removes-suspended": (
        "the kubeflow SDK 0.5 reads Running only from a TrainJob without conditions; upstream keeps Suspended=False "
        "after a resume, so every job Kueue once suspended reads as Created while it runs",
        "| a resumed TrainJob's status | `Suspended=False/Resumed`, whose lastTransitionTime starts "
        "`activeDeadlineSeconds` | the `Suspended` condition removed and the resume time in `status.lastResumeTime` "
        "(a CRD addition); ... | `controller/reconcile/status.py`, `tests/unit/reconcile/test_status.py`, "
        "`tests/e2e/test_kueue_topology.py`, parity case `up-suspend-resume` |",
    ),
}

IMPLICIT = ("runtime-snapshot", "value-rendering")


class NotThisDifference(AssertionError):
    """The case names an entry, but its difference does not have the entry's shape."""


def _snapshot(up: Reading, tg: Reading) -> tuple[Reading, Reading]:
    up = copy.deepcopy(up)
    up["objects"] = {k: v for k, v in up["objects"].items()
                     if not (k.startswith("ConfigMap/") and k.endswith("-runtime-snapshot"))}
    return up, tg


def _trainguard_denies(kinds: tuple[str, ...], phases: tuple[str, ...], field: str) -> Callable[[Reading, Reading], tuple[Reading, Reading]]:
    """Upstream admits an object that trainguard denies with 403 naming ``field``: upstream's reading of that object
    (admission, what it stored and what was built from it) becomes trainguard's."""

    def accept(up: Reading, tg: Reading) -> tuple[Reading, Reading]:
        up = copy.deepcopy(up)
        found = False
        for key, verdict in tg["admission"].items():
            phase, _, obj = key.partition(":")
            kind, _, name = obj.partition("/")
            if kind not in kinds or phase not in phases:
                continue
            theirs = up["admission"].get(key)
            if verdict["ok"] or not theirs or not theirs["ok"]:
                continue
            if verdict["code"] != 403 or field not in verdict["message"]:
                raise NotThisDifference(f"{key}: trainguard denied with {verdict['code']} {verdict['message']!r}, "
                                        f"not a 403 naming {field}")
            found = True
            up["admission"][key] = verdict
            for k in list(up["objects"]):
                if k == obj or k.split("/", 1)[1].startswith(name + "-") or k.split("/", 1)[1] == name:
                    if k in tg["objects"]:
                        up["objects"][k] = tg["objects"][k]
                    else:
                        del up["objects"][k]
        if not found:
            raise NotThisDifference(f"no {'/'.join(kinds)} that upstream admits and trainguard denies")
        return up, tg

    return accept


def _counts_more(upstream: dict[str, Any] | None, ours: dict[str, Any] | None, where: str) -> None:
    """The documented shape only: every resource upstream counts, trainguard counts at least as much of (a limit may
    stand in for a container's missing request); what trainguard adds is resources upstream leaves out."""
    from trainguard.webhook.api.quantity import parse_quantity

    upstream, ours = upstream or {}, ours or {}
    for name, amount in upstream.items():
        if name not in ours:
            raise NotThisDifference(f"{where}: trainguard drops {name} ({amount}) that upstream counts")
        if parse_quantity(ours[name]) < parse_quantity(amount):
            raise NotThisDifference(f"{where}: trainguard counts less {name} ({ours[name]}) than upstream ({amount})")


def _minresources(up: Reading, tg: Reading) -> tuple[Reading, Reading]:
    up, tg = copy.deepcopy(up), copy.deepcopy(tg)
    changed = False
    for k in up["objects"]:
        if k.startswith("PodGroup/") and k in tg["objects"]:
            a = up["objects"][k].get("spec", {})
            b = tg["objects"][k].get("spec", {})
            if a.get("minResources") != b.get("minResources"):
                _counts_more(a.get("minResources"), b.get("minResources"), k)
                changed = True
                a.pop("minResources", None)
                b.pop("minResources", None)
    if not changed:
        raise NotThisDifference("PodGroup minResources are the same on both sides")
    return up, tg


_JSON_VALUE = re.compile(r"Invalid value: (?=[\[{])")


def _sorted_json_values(message: str) -> str:
    out, pos = [], 0
    decoder = json.JSONDecoder()
    for m in _JSON_VALUE.finditer(message):
        if m.end() < pos:
            continue
        try:
            value, end = decoder.raw_decode(message, m.end())
        except ValueError:
            continue
        out.append(message[pos:m.end()])
        out.append(json.dumps(value, sort_keys=True, separators=(",", ":")))
        pos = end
    out.append(message[pos:])
    return "".join(out)


def _value_rendering(up: Reading, tg: Reading) -> tuple[Reading, Reading]:
    up, tg = copy.deepcopy(up), copy.deepcopy(tg)
    changed = False
    for reading in (up, tg):
        for verdict in reading["admission"].values():
            canonical = _sorted_json_values(verdict["message"])
            changed |= canonical != verdict["message"]
            verdict["message"] = canonical
    if not changed:
        raise NotThisDifference("no JSON value in any message")
    return up, tg


def _door(up: Reading, tg: Reading) -> tuple[Reading, Reading]:
    """Upstream answers 400 (its defaulter cannot decode) or 422 (the schema, after the webhooks); trainguard's door
    denies first, 403, naming the same field."""
    up = copy.deepcopy(up)
    found = False
    for key, verdict in tg["admission"].items():
        theirs = up["admission"].get(key)
        if theirs and not theirs["ok"] and theirs["code"] in (400, 422) and verdict["code"] == 403:
            fields = re.findall(r"(spec\.[\w.\[\]]+): ", verdict["message"])
            if not fields or not all(f in theirs["message"] for f in fields):
                raise NotThisDifference(f"{key}: trainguard's denial does not name upstream's field: "
                                        f"{verdict['message']!r} / {theirs['message']!r}")
            up["admission"][key] = verdict
            found = True
    if not found:
        raise NotThisDifference("no object that upstream answers 400 or 422 and trainguard denies 403")
    return up, tg


def _upstream_builds_nothing(up: Reading, tg: Reading) -> tuple[Reading, Reading]:
    """Upstream admitted the TrainJob but built nothing for it; trainguard built it: trainguard's built objects are
    set aside, everything else (admission, the stored TrainJob) must still match."""
    if any(k.startswith("JobSet/") for k in up["objects"]):
        raise NotThisDifference("upstream built a JobSet")
    if not any(k.startswith("JobSet/") for k in tg["objects"]):
        raise NotThisDifference("trainguard built no JobSet")
    tg = copy.deepcopy(tg)
    tg["objects"] = {k: v for k, v in tg["objects"].items() if k in up["objects"] or k.startswith("TrainJob/")}
    return up, tg


def _resume_without_condition(up: Reading, tg: Reading) -> tuple[Reading, Reading]:
    """Upstream's resumed TrainJob carries Suspended=False/Resumed; trainguard's carries no Suspended condition and a
    ``status.lastResumeTime`` instead. Both are removed; everything else of the status must match."""
    up, tg = copy.deepcopy(up), copy.deepcopy(tg)
    found = False
    for key, theirs in up["objects"].items():
        ours = tg["objects"].get(key)
        if not key.startswith("TrainJob/") or ours is None:
            continue
        their_status, our_status = theirs.get("status") or {}, ours.get("status") or {}
        resumed = [c for c in their_status.get("conditions") or [] if c.get("type") == "Suspended"
                   and (c.get("status"), c.get("reason"), c.get("message")) == ("False", "Resumed", "TrainJob is resumed")]
        if not resumed:
            continue
        if any(c.get("type") == "Suspended" for c in our_status.get("conditions") or []):
            raise NotThisDifference(f"{key}: trainguard kept a Suspended condition after the resume")
        if "lastResumeTime" not in our_status:
            raise NotThisDifference(f"{key}: trainguard stored no lastResumeTime for the resume")
        their_status["conditions"] = [c for c in their_status["conditions"] if c not in resumed]
        if not their_status["conditions"]:
            del their_status["conditions"]
        del our_status["lastResumeTime"]
        for obj, status in ((theirs, their_status), (ours, our_status)):
            if status:
                obj["status"] = status
            else:
                obj.pop("status", None)
        found = True
    if not found:
        raise NotThisDifference("no TrainJob that upstream reports Suspended=False/Resumed")
    return up, tg


ACCEPT: dict[str, Callable[[Reading, Reading], tuple[Reading, Reading]]] = {
    "resume-removes-suspended": _resume_without_condition,
    "runtime-snapshot": _snapshot,
    "runtimepatch-missing-target": _trainguard_denies(("TrainJob",), ("create", "update1", "update2"),
                                                      "spec.runtimePatches"),
    "podgroup-limit-only-resources": _minresources,
    "runtime-webhook-opt-out": _trainguard_denies(("TrainingRuntime",), ("create",), "spec.template"),
    "trainingruntime-update-validation": _trainguard_denies(("TrainingRuntime",), ("update1",), "spec.template"),
    "door-check": _door,
    "flux-default-numnodes": _upstream_builds_nothing,
    "negative-numnodes": _trainguard_denies(("TrainJob",), ("create",), "spec.trainer.numNodes"),
    "value-rendering": _value_rendering,
    "trainingruntime-stricter-checks": _trainguard_denies(("TrainingRuntime",), ("create",),
                                                          "spec.template.spec.replicatedJobs"),
}
