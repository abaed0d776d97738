"""The flags that carry the cluster admin's DatasetCache settings (``DatasetCacheSources``: where caches may read
from; ``DatasetCacheAgents``: what their agents may ask for) into ``trainguard webhook``, ``trainguard controller`` and
``trainguard render``: one spelling, one parser, so the three enforce the same setting and the Helm chart passes the
same arguments to the webhook and the controller.

The agent settings' lists are comma-separated values of one flag, which the chart always passes: an empty value
means none, so an admin's empty list is not mistaken for "the default" (names and label keys never hold a comma).

A flag rather than a cluster-scoped object: the setting must be out of reach of namespace users, it changes as
rarely as the chart's values, and a flag needs no watch, no RBAC and no "what if the object is missing" answer.
"""

from __future__ import annotations

import argparse

from trainguard.webhook.policy.dataset_cache import DatasetCacheSources, UncleanPath, clean_host_path
from trainguard.webhook.policy.dataset_cache_agents import (
    DEFAULT_MAX_MEMORY_BUDGET, DEFAULT_NODE_SELECTOR_KEYS, DatasetCacheAgents,
)


def _root(text: str) -> str:
    try:
        return clean_host_path(text)
    except UncleanPath as e:
        raise argparse.ArgumentTypeError(f"hostPath root {text!r} {e}") from e


def add_dataset_cache_source_flags(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("DatasetCache sources (set by the cluster admin)")
    group.add_argument(
        "--dataset-cache-allowed-host-path", dest="dataset_cache_allowed_host_paths", action="append", default=[],
        type=_root, metavar="ROOT",
        help="a node directory DatasetCache hostPath sources may be (or lie below), matched per path component: "
             "/data admits /data/x, not /database (repeatable; default none: every hostPath source is refused)")
    group.add_argument(
        "--dataset-cache-allow-pvc", action=argparse.BooleanOptionalAction, default=True,
        help="allow DatasetCache persistentVolumeClaim sources (default: allowed)")


def _names(text: str) -> tuple[str, ...]:
    return tuple(name.strip() for name in text.split(",") if name.strip())


def _selector(text: str) -> dict[str, str]:
    selector: dict[str, str] = {}
    for pair in _names(text):
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise argparse.ArgumentTypeError(f"required node selector {pair!r} must be KEY=VALUE")
        selector[key] = value
    return selector


def _budget(text: str) -> str:
    try:
        DatasetCacheAgents(max_memory_budget=text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from e
    return text


def add_dataset_cache_agent_flags(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("DatasetCache agents (set by the cluster admin)")
    group.add_argument(
        "--dataset-cache-allowed-priority-classes", type=_names, default=(), metavar="NAME,...",
        help="PriorityClasses a DatasetCache may give its agents (default none; system-* only if listed)")
    group.add_argument(
        "--dataset-cache-allowed-toleration-keys", type=_names, default=(), metavar="KEY,...",
        help="taint keys a DatasetCache's agents may tolerate (default none; a toleration without a key is never "
             "allowed; the agents always tolerate nvidia.com/gpu:NoSchedule)")
    group.add_argument(
        "--dataset-cache-allowed-node-selector-keys", type=_names, default=DEFAULT_NODE_SELECTOR_KEYS,
        metavar="KEY,...", help=f"node label keys a DatasetCache's nodeSelector may use (default: "
                                f"{','.join(DEFAULT_NODE_SELECTOR_KEYS)}; empty: none)")
    group.add_argument(
        "--dataset-cache-required-node-selector", type=_selector, default={}, metavar="KEY=VALUE,...",
        help="node labels every agent DaemonSet selects, whatever the DatasetCache says (default none)")
    group.add_argument(
        "--dataset-cache-max-memory-budget", type=_budget, default=DEFAULT_MAX_MEMORY_BUDGET, metavar="QUANTITY",
        help=f"the largest spec.memoryBudget a DatasetCache may ask for (default {DEFAULT_MAX_MEMORY_BUDGET})")


def add_dataset_cache_flags(parser: argparse.ArgumentParser) -> None:
    add_dataset_cache_source_flags(parser)
    add_dataset_cache_agent_flags(parser)


def dataset_cache_sources(args: argparse.Namespace) -> DatasetCacheSources:
    return DatasetCacheSources.of(args.dataset_cache_allowed_host_paths, args.dataset_cache_allow_pvc)


def dataset_cache_agents(args: argparse.Namespace) -> DatasetCacheAgents:
    return DatasetCacheAgents.of(
        priority_classes=args.dataset_cache_allowed_priority_classes,
        toleration_keys=args.dataset_cache_allowed_toleration_keys,
        node_selector_keys=args.dataset_cache_allowed_node_selector_keys,
        required_node_selector=args.dataset_cache_required_node_selector,
        max_memory_budget=args.dataset_cache_max_memory_budget)
