"""Kubernetes Events about the objects the reconciler manages.

Events are best effort: failing to record one is logged, never fails a reconcile. A reconcile retried with
backoff would repeat the same Warning many times, so an identical (object, reason, message) is recorded at most
once per ``repeat_after`` seconds (client-go's recorder aggregates similar repeats the same way in spirit).

Each event carries both generations of fields: the events.k8s.io ones (``eventTime``, ``reportingController``,
``reportingInstance``, ``action``) and the core/v1 ones client-go's legacy recorder writes (``firstTimestamp``,
``lastTimestamp``, ``count``). The Kubeflow SDK's ``TrainerClient.get_job_events()`` reads core/v1 Events and drops
every one without ``firstTimestamp``, so with ``eventTime`` alone it shows none of trainguard's events. The
events.k8s.io/v1 API refuses the legacy fields on create ("needs to be unset"), the core/v1 API accepts both sets,
so events are created through core/v1; readers of either API see the same event (``note`` = ``message``,
``regarding`` = ``involvedObject``).
"""

from __future__ import annotations

import logging
import secrets
import time
from collections import OrderedDict
from datetime import datetime, timezone
from typing import Any, Callable, Mapping

from trainguard.webhook.api.apimachinery import format_micro_time, format_time
from trainguard.webhook.api.views import KubeObject
from trainguard.webhook.kube.client import KubeClient
from trainguard.webhook.kube.resources import Resource


log = logging.getLogger(__name__)

REPORTING_CONTROLLER = "trainguard.io/controller"
# core/v1 Events: the only API that takes the legacy timestamps (see the module docstring).
CORE_EVENTS = Resource("", "v1", "events", "Event")
# The apiserver limits the message of an event with eventTime to 1 KiB.
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
        obj = KubeObject(regarding)
        meta = obj.metadata
        key = (meta.uid or meta.name, reason, note)
        now = self._clock()
        seen = self._recent.get(key)
        if seen is not None and now - seen < self._repeat_after:
            return
        self._recent[key] = now
        self._recent.move_to_end(key)
        while len(self._recent) > self._remember:
            self._recent.popitem(last=False)
        namespace = meta.namespace or "default"
        moment = datetime.now(timezone.utc)
        body = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": f"{meta.name}.{secrets.token_hex(8)}", "namespace": namespace},
            "eventTime": format_micro_time(moment),
            # What core/v1 readers (kubectl's legacy view, the Kubeflow SDK) sort and filter on.
            "firstTimestamp": format_time(moment),  # whole seconds, as core/v1 Events carry them
            "lastTimestamp": format_time(moment),
            "count": 1,
            "reportingComponent": REPORTING_CONTROLLER,
            "reportingInstance": self._instance,
            "action": action,
            "reason": reason,
            "type": type_,
            "message": note if len(note) <= MAX_NOTE else note[: MAX_NOTE - 4] + " ...",
            # "" for a field the object lacks: the API reads null and "" alike (plain strings in ObjectReference).
            "involvedObject": {
                "apiVersion": obj.api_version,
                "kind": obj.kind,
                "name": meta.name,
                "namespace": meta.namespace,
                "uid": meta.uid,
                "resourceVersion": meta.resource_version,
            },
        }
        try:
            await self._kube.create(CORE_EVENTS, body, namespace)
        except Exception as err:  # best effort
            log.warning("could not record event %s/%s on %s: %s", type_, reason, meta.name, err)
