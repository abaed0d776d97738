"""Fixtures for ``tests/security/``: each attack is run the way a namespace user would run it.

A *namespace user* is a ServiceAccount with the rights a team typically gets in its own namespace: TrainJobs,
TrainingRuntimes, DatasetCaches, ConfigMaps and Secrets (every verb), and nothing on pods, JobSets, namespaces or
anything cluster-scoped. ``namespace_user.kubectl(...)`` runs the pinned kubectl with that user's token, so an
attack succeeds or fails exactly as it would for that user (RBAC, schema, CEL and trainguard's webhooks all apply).

The webhook fixtures of ``tests/integration`` (``webhook_server``, ``admission``, ``start_webhook``, ``register``)
are re-exported here, so a security test registers the real ``trainguard webhook`` the same way.
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

import pytest
import yaml

from tests.integration.conftest import (  # noqa: F401  (fixtures, re-exported for tests/security)
    SCOPE_LABEL,
    Registered,
    WebhookProcess,
    admission,
    no_leaked_cluster_scoped_objects,
    register,
    start_webhook,
    unregister,
    webhook_server,
)

NAMESPACE_USER_RULES: list[dict[str, Any]] = [
    {"apiGroups": ["trainer.kubeflow.org"], "resources": ["trainjobs", "trainingruntimes"], "verbs": ["*"]},
    {"apiGroups": ["trainguard.io"], "resources": ["datasetcaches"], "verbs": ["*"]},
    {"apiGroups": [""], "resources": ["configmaps", "secrets"], "verbs": ["*"]},
]


def kubeconfig_for_token(admin_kubeconfig: str, token: str, path: Path) -> str:
    """A kubeconfig that reaches the same apiserver as ``admin_kubeconfig`` but authenticates with ``token``."""
    admin = yaml.safe_load(Path(admin_kubeconfig).read_text())
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config",
        "clusters": [{"name": "local", "cluster": admin["clusters"][0]["cluster"]}],
        "users": [{"name": "user", "user": {"token": token}}],
        "contexts": [{"name": "user", "context": {"cluster": "local", "user": "user"}}],
        "current-context": "user",
    }))
    return str(path)


@dataclass
class NamespaceUser:
    namespace: str
    name: str  # the ServiceAccount's name
    kubeconfig: str
    bin_dir: Path

    @property
    def username(self) -> str:
        return f"system:serviceaccount:{self.namespace}:{self.name}"

    def kubectl(self, *args: str, input: str | None = None, check: bool = True,
                timeout: float = 60) -> subprocess.CompletedProcess[str]:
        """kubectl as this user, in its namespace unless ``args`` name another."""
        proc = subprocess.run(
            [str(self.bin_dir / "kubectl"), "--kubeconfig", self.kubeconfig, "-n", self.namespace, *args],
            input=input, capture_output=True, text=True, timeout=timeout,
        )
        if check and proc.returncode != 0:
            raise AssertionError(f"kubectl (as {self.username}) {' '.join(args)} failed ({proc.returncode}):\n{proc.stderr}")
        return proc

    def can_i(self, verb: str, resource: str, *extra: str) -> bool:
        return self.kubectl("auth", "can-i", verb, resource, *extra, check=False).stdout.strip() == "yes"


@pytest.fixture
def namespace_user(cluster: Any, namespace: str, tmp_path: Path) -> NamespaceUser:
    name = "team-member"
    role = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
            "metadata": {"name": name, "namespace": namespace}, "rules": NAMESPACE_USER_RULES}
    binding = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
               "metadata": {"name": name, "namespace": namespace},
               "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
               "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": namespace}]}
    sa = {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": name, "namespace": namespace}}
    cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump_all([sa, role, binding]))
    token = cluster.kubectl("create", "token", name, "-n", namespace, "--duration", "2h").stdout.strip()
    user = NamespaceUser(namespace, name, kubeconfig_for_token(cluster.kubeconfig, token, tmp_path / "user.kubeconfig"),
                         cluster.bin_dir)
    # The fixture is only useful if the user really is confined: check the boundary once, here.
    assert user.can_i("create", "trainjobs.trainer.kubeflow.org")
    assert not user.can_i("create", "pods")
    assert not user.can_i("create", "jobsets.jobset.x-k8s.io")
    assert not user.can_i("list", "secrets", "-n", "kube-system")
    return user
