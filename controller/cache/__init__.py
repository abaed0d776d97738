"""The node-local dataset cache (issue 7).

Modules:

* ``daemonset``: pure builders the reconciler calls for each DatasetCache::

      build_daemonset(cache, *, image: str, sources: DatasetCacheSources, image_pull_policy="IfNotPresent",
                      report_to_pod=True) -> dict       # SourceNotAllowed unless the admin allows the source
      build_agent_rbac(cache) -> list[dict]          # ServiceAccount, Role, RoleBinding (apply before the DaemonSet)
      compute_status(cache, daemonset: dict | None, pods: list[dict], *, now: datetime,
                     previous: dict | None = None) -> dict   # {nodesDesired, nodesReady, bytesResident,
                                                             #  observedGeneration, conditions: [Ready]}
      selector_labels(cache_name) -> dict            # to list the agent pods
      agent_name(cache_name) -> str                  # name of the DaemonSet / ServiceAccount / Role

  ``cache`` is the DatasetCache as the API model or as its wire dict. All objects carry a controller
  ownerReference to the DatasetCache, so deleting the cache garbage-collects them. Raises
  ``DatasetCacheSpecError`` when the spec cannot be built.

* ``main``: ``trainguard cache-agent``, the agent (``agent``, ``index``, ``pages``, ``protocol``, ``metrics``).
* ``client``: what training code imports (standard library only): ``open_shard(name) -> Shard``,
  ``open_shards(names) -> Iterator[Shard]`` (batched: one round trip per 32 shards), ``pin``.

The JobSet side (mount the socket directory, set env) is ``trainguard.webhook.runtime.dataset_cache.wire_dataset_cache``.
"""
