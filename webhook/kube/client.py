"""A small asyncio Kubernetes client on aiohttp: the verbs trainguard uses and nothing else.

Objects are plain JSON dicts in and out (the typed models live in ``trainguard.webhook.api``; this layer does not care what
it carries). Every non-2xx answer becomes an ``ApiError`` subclass carrying the apiserver's Status message.
Watches are async iterators of ``WatchEvent``; an ERROR event inside the stream is raised as the same exceptions
(410 Gone being the one that matters: the caller must relist).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any, AsyncIterator, Mapping

import aiohttp

from trainguard.webhook.api.views import KubeObject, ObjectList
from trainguard.webhook.kube.config import ClusterConfig
from trainguard.webhook.kube.errors import ApiError, error_from_status
from trainguard.webhook.kube.resources import Resource

Object = dict[str, Any]

APPLY_PATCH = "application/apply-patch+yaml"
MERGE_PATCH = "application/merge-patch+json"
JSON_PATCH = "application/json-patch+json"


@dataclass(frozen=True)
class WatchEvent:
    type: str  # ADDED, MODIFIED, DELETED, BOOKMARK
    object: Object


# A server-side apply body is YAML. JSON is YAML except for one thing: json.dumps writes a character beyond the BMP
# (the emoji in the scripts upstream's Flux runtime ships) as a UTF-16 surrogate pair, which YAML rejects ("found
# invalid Unicode character escape code"); YAML's own escape for it is \UXXXXXXXX. An even run of backslashes before
# the \u means the pair is an escape, not text.
_SURROGATE_PAIR = re.compile(r"(?<!\\)((?:\\\\)*)\\u(d[89ab][0-9a-f]{2})\\u(d[c-f][0-9a-f]{2})")


def apply_body(obj: Mapping[str, Any]) -> bytes:
    """``obj`` as an apply-patch+yaml body: JSON, with astral characters escaped the YAML way."""

    def astral(m: re.Match[str]) -> str:
        code = 0x10000 + ((int(m.group(2), 16) - 0xD800) << 10) + (int(m.group(3), 16) - 0xDC00)
        return f"{m.group(1)}\\U{code:08x}"

    return _SURROGATE_PAIR.sub(astral, json.dumps(obj)).encode()


class KubeClient:
    """One aiohttp session against one apiserver; use as ``async with KubeClient(config) as kube``."""

    def __init__(self, config: ClusterConfig, *, request_timeout: float = 30.0, user_agent: str = "trainguard") -> None:
        self.config = config
        self._request_timeout = request_timeout
        self._user_agent = user_agent
        self._session: aiohttp.ClientSession | None = None

    async def __aenter__(self) -> "KubeClient":
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    def _ensure_session(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(ssl=self.config.ssl_context, limit=64),
                headers={"User-Agent": self._user_agent, "Accept": "application/json"},
            )
        return self._session

    def _headers(self, content_type: str | None = None) -> dict[str, str]:
        headers: dict[str, str] = {}
        auth = self.config.authorization()
        if auth:
            headers["Authorization"] = auth
        if content_type:
            headers["Content-Type"] = content_type
        return headers

    async def request(
        self,
        method: str,
        path: str,
        *,
        params: Mapping[str, str] | None = None,
        body: Any = None,
        content_type: str = "application/json",
        timeout: float | None = None,
    ) -> Any:
        """Send one request and return the decoded JSON body; raise ``ApiError`` (or a subclass) on non-2xx."""
        data: bytes | None = None
        if body is not None:
            data = body if isinstance(body, bytes) else json.dumps(body).encode()
        session = self._ensure_session()
        async with session.request(
            method,
            self.config.server + path,
            params=dict(params or {}),
            data=data,
            headers=self._headers(content_type if data is not None else None),
            timeout=aiohttp.ClientTimeout(total=timeout or self._request_timeout),
        ) as resp:
            text = await resp.text()
            decoded: Any = text
            if text and resp.content_type == "application/json":
                try:
                    decoded = json.loads(text)
                except ValueError:
                    decoded = text
            if resp.status >= 300:
                raise error_from_status(resp.status, decoded)
            return decoded

    # ---- verbs -------------------------------------------------------------------------------------------

    async def get(self, resource: Resource, name: str, namespace: str | None = None, subresource: str | None = None) -> Object:
        return await self.request("GET", resource.path(namespace, name, subresource))

    async def list(
        self,
        resource: Resource,
        namespace: str | None = None,
        *,
        label_selector: str | None = None,
        field_selector: str | None = None,
        resource_version: str | None = None,
        limit: int | None = None,
        continue_token: str | None = None,
    ) -> Object:
        """One page of a list (the raw ``<Kind>List`` dict); ``list_all`` follows continue tokens."""
        params: dict[str, str] = {}
        if label_selector:
            params["labelSelector"] = label_selector
        if field_selector:
            params["fieldSelector"] = field_selector
        if resource_version is not None:
            params["resourceVersion"] = resource_version
        if limit:
            params["limit"] = str(limit)
        if continue_token:
            params["continue"] = continue_token
        return await self.request("GET", resource.path(namespace), params=params)

    async def list_all(
        self, resource: Resource, namespace: str | None = None, *, label_selector: str | None = None, page_size: int = 500
    ) -> tuple[list[Object], str]:
        """All items across pages and the list's resourceVersion (the point a following watch starts from)."""
        items: list[Object] = []
        token: str | None = None
        while True:
            page = ObjectList(await self.list(resource, namespace, label_selector=label_selector, limit=page_size,
                                              continue_token=token))
            items.extend(page.items)
            token = page.continue_token
            if not token:
                return items, page.resource_version

    async def create(self, resource: Resource, obj: Object, namespace: str | None = None, *, dry_run: bool = False) -> Object:
        ns = namespace if namespace is not None else KubeObject(obj).metadata.namespace
        return await self.request("POST", resource.path(ns), params=_dry(dry_run), body=obj)

    async def replace(self, resource: Resource, obj: Object, *, subresource: str | None = None) -> Object:
        """PUT the whole object; with ``metadata.resourceVersion`` set this is an optimistic-concurrency update."""
        meta = KubeObject(obj).metadata
        return await self.request("PUT", resource.path(meta.namespace, meta.name, subresource), body=obj)

    async def delete(
        self, resource: Resource, name: str, namespace: str | None = None, *, propagation: str | None = "Background"
    ) -> Object:
        body = {"kind": "DeleteOptions", "apiVersion": "v1"}
        if propagation:
            body["propagationPolicy"] = propagation
        return await self.request("DELETE", resource.path(namespace, name), body=body)

    async def apply(
        self,
        resource: Resource,
        obj: Object,
        *,
        field_manager: str,
        force: bool = True,
        subresource: str | None = None,
        dry_run: bool = False,
    ) -> Object:
        """Server-side apply: the object is the manager's full intent; fields it stops sending are removed."""
        meta = KubeObject(obj).metadata
        params = {"fieldManager": field_manager, **_dry(dry_run)}
        if force:
            params["force"] = "true"
        return await self.request(
            "PATCH",
            resource.path(meta.namespace, meta.name, subresource),
            params=params,
            body=apply_body(obj),
            content_type=APPLY_PATCH,
        )

    async def merge_patch(
        self,
        resource: Resource,
        name: str,
        patch: Object,
        namespace: str | None = None,
        *,
        subresource: str | None = None,
        field_manager: str | None = None,
    ) -> Object:
        params = {"fieldManager": field_manager} if field_manager else {}
        return await self.request(
            "PATCH", resource.path(namespace, name, subresource), params=params, body=patch, content_type=MERGE_PATCH
        )

    async def patch_status(
        self, resource: Resource, name: str, status: Object, namespace: str | None = None, *, field_manager: str | None = None
    ) -> Object:
        """JSON merge patch of the status subresource (spec changes in the same body would be ignored)."""
        return await self.merge_patch(
            resource, name, {"status": status}, namespace, subresource="status", field_manager=field_manager
        )

    async def json_patch(
        self, resource: Resource, name: str, ops: list[Object], namespace: str | None = None
    ) -> Object:
        return await self.request("PATCH", resource.path(namespace, name), body=ops, content_type=JSON_PATCH)

    async def watch(
        self,
        resource: Resource,
        namespace: str | None = None,
        *,
        resource_version: str | None = None,
        label_selector: str | None = None,
        allow_bookmarks: bool = True,
        timeout_seconds: int = 300,
    ) -> AsyncIterator[WatchEvent]:
        """Stream events after ``resource_version``; ends when the server closes the watch (its timeout).

        An ERROR event is raised as the matching ``ApiError`` (410 -> ``Gone``), so callers handle a stale
        resourceVersion the same way whether the apiserver said so in the status line or inside the stream.
        """
        params = {"watch": "true", "timeoutSeconds": str(timeout_seconds)}
        if resource_version:
            params["resourceVersion"] = resource_version
        if allow_bookmarks:
            params["allowWatchBookmarks"] = "true"
        if label_selector:
            params["labelSelector"] = label_selector
        session = self._ensure_session()
        async with session.get(
            self.config.server + resource.path(namespace),
            params=params,
            headers=self._headers(),
            # No total timeout (the server ends the watch); a silent connection is dead after this long.
            timeout=aiohttp.ClientTimeout(total=None, sock_connect=self._request_timeout, sock_read=timeout_seconds + 60),
        ) as resp:
            if resp.status >= 300:
                text = await resp.text()
                try:
                    body: Any = json.loads(text)
                except ValueError:
                    body = text
                raise error_from_status(resp.status, body)
            # Frames are newline-delimited JSON and can be as large as the biggest object; aiohttp's line reader
            # refuses lines over 128 KiB, so split the raw chunks ourselves.
            buffer = b""
            async for chunk in resp.content.iter_any():
                buffer += chunk
                *lines, buffer = buffer.split(b"\n")
                for line in lines:
                    if line.strip():
                        yield decode_watch_line(line)
            if buffer.strip():
                yield decode_watch_line(buffer)


def decode_watch_line(line: bytes) -> WatchEvent:
    """One watch frame; ERROR frames become exceptions (see ``watch``)."""
    try:
        event = json.loads(line)
    except ValueError as e:
        raise ApiError(500, "BadWatchFrame", f"undecodable watch frame: {e}") from e
    obj = event.get("object") if isinstance(event, dict) else None
    if not isinstance(obj, dict):
        raise ApiError(500, "BadWatchFrame", f"watch frame is not a {{type, object}} pair: {line[:200]!r}")
    kind = str(event.get("type") or "")
    if kind == "ERROR":
        code = obj.get("code")
        raise error_from_status(code if isinstance(code, int) and code else 500, obj)
    return WatchEvent(kind, obj)


def _dry(dry_run: bool) -> dict[str, str]:
    return {"dryRun": "All"} if dry_run else {}
