"""The chart's optional monitoring objects, rendered with the real helm: the Grafana dashboard ConfigMap
(monitoring.grafanaDashboard) and the PrometheusRule (monitoring.prometheusRule), both off by default. Their contents
are the chart's files/ unchanged (tests/integration/reconcile/test_monitoring_metrics.py checks the metric names in
them against real scrapes); the ConfigMap passes the apiserver's server-side dry run, the PrometheusRule (whose CRD
belongs to the Prometheus Operator, not installed here) is checked for the operator's shape."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.integration.chart.test_chart_values import CHART, helm_run, objects, template

FILES = CHART / "files"
BOTH = {"monitoring": {"grafanaDashboard": {"enabled": True, "labels": {"team": "ml"}},
                       "prometheusRule": {"enabled": True, "labels": {"release": "prometheus"}}}}


def test_monitoring_objects_are_off_by_default(cluster: Any) -> None:
    docs = template(cluster, {})
    assert not objects(docs, "PrometheusRule")
    assert not [d for d in docs if d["kind"] == "ConfigMap" and "grafana_dashboard" in d["metadata"].get("labels", {})]


def test_both_on_render_the_dashboard_and_the_rules_from_the_chart_files(cluster: Any, namespace: str) -> None:
    docs = template(cluster, BOTH, namespace=namespace)
    (dashboard,) = [d for d in docs if d["kind"] == "ConfigMap" and d["metadata"]["name"] == "tg-trainguard-grafana-dashboard"]
    labels = dashboard["metadata"]["labels"]
    assert labels["grafana_dashboard"] == "1" and labels["team"] == "ml"
    assert dashboard["metadata"]["namespace"] == namespace
    assert json.loads(dashboard["data"]["trainguard.json"]) == json.loads((FILES / "grafana-dashboard.json").read_text())
    board = json.loads(dashboard["data"]["trainguard.json"])
    assert board["uid"] == "trainguard" and all(p["targets"] and p["datasource"]["uid"] == "${datasource}"
                                                for p in board["panels"])

    (rule,) = objects(docs, "PrometheusRule").values()
    assert (rule["apiVersion"], rule["metadata"]["name"], rule["metadata"]["namespace"]) == (
        "monitoring.coreos.com/v1", "tg-trainguard", namespace)
    assert rule["metadata"]["labels"]["release"] == "prometheus"
    assert rule["spec"] == yaml.safe_load((FILES / "prometheus-rules.yaml").read_text())
    (group,) = rule["spec"]["groups"]
    assert {r["alert"] for r in group["rules"]} == {
        "TrainguardWebhookErrors", "TrainguardWebhookLatencyHigh", "TrainguardCertificateExpiringSoon",
        "TrainguardControllerBacklog", "TrainguardJobsBlockedByPolicy"}
    for r in group["rules"]:  # the operator's Rule: alert, expr, for, labels and annotations, strings throughout
        assert set(r) == {"alert", "expr", "for", "labels", "annotations"}, r
        assert isinstance(r["expr"], str) and r["labels"]["severity"] in ("info", "warning", "critical")
        assert r["annotations"]["summary"] and r["annotations"]["description"]
        assert all(isinstance(v, str) for v in (*r["labels"].values(), *r["annotations"].values()))

    # The ConfigMap against the apiserver (nothing stored); with the defaults' other objects, as a release applies them.
    rest = [d for d in docs if d["kind"] not in ("ServiceMonitor", "PrometheusRule")]
    out = cluster.kubectl("apply", "--server-side", "--force-conflicts", "--dry-run=server", "-f", "-",
                          input=yaml.safe_dump_all(rest), check=False, timeout=120)
    assert out.returncode == 0, out.stderr
    assert f"configmap/tg-trainguard-grafana-dashboard serverside-applied (server dry run)" in out.stdout, out.stdout


def test_the_dashboard_goes_to_the_namespace_the_sidecar_searches(cluster: Any) -> None:
    docs = template(cluster, {"monitoring": {"grafanaDashboard": {"enabled": True, "namespace": "monitoring"}}})
    (dashboard,) = [d for d in docs if d["kind"] == "ConfigMap" and "grafana_dashboard" in d["metadata"]["labels"]]
    assert dashboard["metadata"]["namespace"] == "monitoring"
    assert not objects(docs, "PrometheusRule")


@pytest.mark.parametrize("values, message", [
    ({"monitoring": {"grafanaDashboard": {"enabeld": True}}},
     "at '/monitoring/grafanaDashboard': additional properties 'enabeld' not allowed"),
    ({"monitoring": {"prometheusRule": {"enabled": "yes"}}}, "at '/monitoring/prometheusRule/enabled': got string"),
    ({"monitoring": {"grafanaDashboard": {"namespace": "Monitoring"}}}, "at '/monitoring/grafanaDashboard/namespace'"),
    ({"monitoring": {"alertmanager": {}}}, "at '/monitoring': additional properties 'alertmanager' not allowed"),
], ids=["typo", "wrong-type", "bad-namespace", "unknown-block"])
def test_bad_monitoring_values_fail_template_naming_the_value(cluster: Any, values: dict, message: str) -> None:
    proc = helm_run(cluster, "template", "tg", str(CHART), "-f", "-", values=values)
    assert proc.returncode != 0 and message in proc.stderr, proc.stderr
