"""SDK discovery: the chart's ``kubeflow-trainer-public`` ConfigMap, as Kubeflow Trainer v2.3's chart provides it.

- Rendered like upstream's (templates/manager/public-configmap.yaml and rbac/public_configmap_role*.yaml of the
  v2.3.0 chart): ConfigMap ``kubeflow-trainer-public`` in the release namespace with ``kubeflow_trainer_version``,
  a Role allowing get/list/watch on that one ConfigMap by name, bound to the group ``system:authenticated``. One
  deliberate difference: upstream writes its chart version there (``v2.3.0``); trainguard's chart version (0.1.0)
  says nothing about the API an SDK talks to, so the value is the Kubeflow Trainer version whose API trainguard
  serves, ``v2.3.0``.
- The Kubeflow SDK (``kubeflow`` 0.5, in .venv) constructs ``TrainerClient()`` as an ordinary authenticated user
  (a ServiceAccount with no other rights) and warns that the control plane is missing before the chart's objects
  exist, and not after; that user can read this ConfigMap and no other.
"""

from __future__ import annotations

import logging
import subprocess
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
import yaml

if TYPE_CHECKING:
    from tests.conftest import Cluster

from tests.integration.chart.chart_harness import CHART

PUBLIC = "kubeflow-trainer-public"
SDK_LOGGER = "kubeflow.trainer.backends.kubernetes.backend"
KUBE_VERSION = "1.35.4"


def render_public(cluster: Cluster, namespace: str) -> list[dict[str, Any]]:
    out = subprocess.run(
        [str(cluster.bin_dir / "helm"), "template", "tg", str(CHART), "--namespace", namespace,
         "--kube-version", KUBE_VERSION, "--show-only", "templates/public-configmap.yaml"],
        capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return [d for d in yaml.safe_load_all(out.stdout) if d]


def test_public_configmap_and_its_rbac_render_as_upstream(cluster: Cluster) -> None:
    docs = {d["kind"]: d for d in render_public(cluster, "tg-system")}
    assert set(docs) == {"ConfigMap", "Role", "RoleBinding"}
    for d in docs.values():
        assert d["metadata"]["name"] == PUBLIC and d["metadata"]["namespace"] == "tg-system"
    # The Kubeflow Trainer API version trainguard serves, in upstream's "v<chart version>" form.
    assert docs["ConfigMap"]["data"] == {"kubeflow_trainer_version": "v2.3.0"}
    assert docs["Role"]["rules"] == [{"apiGroups": [""], "resources": ["configmaps"], "resourceNames": [PUBLIC],
                                      "verbs": ["get", "list", "watch"]}]
    assert docs["RoleBinding"]["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                                              "name": PUBLIC}
    assert docs["RoleBinding"]["subjects"] == [{"kind": "Group", "apiGroup": "rbac.authorization.k8s.io",
                                                "name": "system:authenticated"}]


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


def test_trainer_client_sees_the_control_plane_once_the_chart_objects_exist(
        cluster: Cluster, namespace: str, tmp_path: Path, caplog: pytest.LogCaptureFixture,
        monkeypatch: pytest.MonkeyPatch) -> None:
    from tests.integration.chart.test_chart import kubeconfig_for_token

    # An ordinary authenticated user: a ServiceAccount of another namespace, bound to nothing.
    user_ns = f"{namespace[:50]}-u"
    cluster.kubectl("create", "namespace", user_ns)
    cluster.kubectl("create", "serviceaccount", "alice", "-n", user_ns)
    token = cluster.kubectl("create", "token", "alice", "-n", user_ns, "--duration", "1h").stdout.strip()
    kubeconfig = Path(kubeconfig_for_token(cluster, token, tmp_path / "alice.kubeconfig"))
    # The SDK looks in $KUBEFLOW_SYSTEM_NAMESPACE (default kubeflow-system): here, the release namespace.
    monkeypatch.setenv("KUBEFLOW_SYSTEM_NAMESPACE", namespace)

    before = construct(kubeconfig, user_ns, caplog)
    assert before and "Trainer control-plane version info is not available" in before[0], before

    docs = render_public(cluster, namespace)
    cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump_all(docs))
    try:
        assert construct(kubeconfig, user_ns, caplog) == []
        user = f"system:serviceaccount:{user_ns}:alice"
        for verb, what, want in [("get", f"configmap/{PUBLIC}", "yes"), ("watch", f"configmap/{PUBLIC}", "yes"),
                                 ("get", "configmap/other", "no"), ("update", f"configmap/{PUBLIC}", "no"),
                                 ("get", "secrets", "no")]:
            out = cluster.kubectl("auth", "can-i", verb, what, "-n", namespace, "--as", user, check=False)
            assert out.stdout.strip() == want, (verb, what, out.stdout, out.stderr)
    finally:
        cluster.kubectl("delete", "-f", "-", "--ignore-not-found", input=yaml.safe_dump_all(docs), check=False)
