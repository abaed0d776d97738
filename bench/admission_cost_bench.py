#!/usr/bin/env python3
"""Benchmark: what one TrainJob review costs as its ``spec.trainer.env`` grows, before and after issue 10 item 4.

Run from the repository root (a script, not a test)::

    .venv/bin/python bench/admission_cost_bench.py          # ~2 min on 2 cores; writes bench/results/admission_cost_bench.{json,md}
    .venv/bin/python bench/admission_cost_bench.py --full   # also the old code at 20,000 entries (+3 min per round)

In process, one run, side by side (configurations interleaved round by round, the median of the rounds kept, so
the shared machine's noise hits both alike): the webhook's work for one CREATE review of the ``llm-ddp`` TrainJob of
``examples/`` (matched by the ``gpu-teams`` policy) with n env entries: ``json.loads`` of the AdmissionReview body,
``mutate_trainjob``, then ``validate_trainjob`` on the mutated object.

* **before**: the pipeline entry points without the door check (``__wrapped__``) and the scan-per-item list merges
  that ``webhook/runtime/merge.py`` had (reproduced below, verbatim);
* **linear merges, no door**: today's merges (keys indexed in a dict) without the door check, to show the merge
  path alone is linear at 60,000 entries;
* **after**: the code as it is: the door check denies anything over the CRD's ``maxItems`` (128) from the list's
  length, before any policy work.

Reported: milliseconds per review at each n, and the ratio of n = 10x to n = x for each configuration (linear ~10,
quadratic ~100); plus the door check's share of an ordinary (admitted) review.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import json
import platform
import statistics
import sys
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Iterator

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import yaml  # noqa: E402

from trainguard.webhook.policy import pipeline, well_formed  # noqa: E402
from trainguard.webhook.policy.verdict import AdmissionInput, ClusterSnapshot  # noqa: E402
from trainguard.webhook.runtime import merge  # noqa: E402
from tests.unit.runtime.scan_merges import scan_keyed_list, scan_upsert  # noqa: E402  (merge.py at 1e7203f)

NOW = datetime(2026, 9, 1, 12, 0, tzinfo=timezone.utc)
RESULTS = REPO / "bench" / "results"


@contextlib.contextmanager
def before() -> Iterator[None]:
    """The old merges in place (every module that imported ``upsert`` by name sees the old one too)."""
    saved = merge._merge_keyed_list, merge.upsert
    holders = [m for m in list(sys.modules.values())
               if m is not None and m.__name__.startswith("webhook.") and getattr(m, "upsert", None) is merge.upsert]
    merge._merge_keyed_list, merge.upsert = scan_keyed_list, scan_upsert
    for m in holders:
        m.upsert = scan_upsert
    try:
        yield
    finally:
        merge._merge_keyed_list, merge.upsert = saved
        for m in holders:
            m.upsert = saved[1]


# --- the world ---------------------------------------------------------------------------------------------------


def world() -> tuple[dict[str, Any], ClusterSnapshot]:
    docs = []
    for name in ("torch-distributed-gpu.yaml", "gpu-topology-policy.yaml"):
        docs += [d for d in yaml.safe_load_all((REPO / "examples" / name).read_text()) if d]
    job = next(d for d in docs if d["kind"] == "TrainJob")
    snapshot = ClusterSnapshot(
        cluster_training_runtimes={d["metadata"]["name"]: d for d in docs if d["kind"] == "ClusterTrainingRuntime"},
        policies={d["metadata"]["name"]: d for d in docs if d["kind"] == "TrainJobPolicy"},
        namespace_labels={d["metadata"]["name"]: d["metadata"].get("labels") or {} for d in docs if d["kind"] == "Namespace"},
    )
    return job, snapshot


def body(job: dict[str, Any], n: int) -> bytes:
    obj = copy.deepcopy(job)
    obj["spec"]["trainer"]["env"] = [{"name": f"VAR_{i}", "value": "x" * 8} for i in range(n)]
    return json.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                       "request": {"uid": "u", "operation": "CREATE", "object": obj}}).encode()


def review(raw: bytes, snapshot: ClusterSnapshot, gated: bool) -> bool:
    """One CREATE as the webhook handles it: decode, mutate, validate the mutated object. Returns the verdict."""
    mutate = pipeline.mutate_trainjob if gated else pipeline.mutate_trainjob.__wrapped__
    validate = pipeline.validate_trainjob if gated else pipeline.validate_trainjob.__wrapped__
    obj = json.loads(raw)["request"]["object"]
    m = mutate(AdmissionInput("CREATE", obj, None, NOW, namespace="team-a"), snapshot)
    if not m.allowed:
        return False
    out = m.obj if m.obj is not None else obj
    return validate(AdmissionInput("CREATE", out, None, NOW, namespace="team-a"), snapshot).allowed


def timed(fn: Callable[[], Any]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--full", action="store_true", help="also time the old code at 20,000 entries")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    job, snapshot = world()
    sizes_before = [600, 2_000, 6_000] + ([20_000] if args.full else [])
    sizes_after = [600, 2_000, 6_000, 20_000, 60_000]
    bodies = {n: body(job, n) for n in set(sizes_before + sizes_after + [1])}
    samples: dict[tuple[str, int], list[float]] = {}
    verdicts: dict[tuple[str, int], bool] = {}
    for r in range(args.rounds):
        for n in sorted(set(sizes_before + sizes_after)):
            if n in sizes_before and (n < 20_000 or r == 0):  # the old code at 20,000: one round is enough
                with before():
                    samples.setdefault(("before", n), []).append(
                        timed(lambda: verdicts.__setitem__(("before", n), review(bodies[n], snapshot, False))))
            if n in sizes_after:
                samples.setdefault(("merges", n), []).append(
                    timed(lambda: verdicts.__setitem__(("merges", n), review(bodies[n], snapshot, False))))
                samples.setdefault(("after", n), []).append(
                    timed(lambda: verdicts.__setitem__(("after", n), review(bodies[n], snapshot, True))))
        print(f"round {r + 1}/{args.rounds} done", file=sys.stderr)

    # The door's share of an ordinary review (one env entry, admitted by both webhooks).
    ordinary = bodies[1]
    obj = json.loads(ordinary)["request"]["object"]
    door, whole = [], []
    for _ in range(max(200, args.rounds * 100)):
        door.append(timed(lambda: well_formed.shape_errors("TrainJob", obj)))
        whole.append(timed(lambda: review(ordinary, snapshot, True)))
    door_ms, whole_ms = statistics.median(door) * 1e3, statistics.median(whole) * 1e3

    med = {k: statistics.median(v) * 1e3 for k, v in samples.items()}
    rows = []
    for n in sorted(set(sizes_before + sizes_after)):
        rows.append({"n": n, "before_ms": med.get(("before", n)), "merges_ms": med.get(("merges", n)),
                     "after_ms": med.get(("after", n)),
                     "before_admitted": verdicts.get(("before", n)), "after_admitted": verdicts.get(("after", n))})
    ratios = {cfg: {f"{a}->{b}": med[(cfg, b)] / med[(cfg, a)] for a, b in ((600, 6_000), (2_000, 20_000), (6_000, 60_000))
                    if (cfg, a) in med and (cfg, b) in med} for cfg in ("before", "merges", "after")}
    result = {"python": platform.python_version(), "machine": platform.machine(), "rounds": args.rounds, "rows": rows,
              "ratios_10x": ratios, "ordinary_review_ms": whole_ms, "door_check_ms": door_ms,
              "door_share": door_ms / whole_ms}
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "admission_cost_bench.json").write_text(json.dumps(result, indent=2) + "\n")

    def cell(v: float | None) -> str:
        return "-" if v is None else f"{v:,.1f}"

    lines = ["# admission cost vs spec.trainer.env size (median of rounds, ms per CREATE review: decode + mutate + "
             "validate)", "", "| env entries | before (ms) | linear merges, no door (ms) | after (ms) | before/after | "
             "after verdict |", "|---:|---:|---:|---:|---:|---|"]
    for row in rows:
        b, a = row["before_ms"], row["after_ms"]
        lines.append(f"| {row['n']:,} | {cell(b)} | {cell(row['merges_ms'])} | {cell(a)} | "
                     f"{cell(b / a) if b and a else '-'} | "
                     f"{'admitted' if row['after_admitted'] else 'denied (Too many)'} |")
    lines += ["", "n to 10n work ratio (linear ~10, quadratic ~100):", ""]
    for cfg, rs in ratios.items():
        lines.append(f"- {cfg}: " + ", ".join(f"{k}: {v:.1f}x" for k, v in rs.items()))
    lines += ["", f"Ordinary review (1 env entry, admitted): {whole_ms:.2f} ms; the door check alone {door_ms:.3f} ms "
              f"({100 * door_ms / whole_ms:.1f}%)."]
    (RESULTS / "admission_cost_bench.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
