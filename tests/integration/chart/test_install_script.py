"""``hack/install.sh``, the install sequence ``hack/kind.sh up`` runs, against a private control plane (issue 25,
part 3): the JobSet CRDs by server-side apply, then the chart, which creates and owns trainguard's and Kubeflow
Trainer's CRDs. The order kind.sh used before (``kubectl apply --server-side -f crds/``, then ``helm install`` with
the chart's CRDs on) is the control: Helm refuses it with "invalid ownership metadata"."""

from __future__ import annotations

import os
import subprocess
from typing import Iterator

import pytest

from tests.conftest import REPO
from tests.integration.chart.chart_harness import CHART, ChartCluster, chart_control_plane

CRD_NAMES = sorted(".".join(reversed(p.stem.split("_", 1))) for p in (REPO / "crds").glob("*.yaml"))


@pytest.fixture
def chart_cluster() -> Iterator[ChartCluster]:
    with chart_control_plane() as c:
        yield c


def install(c: ChartCluster, *helm_args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "KUBECONFIG": c.kubeconfig, "TRAINGUARD_BIN_DIR": str(c.bin_dir)}
    return subprocess.run([str(REPO / "hack" / "install.sh"), *helm_args], capture_output=True, text=True, env=env,
                          timeout=300)


def test_the_install_script_installs_and_upgrades_where_applying_the_crds_first_fails(chart_cluster) -> None:
    c = chart_cluster
    # The old order: the CRDs applied by kubectl carry no Helm ownership, so the chart cannot take them over.
    c.kubectl("apply", "--server-side", "-f", str(REPO / "crds"), timeout=120)
    refused = c.helm("upgrade", "--install", "trainguard", str(CHART), "-n", "trainguard-system", "--create-namespace",
                     check=False)
    assert refused.returncode != 0 and "invalid ownership metadata" in refused.stderr, refused.stderr
    c.kubectl("delete", "-f", str(REPO / "crds"), "--wait=true", timeout=120)
    c.kubectl("delete", "namespace", "trainguard-system", "--wait=true", "--ignore-not-found", timeout=120)

    first = install(c)
    assert first.returncode == 0, first.stderr
    for name in CRD_NAMES:
        crd = c.get("crd", name)
        assert crd is not None, name
        assert crd["metadata"]["labels"].get("app.kubernetes.io/managed-by") == "Helm", name
        assert crd["metadata"]["annotations"].get("meta.helm.sh/release-name") == "trainguard", name
    assert c.get("crd", "jobsets.jobset.x-k8s.io") is not None, "the JobSet CRD comes first"
    assert c.get("deployment", "trainguard-webhook", "-n", "trainguard-system") is not None

    again = install(c, "--set", "webhook.replicas=1")  # what a second `hack/kind.sh up` does: an upgrade
    assert again.returncode == 0, again.stderr
    assert c.get("deployment", "trainguard-webhook", "-n", "trainguard-system")["spec"]["replicas"] == 1
