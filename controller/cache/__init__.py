"""The node-local dataset cache: the client training code imports, and the node agent.

What training code uses (standard library only; ``pip install --no-deps trainguard`` is enough in a training image)::

    from trainguard.cache import open_shard, open_shards, pin
    with open_shard("train/00042.bin") as shard:        # Shard: .view (read-only memoryview), .numpy(), .torch()
        ...
    for shard in open_shards(names):                     # batched: one round trip per 32 shards
        ...
    with pin(shard.view):                                # CUDA host registration for DMA (``pinning``)
        ...

Modules, one deployable each side:

* the client: ``client`` (``CacheClient``, ``open_shard``, ``open_shards``), ``pinning`` (``pin``, CUDA via ctypes);
* the node agent, ``trainguard cache-agent``: ``main`` (the command), ``agent`` (socket server, residency manager,
  probes and metrics), ``index``, ``pages`` (mmap/mincore), ``protocol`` (the wire format both sides speak),
  ``report`` (the annotations an agent writes on its own Pod). The agent imports neither pydantic nor
  ``trainguard.webhook`` (``tests/unit/test_layout.py``).

The control plane's side lives with the reconciler: the DaemonSet builder (``trainguard.controller.reconcile.
cache_daemonset``), the agents' ValidatingAdmissionPolicy (``cache_agent_policy``) and the JobSet wiring
(``trainguard.webhook.runtime.dataset_cache.wire_dataset_cache``).
"""

from trainguard.cache.client import CacheClient, CacheError, CacheUnavailable, Shard, open_shard, open_shards
from trainguard.cache.pinning import PinnedRange, PinningUnavailable, pin, unpin

__all__ = [
    "CacheClient",
    "CacheError",
    "CacheUnavailable",
    "PinnedRange",
    "PinningUnavailable",
    "Shard",
    "open_shard",
    "open_shards",
    "pin",
    "unpin",
]
