"""Differential suite: every corpus case, applied to upstream Kubeflow Trainer v2.3.0's own manager and to trainguard,
must read the same on both sides (admission verdict, HTTP status and message, warnings, the stored objects, and
everything the controllers build: JobSet, ConfigMaps, Secrets by key, PodGroups, TrainJob status), after the noise
tests/parity/normalize.py removes and the differences the case names from tests/parity/deliberate.py.

Run it alone with ``.venv/bin/python -m pytest tests/parity -q`` (builds the peer once, about 5 minutes cold).
"""

from __future__ import annotations

import subprocess
from collections import Counter

import pytest

from tests.integration.conftest import SCOPE_LABEL
from tests.parity.corpus import build_corpus
from tests.parity.deliberate import ACCEPT, DELIBERATE, IMPLICIT, NotThisDifference
from tests.parity.normalize import diff, render_diff
from tests.parity.peer import trainer_module_dir


def _corpus_names() -> list[str]:
    """Case names for parametrisation (collection time; the corpus reads the module's files, found through Go)."""
    try:
        return [c.name for c in build_corpus(trainer_module_dir(), {SCOPE_LABEL: "collect"})]
    except (RuntimeError, OSError, subprocess.SubprocessError) as err:  # no Go: the one case says why
        return [f"corpus-unavailable: {err}"[:200]]


def _selected(config: pytest.Config) -> bool:
    """Whether ``-m`` keeps this directory's tests (all marked ``cluster``): ``make test-unit`` deselects them, and
    then collection must not run Go (``go mod download``) or reach the network to name cases it will not run."""
    expr = config.getoption("markexpr")
    if not expr:
        return True
    from _pytest.mark.expression import Expression

    return Expression.compile(expr).evaluate(lambda name, **_: name == "cluster")


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "case_name" in metafunc.fixturenames:
        names = _corpus_names() if _selected(metafunc.config) else ["deselected-by-marker"]
        metafunc.parametrize("case_name", names)


def test_corpus_is_large_unique_and_names_known_entries() -> None:
    cases = build_corpus(trainer_module_dir(), {SCOPE_LABEL: "collect"})
    assert len(cases) >= 100, len(cases)
    assert len({c.name for c in cases}) == len(cases), [n for n, k in Counter(c.name for c in cases).items() if k > 1]
    created = Counter((o["kind"], o["metadata"]["name"]) for c in cases for o in (*c.runtimes, *c.jobs))
    assert [k for k, n in created.items() if n > 1] == []
    for c in cases:
        assert set(c.deliberate) <= set(DELIBERATE), (c.name, c.deliberate)
    assert set(DELIBERATE) == set(ACCEPT)
    named = {d for c in cases for d in c.deliberate} | set(IMPLICIT)
    assert named == set(DELIBERATE), f"registry entries no case names: {set(DELIBERATE) - named}"
    origins = Counter(c.origin for c in cases)
    assert {"upstream runtime", "upstream example", "variation", "invalid", "update"} <= set(origins), origins


def test_value_rendering_compares_json_values_by_content() -> None:
    from tests.parity.deliberate import _sorted_json_values

    go = 'x: Invalid value: {"name":"a","kind":"K"}: bad, y: Invalid value: ["b"]: worse'
    py = 'x: Invalid value: {"kind":"K","name":"a"}: bad, y: Invalid value: ["b"]: worse'
    assert _sorted_json_values(go) == _sorted_json_values(py)
    assert _sorted_json_values(go) != _sorted_json_values(py.replace('"a"', '"c"'))


def test_both_sides_built_and_denied(parity_run) -> None:
    """The comparison means something only if both systems did real work: JobSets built, objects denied."""
    for side in ("upstream", "trainguard"):
        records = parity_run.run.records[side].values()
        built = sum(any(k.startswith("JobSet/") for k in r.objects) for r in records)
        denied = sum(any(not a["ok"] for a in r.admission.values()) for r in records)
        assert built >= 50, f"{side}: only {built} cases built a JobSet"
        assert denied >= 15, f"{side}: only {denied} cases saw a denial"
    print(f"parity timings: {parity_run.timings}")


def test_parity(parity_run, case_name: str) -> None:
    assert not case_name.startswith("corpus-unavailable"), case_name
    case = parity_run.cases[case_name]
    up, tg = parity_run.readings(case_name)
    for entry in IMPLICIT:
        try:
            up, tg = ACCEPT[entry](up, tg)
        except NotThisDifference:
            pass
    for entry in case.deliberate:
        try:
            up, tg = ACCEPT[entry](up, tg)
        except NotThisDifference as err:
            pytest.fail(f"case {case_name} names deliberate difference {entry!r}, but: {err}", pytrace=False)
    lines = list(diff(up, tg))
    if lines:
        logs = "\n".join(f"  {k}: {v}" for k, v in parity_run.logs.items())
        note = f" ({case.note})" if case.note else ""
        pytest.fail(f"case {case_name}{note} differs from upstream v2.3.0 ({len(lines)} places):\n"
                    f"{render_diff(lines)}\nlogs:\n{logs}", pytrace=False)


def test_minresources_acceptor_takes_only_the_documented_shape() -> None:
    """trainguard may count more of a resource (a limit standing in for a request) or one upstream leaves out;
    counting less, or dropping one, is another difference and must not be accepted."""
    accept = ACCEPT["podgroup-limit-only-resources"]

    def reading(min_resources: dict[str, str]) -> dict:
        return {"admission": {}, "objects": {"PodGroup/x": {"spec": {"minMember": 2, "minResources": min_resources}}}}

    up = reading({"cpu": "4", "memory": "8Gi"})
    a, b = accept(up, reading({"cpu": "4", "memory": "8Gi", "nvidia.com/gpu": "16"}))
    assert a == b
    accept(up, reading({"cpu": "4500m", "memory": "8Gi"}))
    for other in ({"cpu": "4"}, {"cpu": "3", "memory": "8Gi"}, {"cpu": "4", "memory": "7Gi", "nvidia.com/gpu": "8"}):
        with pytest.raises(NotThisDifference):
            accept(up, reading(other))
    with pytest.raises(NotThisDifference):
        accept(up, reading({"cpu": "4", "memory": "8Gi"}))
