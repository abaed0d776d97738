"""The chart's optional NetworkPolicy and the webhook's connection flags (issue 10 item 5), with the real helm and
apiserver: off by default; when on, ingress reaches the webhook pods only on the webhook port from the apiserver
peers and on the health/metrics port from the scraper peers, both ports being the Deployment's own; the apiserver
accepts it; the connection-limit values reach the container as flags the real ``trainguard webhook`` parser takes.

(Kept apart from ``test_chart.py``, which other work of issue 10 edits at the same time; it reuses its helpers.)
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

import yaml

from tests.integration.chart.test_chart import render

if TYPE_CHECKING:
    from tests.conftest import Cluster

ENABLED = [
    "webhook.networkPolicy.enabled=true",
    "webhook.networkPolicy.apiserverPeers[0].ipBlock.cidr=10.0.0.0/28",
    "webhook.networkPolicy.apiserverPeers[1].namespaceSelector.matchLabels.tier=control-plane",
    "webhook.networkPolicy.metricsPeers[0].namespaceSelector.matchLabels.team=monitoring",
    "webhook.networkPolicy.metricsPeers[0].podSelector.matchLabels.app=prometheus",
]


def _one(docs: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    found = [d for d in docs if d["kind"] == kind and d["metadata"]["name"] == name]
    assert len(found) == 1, f"{kind}/{name}: {len(found)} found"
    return found[0]


def test_no_network_policy_by_default(cluster: Cluster) -> None:
    assert not [d for d in render(cluster, "tg", "tg-system") if d["kind"] == "NetworkPolicy"]


def test_network_policy_admits_only_the_configured_peers_on_the_webhook_ports(cluster: Cluster) -> None:
    docs = render(cluster, "tg", "tg-system", *ENABLED, "webhook.port=9444", "webhook.healthPort=8082")
    policy = _one(docs, "NetworkPolicy", "tg-trainguard-webhook")["spec"]
    deployment = _one(docs, "Deployment", "tg-trainguard-webhook")
    pod_labels = deployment["spec"]["template"]["metadata"]["labels"]
    # It selects exactly the webhook pods (not the controller's).
    assert policy["podSelector"]["matchLabels"].items() <= pod_labels.items()
    controller = _one(docs, "Deployment", "tg-trainguard-controller")["spec"]["template"]["metadata"]["labels"]
    assert not policy["podSelector"]["matchLabels"].items() <= controller.items()
    assert policy["policyTypes"] == ["Ingress"]
    ports = {p["name"]: p["containerPort"] for p in deployment["spec"]["template"]["spec"]["containers"][0]["ports"]}
    webhook_rule, health_rule = policy["ingress"]
    assert webhook_rule["ports"] == [{"protocol": "TCP", "port": ports["https"]}] and ports["https"] == 9444
    assert webhook_rule["from"] == [{"ipBlock": {"cidr": "10.0.0.0/28"}},
                                    {"namespaceSelector": {"matchLabels": {"tier": "control-plane"}}}]
    assert health_rule["ports"] == [{"protocol": "TCP", "port": ports["health"]}] and ports["health"] == 8082
    assert health_rule["from"] == [{"namespaceSelector": {"matchLabels": {"team": "monitoring"}},
                                    "podSelector": {"matchLabels": {"app": "prometheus"}}}]


def test_network_policy_is_accepted_by_the_apiserver(cluster: Cluster, namespace: str) -> None:
    docs = [d for d in render(cluster, "tg", namespace, *ENABLED) if d["kind"] == "NetworkPolicy"]
    out = cluster.kubectl("apply", "--dry-run=server", "-f", "-", input=yaml.safe_dump_all(docs))
    assert "networkpolicy.networking.k8s.io/tg-trainguard-webhook created (server dry run)" in out.stdout


def test_connection_limits_reach_the_webhook_as_flags_it_accepts(cluster: Cluster) -> None:
    from trainguard.webhook.admission.main import configure

    sets = ["webhook.maxConnections=300", "webhook.tlsHandshakeTimeout=3", "webhook.headerTimeout=7",
            "webhook.readTimeout=4", "webhook.idleTimeout=100", "webhook.bodyBudgetBytes=67108864",
            "webhook.policyTimeout=2", "webhook.policyWorkers=6"]
    deployment = _one(render(cluster, "tg", "tg-system", *sets), "Deployment", "tg-trainguard-webhook")
    args = deployment["spec"]["template"]["spec"]["containers"][0]["args"]
    assert args[0] == "webhook"
    parser = argparse.ArgumentParser()
    configure(parser)
    parsed = parser.parse_args([a.replace("$(POD_NAMESPACE)", "tg-system") for a in args[1:]])
    assert (parsed.max_connections, parsed.tls_handshake_timeout, parsed.header_timeout, parsed.read_timeout,
            parsed.idle_timeout, parsed.body_budget_bytes, parsed.policy_timeout, parsed.policy_workers) == (
        300, 3.0, 7.0, 4.0, 100.0, 64 * 1024 * 1024, 2.0, 6)
    defaults = _one(render(cluster, "tg", "tg-system"), "Deployment", "tg-trainguard-webhook")
    parsed = parser.parse_args([a.replace("$(POD_NAMESPACE)", "tg-system")
                                for a in defaults["spec"]["template"]["spec"]["containers"][0]["args"][1:]])
    assert (parsed.max_connections, parsed.header_timeout, parsed.body_budget_bytes, parsed.policy_timeout) == (
        1024, 10.0, 32 * 1024 * 1024, 3.0)


def test_multikueue_dispatchers_reach_the_webhook_as_flags_it_accepts(cluster: Cluster) -> None:
    """A MultiKueue worker's webhook must know the manager's Kueue identity; none by default (a user's origin label
    alone never switches the worker into keeping the manager's decisions)."""
    from trainguard.webhook.admission.main import configure

    parser = argparse.ArgumentParser()
    configure(parser)

    def parsed(*sets: str) -> argparse.Namespace:
        deployment = _one(render(cluster, "tg", "tg-system", *sets), "Deployment", "tg-trainguard-webhook")
        args = deployment["spec"]["template"]["spec"]["containers"][0]["args"]
        return parser.parse_args([a.replace("$(POD_NAMESPACE)", "tg-system") for a in args[1:]])

    users = "system:serviceaccount:kueue-system:multikueue"
    assert parsed(f"webhook.multikueueDispatchers={{{users},mk-manager-2}}").multikueue_dispatcher == [
        users, "mk-manager-2"]
    assert parsed().multikueue_dispatcher == []


def test_webhook_pods_get_time_to_drain_before_the_kubelet_kills_them(cluster: Cluster) -> None:
    """After SIGTERM a replica serves for --shutdown-delay and then waits up to idle + read timeout for the apiserver
    to close its kept-alive connections (closing one from this side can lose a review); a kill before that ends
    would close them anyway."""
    from trainguard.webhook.admission.main import configure

    parser = argparse.ArgumentParser()
    configure(parser)
    for sets in ([], ["webhook.idleTimeout=300", "webhook.readTimeout=30"]):
        deployment = _one(render(cluster, "tg", "tg-system", *sets), "Deployment", "tg-trainguard-webhook")
        pod = deployment["spec"]["template"]["spec"]
        args = parser.parse_args([a.replace("$(POD_NAMESPACE)", "tg-system") for a in pod["containers"][0]["args"][1:]])
        assert args.shutdown_delay > 0
        assert pod["terminationGracePeriodSeconds"] > args.shutdown_delay + args.idle_timeout + args.read_timeout
