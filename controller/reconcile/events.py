"""Kubernetes Events (``events.k8s.io/v1``) about the objects the reconciler manages.

Events are best effort: failing to record one is logged, never fails a reconcile. A reconcile retried with
backoff would repeat the same Warning many times, so an identical (object, reason, message) is recorded at most
once per ``repeat_after`` seconds (client-go's recorder aggregates similar repeats the same way in spirit).
"""

from __future__ import annotations

import logging
import secrets
import time
from collections import OrderedDict
from datetime import datetime, timezone
from typing import Any, Callable, Mapping

from webhook.kube.client import KubeClient
from webhook.kube.resources import EVENTS

from controller.reconcile.leader import micro_time

log = logging.getLogger(__name__)

REPORTING_CONTROLLER = "trainguard.io/controller"
# events.k8s.io/v1 limits the note to 1 KiB.
MAX_NOTE = 1024


class EventRecorder:
    def __init__(
        self,
        kube: KubeClient,
        instance: str,
        *,
        repeat_after: float = 600.0,
        clock: Callable[[], float] = time.monotonic,
        remember: int = 4096,
    ) -> None:
        self._kube = kube
        self._instance = instance[:128]
        self._repeat_after = repeat_after
        self._clock = clock
        self._remember = remember
        self._recent: OrderedDict[tuple[str, str, str], float] = OrderedDict()

    async def record(self, regarding: Mapping[str, Any], type_: str, reason: str, note: str,
                     action: str = "Reconciling") -> None:
        meta = regarding.get("metadata") or {}
        key = (str(meta.get("uid") or meta.get("name")), reason, note)
        now = self._clock()
        seen = self._recent.get(key)
        if seen is not None and now - seen < self._repeat_after:
            return
        self._recent[key] = now
        self._recent.move_to_end(key)
        while len(self._recent) > self._remember:
            self._recent.popitem(last=False)
        namespace = meta.get("namespace") or "default"
        body = {
            "apiVersion": "events.k8s.io/v1",
            "kind": "Event",
            "metadata": {"name": f"{meta.get('name')}.{secrets.token_hex(8)}", "namespace": namespace},
            "eventTime": micro_time(datetime.now(timezone.utc)),
            "reportingController": REPORTING_CONTROLLER,
            "reportingInstance": self._instance,
            "action": action,
            "reason": reason,
            "type": type_,
            "note": note if len(note) <= MAX_NOTE else note[: MAX_NOTE - 4] + " ...",
            "regarding": {
                "apiVersion": regarding.get("apiVersion"),
                "kind": regarding.get("kind"),
                "name": meta.get("name"),
                "namespace": meta.get("namespace"),
                "uid": meta.get("uid"),
                "resourceVersion": meta.get("resourceVersion"),
            },
        }
        try:
            await self._kube.create(EVENTS, body, namespace)
        except Exception as err:  # best effort
            log.warning("could not record event %s/%s on %s: %s", type_, reason, meta.get("name"), err)
