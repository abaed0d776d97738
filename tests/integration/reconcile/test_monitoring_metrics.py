"""The chart's Grafana dashboard and alert rules name only metrics trainguard exports: every metric in their PromQL
(charts/trainguard/files/) is one that a real ``trainguard webhook`` or ``trainguard controller``, started against the
real apiserver, declares on its /metrics; a histogram's ``_bucket``/``_sum``/``_count`` resolve to it, a counter's
``_total`` is its own name. Read from the scrape's ``# TYPE`` lines, so a series with no samples yet (a denial
counter before any denial) still counts, and a renamed metric fails here rather than as an empty panel."""

from __future__ import annotations

import json
import re
import urllib.request
from pathlib import Path
from typing import Any

import yaml

from reconcile_harness import ControllerProcess, wait_for

FILES = Path(__file__).resolve().parents[3] / "charts" / "trainguard" / "files"

# Words of PromQL that are not metric names when they stand outside a call: operators, modifiers, literals.
_KEYWORDS = {"by", "without", "on", "ignoring", "group_left", "group_right", "and", "or", "unless", "bool", "offset",
             "inf", "nan", "atan2"}
_STRING = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|`[^`]*`')
_MATCHERS = re.compile(r"\{[^{}]*\}")
_RANGE = re.compile(r"\[[^\[\]]*\]")
_GROUPING = re.compile(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^()]*\)")
_IDENT = re.compile(r"(?<![\w.$])([A-Za-z_:][\w:]*)(\s*\()?")


def metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression selects (functions, aggregations, label names and keywords left out)."""
    text = _STRING.sub('""', expr)
    text = _MATCHERS.sub(" ", text)
    text = _RANGE.sub(" ", text)
    text = _GROUPING.sub(" ", text)
    return {m.group(1) for m in _IDENT.finditer(text) if not m.group(2) and m.group(1).lower() not in _KEYWORDS}


def test_metric_names_are_read_out_of_promql() -> None:
    expr = ('histogram_quantile(0.99, sum by (webhook, le) (rate(trainguard_admission_duration_seconds_bucket'
            '{verdict!="error", x=~"a|b"}[$__rate_interval]))) > 0.25 and on (pod) up offset 5m or vector(1e3) '
            '- time() < 14 * 86400 unless min without (a) (b:c:rate5m > bool 0)')
    assert metric_names(expr) == {"trainguard_admission_duration_seconds_bucket", "up", "b:c:rate5m"}


def dashboard_exprs() -> list[str]:
    dashboard = json.loads((FILES / "grafana-dashboard.json").read_text())
    exprs = [t["expr"] for p in dashboard["panels"] for t in p["targets"]]
    for var in dashboard["templating"]["list"]:
        if var["type"] == "query":  # label_values(METRIC, label)
            exprs.append(re.sub(r"^label_values\((.*),\s*\w+\)$", r"\1", var["definition"]))
    return exprs


def rule_exprs() -> list[str]:
    return [r["expr"] for g in yaml.safe_load((FILES / "prometheus-rules.yaml").read_text())["groups"]
            for r in g["rules"]]


def exported(text: str) -> set[str]:
    """Every series name a scrape may carry, from its ``# TYPE`` lines (prometheus_client's text format)."""
    names: set[str] = set()
    for line in text.splitlines():
        if not line.startswith("# TYPE "):
            continue
        _, _, name, kind = line.split()
        names.add(name)
        if kind == "counter":  # declared as NAME_total; NAME_created rides along
            names.add(name.removesuffix("_total") + "_created")
        elif kind == "histogram":  # no series of the bare name
            names.discard(name)
            names.update(name + s for s in ("_bucket", "_sum", "_count", "_created"))
        elif kind == "summary":
            names.update(name + s for s in ("_sum", "_count", "_created"))
    return names


def scrape(url: str) -> str:
    with urllib.request.urlopen(url, timeout=5) as resp:
        return resp.read().decode()


def test_the_dashboard_and_the_rules_use_only_metrics_the_processes_export(
        cluster: Any, namespace: str, webhook_server: Any, tmp_path: Path) -> None:
    controller = ControllerProcess(cluster.kubeconfig, namespace, "monitoring", tmp_path).start()
    try:
        # The leader's scrape: trainguard_policy_results is exported while leading.
        wait_for("the controller leading", lambda: controller.metrics().get("trainguard_leader") == 1.0)
        controller_names = exported(scrape(f"http://127.0.0.1:{controller.port}/metrics"))
    finally:
        controller.kill()
    webhook_names = exported(webhook_server.metrics())
    assert "trainguard_reconcile_total" in controller_names and "trainguard_admission_requests_total" in webhook_names

    available = controller_names | webhook_names
    for source, exprs in (("grafana-dashboard.json", dashboard_exprs()), ("prometheus-rules.yaml", rule_exprs())):
        assert exprs, source
        used = set().union(*(metric_names(e) for e in exprs))
        assert used, source
        missing = sorted(used - available)
        assert not missing, f"{source} uses metrics neither process exports: {missing}"

    # What the issue asks the dashboard and the alerts to show, by metric.
    dashboard = set().union(*(metric_names(e) for e in dashboard_exprs()))
    assert {"trainguard_policy_results", "trainguard_admission_duration_seconds_bucket",
            "trainguard_admission_denials_total", "trainguard_reconcile_total", "trainguard_reconcile_errors_total",
            "trainguard_workqueue_depth", "trainguard_certificate_not_after_timestamp_seconds"} <= dashboard
    alerts = {r["alert"]: metric_names(r["expr"]) for g in yaml.safe_load(
        (FILES / "prometheus-rules.yaml").read_text())["groups"] for r in g["rules"]}
    assert alerts == {
        "TrainguardWebhookErrors": {"trainguard_admission_requests_total"},
        "TrainguardWebhookLatencyHigh": {"trainguard_admission_duration_seconds_bucket"},
        "TrainguardCertificateExpiringSoon": {"trainguard_certificate_not_after_timestamp_seconds"},
        "TrainguardControllerBacklog": {"trainguard_workqueue_depth"},
        "TrainguardJobsBlockedByPolicy": {"trainguard_policy_results"},
    }
