"""The attacker every test in this folder plays: confined to its namespace, as the fixture promises.

If this fails, every other security test here proves less than it says (an attack 'blocked' for a user who could
not even try it, or 'possible' only for a user with more rights than a team member gets).
"""

from __future__ import annotations


def test_namespace_user_has_a_teams_rights_and_no_more(namespace_user) -> None:
    allowed = [("create", "trainjobs.trainer.kubeflow.org"), ("update", "trainingruntimes.trainer.kubeflow.org"),
               ("create", "datasetcaches.trainguard.io"), ("update", "configmaps"), ("create", "secrets")]
    denied = [("create", "pods"), ("create", "jobsets.jobset.x-k8s.io"), ("update", "trainjobs.trainer.kubeflow.org", "--subresource=status"),
              ("create", "clustertrainingruntimes.trainer.kubeflow.org"), ("create", "trainjobpolicies.trainguard.io"),
              ("patch", "namespaces"), ("create", "daemonsets.apps")]
    assert [a for a in allowed if not namespace_user.can_i(*a)] == []
    assert [d for d in denied if namespace_user.can_i(*d)] == []
    # Outside its own namespace it has nothing.
    assert not namespace_user.can_i("create", "trainjobs.trainer.kubeflow.org", "-n", "default")
