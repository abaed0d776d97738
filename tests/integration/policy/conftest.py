"""``kube``: kubectl helpers bound to the test's namespace, with the webhook registered (``admission``); deletes
the cluster-scoped objects (runtimes, policies) the test applied."""

from __future__ import annotations

from typing import Iterator

import pytest

from policy_cluster import Kube


@pytest.fixture
def kube(cluster, namespace: str, admission) -> Iterator[Kube]:
    k = Kube(cluster, namespace)
    try:
        yield k
    finally:
        k.delete_cluster_objects()
