"""What an agent reports about itself, on its own Pod: the annotations the reconciler sums into the DatasetCache's
status (``trainguard.controller.reconcile.cache_daemonset.compute_status``), and the patch that writes them.

Annotations rather than a scrape of ``/metrics``: the reconciler then needs only the pod list it already watches, no
network path to every node. The chart's ValidatingAdmissionPolicy (``cache_agent_policy``) lets an agent's token
write exactly these keys on the pod it is bound to.
"""

from __future__ import annotations

import asyncio
import os
from typing import Awaitable, Callable

ANNOTATION_BYTES_RESIDENT = "trainguard.io/cache-bytes-resident"  # decimal bytes of its shards resident (mincore)
ANNOTATION_WARM = "trainguard.io/cache-warm"  # "true" once its warm set was resident
ANNOTATION_SHARDS = "trainguard.io/cache-shards"  # shards indexed

Reporter = Callable[[int, int, bool], Awaitable[None]]


def report_annotations(bytes_resident: int, shards: int, warm: bool) -> dict[str, str]:
    return {
        ANNOTATION_BYTES_RESIDENT: str(bytes_resident),
        ANNOTATION_SHARDS: str(shards),
        ANNOTATION_WARM: "true" if warm else "false",
    }


def pod_reporter() -> Reporter:
    """Patch the report annotations onto this Pod (POD_NAME/POD_NAMESPACE from the downward API), with the
    in-cluster ServiceAccount token. The kubernetes client is imported here, so only ``--report-to-pod`` needs it."""
    from kubernetes import client, config

    name, namespace = os.environ.get("POD_NAME"), os.environ.get("POD_NAMESPACE")
    if not name or not namespace:
        raise RuntimeError("--report-to-pod needs POD_NAME and POD_NAMESPACE (downward API)")
    config.load_incluster_config()
    api = client.CoreV1Api()

    async def report(bytes_resident: int, shards: int, warm: bool) -> None:
        body = {"metadata": {"annotations": report_annotations(bytes_resident, shards, warm)}}
        await asyncio.to_thread(api.patch_namespaced_pod, name, namespace, body)

    return report
