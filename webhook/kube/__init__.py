"""Shared Kubernetes I/O for the webhook and the reconciler: client, watch-backed caches, cluster snapshot.

Public API (import from the submodules; everything here is asyncio, one event loop per process)::

    from trainguard.webhook.kube.config import load_config, config_from_client_configuration, ClusterConfig
    from trainguard.webhook.kube.client import KubeClient, WatchEvent
    from trainguard.webhook.kube.errors import ApiError, NotFound, Conflict, AlreadyExists, Gone, Invalid
    from trainguard.webhook.kube.resources import Resource, TRAINJOBS, JOBSETS, SECRETS, ...  # the types we use
    from trainguard.webhook.kube.resources import resource_for   # a built object's (apiVersion, kind) -> Resource
    from trainguard.webhook.kube.informer import Informer, CacheEvent, Backoff, object_key
    from trainguard.webhook.kube.snapshot import ClusterCaches

Client (objects are plain JSON dicts; every non-2xx raises an ``ApiError`` subclass with the Status message)::

    async with KubeClient(load_config(kubeconfig_path)) as kube:      # None: $KUBECONFIG / in-cluster / ~/.kube
        obj = await kube.get(TRAINJOBS, "name", "ns")                  # NotFound on 404
        items, rv = await kube.list_all(JOBSETS, "ns", label_selector="a=b")
        await kube.create(SECRETS, secret_dict)                        # AlreadyExists (a Conflict) on 409
        await kube.replace(SECRETS, obj_with_resource_version)         # Conflict on a stale resourceVersion
        await kube.apply(JOBSETS, desired, field_manager="trainguard", force=True)   # server-side apply
        await kube.merge_patch(TRAINJOBS, "name", {"spec": {...}}, "ns")
        await kube.patch_status(TRAINJOBS, "name", {"conditions": [...]}, "ns", field_manager="trainguard")
        await kube.delete(JOBSETS, "name", "ns")
        async for ev in kube.watch(JOBSETS, "ns", resource_version=rv):  # ev.type, ev.object; Gone on 410
            ...

Informer (one resource type; ``namespace=None`` means all namespaces)::

    inf = Informer(kube, JOBSETS, label_selector="trainer.kubeflow.org/trainjob-name")
    inf.add_handler(lambda ev: queue.add(object_key(ev.obj)))  # CacheEvent(type, obj, old); sync, must not block
    inf.start()                     # background task: list -> watch -> (410: relist) -> (error: backoff)
    await inf.synced.wait()         # set after the first successful list
    inf.get("name", "ns")           # cached dict or None; never touches the network
    await inf.stop()

Handlers see ADDED / MODIFIED (with ``old``) / DELETED; after a relist only the differences are emitted, and a
handler added late first receives ADDED for everything already cached.

Cluster snapshot for admission (the ``ClusterSnapshot`` fields of ``trainguard.webhook.policy.verdict``)::

    caches = ClusterCaches(kube, ClusterSnapshot); caches.start(); await caches.wait_synced()
    snapshot = caches.snapshot()    # cheap; rebuilt only for caches that changed
    caches.synced, caches.sync_state()   # readiness and metrics
"""
