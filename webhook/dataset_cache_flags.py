"""The flags that carry the cluster admin's DatasetCache source setting (``DatasetCacheSources``) into ``trainguard
webhook``, ``trainguard controller`` and ``trainguard render``: one spelling, one parser, so the three enforce the
same setting and the Helm chart passes the same arguments to the webhook and the controller.

A flag rather than a cluster-scoped object: the setting must be out of reach of namespace users, it changes as
rarely as the chart's values, and a flag needs no watch, no RBAC and no "what if the object is missing" answer.
"""

from __future__ import annotations

import argparse

from trainguard.webhook.policy.dataset_cache import DatasetCacheSources, UncleanPath, clean_host_path


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


def dataset_cache_sources(args: argparse.Namespace) -> DatasetCacheSources:
    return DatasetCacheSources.of(args.dataset_cache_allowed_host_paths, args.dataset_cache_allow_pvc)
