"""SDK discovery: the chart's ``kubeflow-trainer-public`` ConfigMap, as Kubeflow Trainer v2.3's chart provides it.

- Rendered like upstream's (templates/manager/public-configmap.yaml and rbac/public_configmap_role*.yaml of the
  v2.3.0 chart): ConfigMap ``kubeflow-trainer-public`` with ``kubeflow_trainer_version``, a Role allowing
  get/list/watch on that one ConfigMap by name, bound to the group ``system:authenticated``, all three in one
  namespace. Two deliberate differences: upstream writes its chart version there (``v2.3.0``); trainguard's chart
  version (0.1.0) says nothing about the API an SDK talks to, so the value is the Kubeflow Trainer version whose API
  trainguard serves, ``v2.3.0``. And upstream writes them into its release namespace (kubeflow-system by
  convention); trainguard writes them into ``sdkDiscovery.namespace``, default ``kubeflow-system``, where the SDK
  looks when ``KUBEFLOW_SYSTEM_NAMESPACE`` is unset, whatever the release namespace, with that Namespace (kept by
  ``helm uninstall``) unless it is the release namespace or ``createNamespace`` is false; ``enabled: false``
  renders none of it.
- With the real helm against a private control plane: a default install into ``trainguard-system``, and the Kubeflow
  SDK (``kubeflow`` 0.5, in .venv) constructs ``TrainerClient()`` with no ``KUBEFLOW_SYSTEM_NAMESPACE`` as an
  ordinary authenticated user (a ServiceAccount with no other rights) without the missing-control-plane warning;
  that user can read this ConfigMap and no other. ``helm uninstall`` removes the ConfigMap and keeps the Namespace
  (others' things may live in it); a reinstall adopts it. A second release that would write the same ConfigMap (as
  upstream Kubeflow Trainer's chart does in kubeflow-system) fails with Helm's ownership error, and installs with
  ``sdkDiscovery.enabled=false``, leaving the first one's ConfigMap alone.
- A custom ``sdkDiscovery.namespace``: the SDK finds it with ``KUBEFLOW_SYSTEM_NAMESPACE`` set to that namespace,
  warns before the chart's objects exist and not after.
"""

from __future__ import annotations

import logging
import subprocess
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterator

import pytest
import yaml

if TYPE_CHECKING:
    from tests.conftest import Cluster

from tests.integration.chart.chart_harness import CHART, ChartCluster, chart_control_plane

PUBLIC = "kubeflow-trainer-public"
SDK_LOGGER = "kubeflow.trainer.backends.kubernetes.backend"
KUBE_VERSION = "1.35.4"
SDK_DEFAULT = "kubeflow-system"  # the SDK's namespace when KUBEFLOW_SYSTEM_NAMESPACE is unset
KEEP = {"helm.sh/resource-policy": "keep"}


def render_discovery(cluster: Cluster, namespace: str, *sets: str) -> list[dict[str, Any]]:
    """The SDK discovery objects of ``helm template`` (the whole chart but its CRDs, so that a value that renders
    nothing is seen as nothing): the public ConfigMap, its Role and RoleBinding, and any Namespace."""
    args = [str(cluster.bin_dir / "helm"), "template", "tg", str(CHART), "--namespace", namespace,
            "--kube-version", KUBE_VERSION, "--set", "crds.enabled=false"]
    for s in sets:
        args += ["--set", s]
    out = subprocess.run(args, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    docs = [d for d in yaml.load_all(out.stdout, Loader=yaml.CSafeLoader) if d]
    return [d for d in docs if d["kind"] == "Namespace" or d["metadata"]["name"] == PUBLIC]


def by_kind(docs: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    out = {d["kind"]: d for d in docs}
    assert len(out) == len(docs), [d["kind"] for d in docs]
    return out


def test_public_configmap_and_its_rbac_render_as_upstream_in_the_sdks_default_namespace(cluster: Cluster) -> None:
    docs = by_kind(render_discovery(cluster, "trainguard-system"))
    assert set(docs) == {"Namespace", "ConfigMap", "Role", "RoleBinding"}
    # The Namespace the SDK reads without KUBEFLOW_SYSTEM_NAMESPACE, kept by helm uninstall.
    assert docs["Namespace"]["metadata"]["name"] == SDK_DEFAULT
    assert docs["Namespace"]["metadata"]["annotations"] == KEEP
    for kind in ("ConfigMap", "Role", "RoleBinding"):
        assert docs[kind]["metadata"]["name"] == PUBLIC and docs[kind]["metadata"]["namespace"] == SDK_DEFAULT
    # The Kubeflow Trainer API version trainguard serves, in upstream's "v<chart version>" form.
    assert docs["ConfigMap"]["data"] == {"kubeflow_trainer_version": "v2.3.0"}
    assert docs["Role"]["rules"] == [{"apiGroups": [""], "resources": ["configmaps"], "resourceNames": [PUBLIC],
                                      "verbs": ["get", "list", "watch"]}]
    assert docs["RoleBinding"]["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                                              "name": PUBLIC}
    assert docs["RoleBinding"]["subjects"] == [{"kind": "Group", "apiGroup": "rbac.authorization.k8s.io",
                                                "name": "system:authenticated"}]


@pytest.mark.parametrize("sets, namespace, kinds", [
    pytest.param(["sdkDiscovery.namespace=ml-platform"], "ml-platform",
                 {"Namespace", "ConfigMap", "Role", "RoleBinding"}, id="other-namespace"),
    pytest.param(["sdkDiscovery.namespace=tg-system"], "tg-system", {"ConfigMap", "Role", "RoleBinding"},
                 id="release-namespace-not-created-again"),
    pytest.param(["sdkDiscovery.createNamespace=false"], SDK_DEFAULT, {"ConfigMap", "Role", "RoleBinding"},
                 id="namespace-exists"),
    pytest.param(["sdkDiscovery.enabled=false"], None, set(), id="upstream-owns-it"),
])
def test_sdk_discovery_values_choose_the_namespace_and_what_is_written(
        cluster: Cluster, sets: list[str], namespace: str | None, kinds: set[str]) -> None:
    docs = by_kind(render_discovery(cluster, "tg-system", *sets))
    assert set(docs) == kinds
    for kind, d in docs.items():
        where = d["metadata"]["name"] if kind == "Namespace" else d["metadata"]["namespace"]
        assert where == namespace, (kind, d["metadata"])


def test_a_bad_sdk_discovery_namespace_is_refused_naming_the_value(cluster: Cluster) -> None:
    out = subprocess.run([str(cluster.bin_dir / "helm"), "template", "tg", str(CHART), "--namespace", "tg-system",
                          "--set", "sdkDiscovery.namespace=Kubeflow_System"], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode != 0 and "/sdkDiscovery/namespace" in out.stderr, out.stderr


def sdk_client(kubeconfig: Path, namespace: str) -> None:
    from kubeflow.common.types import KubernetesBackendConfig
    from kubeflow.trainer import TrainerClient

    TrainerClient(KubernetesBackendConfig(namespace=namespace, config_file=str(kubeconfig)))


def construct(kubeconfig: Path, namespace: str, caplog: pytest.LogCaptureFixture) -> list[str]:
    """What constructing a TrainerClient says about the control plane: SDK log warnings and Python warnings."""
    caplog.clear()
    with warnings.catch_warnings(record=True) as caught, caplog.at_level(logging.WARNING, logger=SDK_LOGGER):
        warnings.simplefilter("always")
        sdk_client(kubeconfig, namespace)
    said = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    said += [str(w.message) for w in caught]
    return [s for s in said if "control-plane" in s or PUBLIC in s]


def can_i(cluster: Cluster, user: str, namespace: str, verb: str, what: str) -> str:
    out = cluster.kubectl("auth", "can-i", verb, what, "-n", namespace, "--as", user, check=False)
    return out.stdout.strip()


def assert_reads_only_the_public_configmap(cluster: Cluster, user: str, namespace: str) -> None:
    for verb, what, want in [("get", f"configmap/{PUBLIC}", "yes"), ("watch", f"configmap/{PUBLIC}", "yes"),
                             ("get", "configmap/other", "no"), ("update", f"configmap/{PUBLIC}", "no"),
                             ("get", "secrets", "no")]:
        assert can_i(cluster, user, namespace, verb, what) == want, (verb, what, namespace)


@pytest.fixture
def chart_cluster() -> Iterator[ChartCluster]:
    with chart_control_plane() as c:
        yield c


def test_default_install_is_found_by_the_sdk_with_no_environment_variable(
        chart_cluster: ChartCluster, tmp_path: Path, caplog: pytest.LogCaptureFixture,
        monkeypatch: pytest.MonkeyPatch) -> None:
    c = chart_cluster
    monkeypatch.delenv("KUBEFLOW_SYSTEM_NAMESPACE", raising=False)
    # An ordinary authenticated user: a ServiceAccount of a user namespace, bound to nothing.
    c.kubectl("create", "namespace", "team-a")
    c.kubectl("create", "serviceaccount", "alice", "-n", "team-a")
    kubeconfig = c.kubeconfig_for(c.token("alice", "team-a"), tmp_path / "alice.kubeconfig")
    user = "system:serviceaccount:team-a:alice"
    before = construct(kubeconfig, "team-a", caplog)
    assert before and "Trainer control-plane version info is not available" in before[0], before

    # The common install: release namespace trainguard-system, default values (no webhook pod runs here, and none
    # is needed: a default install writes no TrainJob, policy or runtime).
    c.helm("install", "trainguard", str(CHART), "-n", "trainguard-system", "--create-namespace")
    assert construct(kubeconfig, "team-a", caplog) == []
    assert_reads_only_the_public_configmap(c, user, SDK_DEFAULT)
    namespace = c.get("namespace", SDK_DEFAULT)
    assert namespace is not None and namespace["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep"

    # Another release writing the same ConfigMap (as upstream Kubeflow Trainer's chart does in kubeflow-system) is
    # refused by Helm, not silently taken over; with sdkDiscovery.enabled=false it installs and leaves it alone.
    second = ["-n", "other-system", "--create-namespace", "--set", "crds.enabled=false"]
    refused = c.helm("install", "other", str(CHART), *second, check=False)
    assert refused.returncode != 0 and "exists and cannot be imported into the current release" in refused.stderr, \
        refused.stderr
    c.helm("install", "other-sdk-off", str(CHART), *second, "--set", "sdkDiscovery.enabled=false")
    public = c.get("configmap", PUBLIC, "-n", SDK_DEFAULT)
    assert public is not None and public["metadata"]["annotations"]["meta.helm.sh/release-name"] == "trainguard"

    # helm uninstall: the ConfigMap goes (the SDK warns again), the Namespace and whatever else is in it stay.
    c.kubectl("create", "configmap", "someone-elses", "-n", SDK_DEFAULT)
    c.helm("uninstall", "trainguard", "-n", "trainguard-system")
    assert c.get("configmap", PUBLIC, "-n", SDK_DEFAULT) is None
    kept = c.get("namespace", SDK_DEFAULT)
    assert kept is not None and "deletionTimestamp" not in kept["metadata"]
    assert c.get("configmap", "someone-elses", "-n", SDK_DEFAULT) is not None
    assert construct(kubeconfig, "team-a", caplog) != []
    # A reinstall of the release adopts the Namespace it kept.
    c.helm("install", "trainguard", str(CHART), "-n", "trainguard-system", "--set", "crds.enabled=false")
    assert construct(kubeconfig, "team-a", caplog) == []


def test_a_custom_namespace_is_found_by_the_sdk_with_the_environment_variable(
        cluster: Cluster, namespace: str, tmp_path: Path, caplog: pytest.LogCaptureFixture,
        monkeypatch: pytest.MonkeyPatch) -> None:
    from tests.integration.chart.test_chart import kubeconfig_for_token

    # An ordinary authenticated user: a ServiceAccount of another namespace, bound to nothing.
    user_ns = f"{namespace[:50]}-u"
    cluster.kubectl("create", "namespace", user_ns)
    cluster.kubectl("create", "serviceaccount", "alice", "-n", user_ns)
    token = cluster.kubectl("create", "token", "alice", "-n", user_ns, "--duration", "1h").stdout.strip()
    kubeconfig = Path(kubeconfig_for_token(cluster, token, tmp_path / "alice.kubeconfig"))
    monkeypatch.setenv("KUBEFLOW_SYSTEM_NAMESPACE", namespace)

    before = construct(kubeconfig, user_ns, caplog)
    assert before and "Trainer control-plane version info is not available" in before[0], before

    # The test's namespace exists already: the chart writes no Namespace for it.
    docs = render_discovery(cluster, "trainguard-system", f"sdkDiscovery.namespace={namespace}",
                            "sdkDiscovery.createNamespace=false")
    assert {d["kind"] for d in docs} == {"ConfigMap", "Role", "RoleBinding"}
    cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump_all(docs))
    try:
        assert construct(kubeconfig, user_ns, caplog) == []
        assert_reads_only_the_public_configmap(cluster, f"system:serviceaccount:{user_ns}:alice", namespace)
    finally:
        cluster.kubectl("delete", "-f", "-", "--ignore-not-found", input=yaml.safe_dump_all(docs), check=False)
