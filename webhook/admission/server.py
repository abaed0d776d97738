"""The two aiohttp applications: admission (HTTPS) and health/metrics (plain HTTP, its own port).

One review, start to end (``AdmissionHandler.handle``):

1. HTTP checks before reading: POST only (aiohttp answers 405), known path (404), ``Content-Type:
   application/json`` (415), declared length within ``max_body_bytes`` (413).
2. Reserve the body's bytes in the ``BodyBudget`` (the bytes of all bodies held at once are bounded; a review that
   cannot get its share before the read deadline gets 503 and the connection is closed), then read the body under
   ``read_timeout``, an absolute deadline (a client that dribbles bytes gets 408, the connection is closed) and the
   same size cap for chunked bodies (413).
3. Parse the AdmissionReview at the door (400 on anything that is not one; there is no uid to answer to).
4. Check that the review is for this path's kind and carries an object; if not, answer an AdmissionReview error
   (allowed=false, code 400) so the apiserver shows a clear message.
5. Call the route's pure policy function with a ``ClusterSnapshot`` from the caches. An exception inside it is
   caught: by default an AdmissionReview error (allowed=false, code 500); with ``on_policy_error="allow"`` the
   request is admitted unchanged with a warning. The server itself never answers 5xx.
   Steps 3 to 6 run in a small worker pool (``policy_workers`` threads) under ``policy_timeout``: one review's policy
   work cannot stall the event loop, so other reviews, ``/healthz`` and ``/readyz`` keep flowing. A review not
   decided in time is answered as a policy error (denied with code 500, or admitted with a warning under
   ``on_policy_error="allow"``) before the apiserver's own timeout would turn it into "failed calling webhook"; the
   overdue thread finishes in the background (Python cannot stop it) and its result is dropped. The pipeline is
   safe to run in threads: it is pure, reads the ``ClusterSnapshot`` (an immutable value taken on the event loop)
   and works on its own copy of the object (``tests/unit/admission/test_review_threads.py``).
6. Encode: for the mutating webhook a minimal RFC 6902 patch from the ORIGINAL object to ``Verdict.obj``
   (``json_patch``; never the whole object); warnings; denials with status code 403 and the policy's message.

Every review ends in one JSON log line (uid, webhook, kind, namespace/name, operation, dryRun, verdict, reason,
patch size, duration) and in the metrics.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, Callable, Literal, Mapping, Sequence

from aiohttp import web

from trainguard.process.probes import Probe, probe_app
from trainguard.webhook.admission.budget import BodyBudget, BudgetSettings
from trainguard.webhook.admission.connections import track_requests
from trainguard.webhook.admission.json_patch import make_patch
from trainguard.webhook.admission.metrics import AdmissionMetrics
from trainguard.webhook.admission.review import (
    AdmissionReview,
    ReviewError,
    allowed_response,
    bound_warnings,
    denied_response,
    encode_patch,
    error_response,
    parse_review,
)
from trainguard.webhook.admission.routes import BoundRoute
from trainguard.webhook.policy.verdict import AdmissionInput, ClusterSnapshot, Verdict

log = logging.getLogger("trainguard.admission")

# An AdmissionReview carries the object and, on UPDATE, the old object. The apiserver caps a request body at
# 3 MiB and etcd an object at 1.5 MiB, so two objects plus the envelope stay well under this.
DEFAULT_MAX_BODY_BYTES = 8 * 1024 * 1024
DEFAULT_READ_TIMEOUT = 10.0
# Longer than the apiserver's idle-connection timeout (Go: 90 s): closing a connection the client is about to reuse
# would fail a POST it cannot retry. It also bounds clients that connect and never finish their headers (aiohttp
# arms it from the moment a connection opens).
DEFAULT_IDLE_TIMEOUT = 120.0
# Under the webhook's timeoutSeconds (5 s in the chart): the apiserver gets our answer, not a timeout.
DEFAULT_POLICY_TIMEOUT = 3.0
DEFAULT_POLICY_WORKERS = 4
PARSE_INLINE_BYTES = 256 * 1024


@dataclass(frozen=True)
class ServerSettings:
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
    read_timeout: float = DEFAULT_READ_TIMEOUT
    idle_timeout: float = DEFAULT_IDLE_TIMEOUT
    # What a policy exception means for the request: "deny" (an error the apiserver rejects) or "allow".
    on_policy_error: Literal["deny", "allow"] = "deny"
    policy_timeout: float = DEFAULT_POLICY_TIMEOUT
    policy_workers: int = DEFAULT_POLICY_WORKERS
    body_budget: BudgetSettings = field(default_factory=BudgetSettings)

    def __post_init__(self) -> None:
        if not self.policy_timeout > 0:
            raise ValueError(f"policy timeout must be positive, got {self.policy_timeout}")
        if self.policy_workers < 1:
            raise ValueError(f"policy workers must be at least 1, got {self.policy_workers}")
        self.body_budget.check(self.max_body_bytes)


def utc_now() -> datetime:
    return datetime.now(timezone.utc)


class AdmissionHandler:
    def __init__(
        self,
        routes: Mapping[str, BoundRoute],
        snapshot: Callable[[], ClusterSnapshot],
        metrics: AdmissionMetrics,
        settings: ServerSettings = ServerSettings(),
        clock: Callable[[], datetime] = utc_now,
    ) -> None:
        self.routes = dict(routes)
        self.snapshot = snapshot
        self.metrics = metrics
        self.settings = settings
        self.clock = clock
        self.budget = BodyBudget(settings.body_budget)
        self._workers: ThreadPoolExecutor | None = None

    def app(self) -> web.Application:
        # client_max_size caps request.read() too, as a second line behind our own checks.
        app = web.Application(client_max_size=self.settings.max_body_bytes, middlewares=[track_requests])
        for path in self.routes:
            app.router.add_post(path, self.handle)
        app.on_cleanup.append(self._stop_workers)
        return app

    async def _stop_workers(self, _: web.Application) -> None:
        if self._workers is not None:
            self._workers.shutdown(wait=False, cancel_futures=True)
            self._workers = None

    async def _in_worker(self, fn: Callable[..., Any], *args: Any) -> Any:
        if self._workers is None:
            self._workers = ThreadPoolExecutor(self.settings.policy_workers, thread_name_prefix="trainguard-review")
        return await asyncio.get_running_loop().run_in_executor(self._workers, fn, *args)

    @property
    def runner_options(self) -> dict[str, Any]:
        """aiohttp request-handler options: idle connections closed after ``idle_timeout``; no lingering (aiohttp
        otherwise reads and discards an unfinished body for 10 s before it closes the connection, so a withheld body
        held its socket that much longer after its 408)."""
        return {"access_log": None, "keepalive_timeout": self.settings.idle_timeout, "lingering_time": 0}

    def runner(self) -> web.AppRunner:
        """The runner to serve ``app()`` with (``runner_options``)."""
        return web.AppRunner(self.app(), shutdown_timeout=10.0, **self.runner_options)

    # ---- HTTP level --------------------------------------------------------------------------------------

    def _reject(self, status: int, reason: str, message: str, request: web.Request) -> web.Response:
        self.metrics.bad_requests.labels(reason).inc()
        log.warning(
            "rejected admission request: %s", message,
            extra={"http_status": status, "reason": reason, "path": request.path, "remote": request.remote},
        )
        return web.Response(status=status, text=message + "\n", content_type="text/plain")

    async def handle(self, request: web.Request) -> web.StreamResponse:
        bound = self.routes[request.path]
        if request.content_type != "application/json":
            return self._reject(415, "unsupported_media_type", f"Content-Type must be application/json, got {request.content_type!r}", request)
        limit = self.settings.max_body_bytes
        if request.content_length is not None and request.content_length > limit:
            return self._reject(413, "too_large", f"body of {request.content_length} bytes exceeds the {limit}-byte limit", request)
        # A chunked body (never sent by the apiserver) may grow to the limit: reserve the worst case.
        reserved = request.content_length if request.content_length is not None else limit
        deadline = asyncio.get_running_loop().time() + self.settings.read_timeout
        try:
            async with asyncio.timeout_at(deadline):
                await self.budget.acquire(reserved)
        except TimeoutError:
            resp = self._reject(
                503, "busy", f"server busy: {self.budget.in_use} bytes of request bodies in flight; retry", request)
            resp.headers["Retry-After"] = "1"
            resp.force_close()
            return resp
        try:
            return await self._handle_reserved(request, bound, limit, deadline)
        finally:
            await self.budget.release(reserved)

    async def _handle_reserved(self, request: web.Request, bound: BoundRoute, limit: int, deadline: float) -> web.StreamResponse:
        try:
            async with asyncio.timeout_at(deadline):
                body = await _read_capped(request, limit)
        except TimeoutError:
            resp = self._reject(408, "read_timeout", f"body not received within {self.settings.read_timeout}s", request)
            resp.force_close()
            return resp
        except _TooLarge:
            resp = self._reject(413, "too_large", f"body exceeds the {limit}-byte limit", request)
            resp.force_close()
            return resp
        started = time.perf_counter()
        # Taken here, on the event loop that feeds the caches; the worker gets an immutable value.
        snapshot = self.snapshot()
        review: AdmissionReview | None = None
        try:
            async with asyncio.timeout(self.settings.policy_timeout):
                # A small body parses in well under a millisecond: on the loop, so that a review queued behind stuck
                # workers still has its uid for an answer. A large one is parsed in a worker.
                review = parse_review(body) if len(body) <= PARSE_INLINE_BYTES else await self._in_worker(parse_review, body)
                del body
                response, outcome = await self._in_worker(self.review, bound, review, snapshot)
        except ReviewError as e:
            return self._reject(400, "bad_review", str(e), request)
        except TimeoutError:
            if review is None:
                return self._reject(503, "busy", f"review not parsed within {self.settings.policy_timeout}s; retry", request)
            response, outcome = self._overdue(bound, review)
        except Exception as e:  # a bug of ours: still an answer the apiserver can show, never an HTTP 500
            if review is None:
                raise
            log.exception("review failed", extra={"uid": review.request.uid, "webhook": bound.route.name})
            response = error_response(review.request.uid, 500, f"internal error in {bound.route.name}: {type(e).__name__}")
            outcome = Outcome("error", "InternalError")
        elapsed = time.perf_counter() - started
        name = bound.route.name
        self.metrics.requests.labels(name, outcome.verdict).inc()
        self.metrics.duration.labels(name, outcome.verdict).observe(elapsed)
        req = review.request
        log.info(
            "admission %s", outcome.verdict,
            extra={
                "uid": req.uid, "webhook": name, "kind": req.kind.kind, "namespace": req.namespace, "object": req.name,
                "operation": req.operation, "dry_run": req.dry_run, "verdict": outcome.verdict,
                "reason": outcome.reason, "patch_ops": outcome.patch_ops, "patch_bytes": outcome.patch_bytes,
                "warnings": outcome.warnings, "duration_ms": round(elapsed * 1000, 3),
                # What an admin needs to see what Audit (or a denial) said, and to whom; bounded (``_log_texts``).
                "user": _capped(str(req.user_info.get("username") or ""), LOG_TEXT_MAX),
                "warning_texts": _log_texts(outcome.warning_texts), "denial": _capped(outcome.message, LOG_TEXT_MAX),
            },
        )
        return web.json_response(response, dumps=_dumps)

    def _overdue(self, bound: BoundRoute, review: AdmissionReview) -> tuple[dict[str, Any], "Outcome"]:
        route, uid = bound.route, review.request.uid
        self.metrics.policy_timeouts.labels(route.name).inc()
        message = f"policy did not decide within {self.settings.policy_timeout}s"
        log.warning("review overdue: %s", message, extra={"uid": uid, "webhook": route.name, "reason": "PolicyTimeout"})
        if self.settings.on_policy_error == "allow":
            return allowed_response(uid, warnings=[f"trainguard: {route.name} skipped: {message}"]), Outcome("error", "PolicyTimeout")
        return error_response(uid, 500, f"internal error in {route.name}: {message}"), Outcome("error", "PolicyTimeout")

    # ---- review level (pure apart from metrics and logs) ------------------------------------------------

    def review(
        self, bound: BoundRoute, review: AdmissionReview, snapshot: ClusterSnapshot | None = None,
    ) -> tuple[dict[str, Any], "Outcome"]:
        """Decide one parsed review (runs in a worker thread; ``snapshot`` defaults to the caches' current one)."""
        req = review.request
        route = bound.route
        if (req.kind.group, req.kind.kind) != (route.group, route.kind):
            got = f"{req.kind.group}/{req.kind.version}, Kind={req.kind.kind}"
            return error_response(req.uid, 400, f"{route.path} serves {route.api_version}, Kind={route.kind}; got {got}"), Outcome("error", "WrongKind")
        if req.operation not in ("CREATE", "UPDATE"):
            # Not registered for these; answer harmlessly should a configuration send them anyway.
            return allowed_response(req.uid), Outcome("allowed")
        if req.object is None:
            return error_response(req.uid, 400, f"{req.operation} review carries no object"), Outcome("error", "NoObject")
        obj_kind = req.object.get("kind")
        if obj_kind is not None and obj_kind != route.kind:
            return error_response(req.uid, 400, f"{route.path} serves {route.kind}; the object is a {obj_kind!r}"), Outcome("error", "WrongKind")
        if req.operation == "UPDATE" and req.old_object is None:
            return error_response(req.uid, 400, "UPDATE review carries no oldObject"), Outcome("error", "NoObject")

        admission = AdmissionInput(
            operation=req.operation,
            obj=_copy(req.object),
            old_obj=_copy(req.old_object) if req.old_object is not None else None,
            now=self.clock(),
            dry_run=req.dry_run,
            namespace=req.namespace,
            username=str(req.user_info.get("username") or ""),
        )
        try:
            verdict = bound.decide(admission, snapshot if snapshot is not None else self.snapshot())
            if not isinstance(verdict, Verdict):
                raise TypeError(f"policy returned {type(verdict).__name__}, not a Verdict")
        except Exception as e:  # a policy bug must cost one request, not the server
            self.metrics.policy_errors.labels(route.name).inc()
            log.exception("policy %s raised", route.policy, extra={"uid": req.uid, "webhook": route.name})
            if self.settings.on_policy_error == "allow":
                return allowed_response(req.uid, warnings=[f"trainguard: {route.name} skipped after an internal error"]), Outcome("error", "PolicyError")
            return error_response(req.uid, 500, f"internal error in {route.name}: {type(e).__name__}"), Outcome("error", "PolicyError")

        warnings = bound_warnings(verdict.warnings)
        if not verdict.allowed:
            reason = verdict.reason or "Denied"
            self.metrics.denials.labels(route.name, reason).inc()
            message = verdict.message or "denied by policy"
            return denied_response(req.uid, message, warnings=warnings), Outcome(
                "denied", reason, warnings=len(warnings), warning_texts=tuple(warnings), message=message)
        if route.mutating and verdict.obj is not None:
            try:
                patch = make_patch(req.object, verdict.obj)
            except Exception as e:
                self.metrics.policy_errors.labels(route.name).inc()
                log.exception("patch computation failed", extra={"uid": req.uid, "webhook": route.name})
                return error_response(req.uid, 500, f"internal error in {route.name}: cannot diff object ({type(e).__name__})"), Outcome("error", "PatchError")
            if patch:
                size = len(encode_patch(patch))
                self.metrics.patch_bytes.labels(route.name).observe(size)
                return allowed_response(req.uid, patch=patch, warnings=warnings), Outcome("patched", patch_ops=len(patch), patch_bytes=size, warnings=len(warnings), warning_texts=tuple(warnings))
        return allowed_response(req.uid, warnings=warnings), Outcome("allowed", warnings=len(warnings),
                                                                     warning_texts=tuple(warnings))


@dataclass(frozen=True)
class Outcome:
    verdict: Literal["allowed", "patched", "denied", "error"]
    reason: str | None = None
    patch_ops: int = 0
    patch_bytes: int = 0
    warnings: int = 0
    warning_texts: tuple[str, ...] = ()
    message: str | None = None  # the denial's


# The admission log line carries the warnings' and the denial's text: bounded, so one review's line stays a few KiB
# (a denial may aggregate many field errors; the response itself is bounded by ``bound_warnings``).
LOG_TEXT_MAX = 512
LOG_WARNINGS_MAX = 8


def _capped(text: str | None, limit: int) -> str | None:
    if text is None or len(text) <= limit:
        return text
    return text[: limit - 3] + "..."


def _log_texts(texts: tuple[str, ...]) -> list[str]:
    out = [t for t in (_capped(t, LOG_TEXT_MAX) for t in texts[:LOG_WARNINGS_MAX]) if t is not None]
    if len(texts) > LOG_WARNINGS_MAX:
        out.append(f"... {len(texts) - LOG_WARNINGS_MAX} more")
    return out


class _TooLarge(Exception):
    pass


async def _read_capped(request: web.Request, limit: int) -> bytes:
    """Read the body, chunked or not, failing as soon as it passes ``limit`` (never buffering more)."""
    chunks: list[bytes] = []
    size = 0
    while True:
        chunk = await request.content.read(64 * 1024)
        if not chunk:
            return b"".join(chunks)
        size += len(chunk)
        if size > limit:
            raise _TooLarge()
        chunks.append(chunk)


def _copy(obj: dict[str, Any]) -> dict[str, Any]:
    # The policy gets its own copy, so the original stays intact as the base of the patch even if a policy mutates
    # its input by mistake. A JSON round-trip is a faster deep copy than copy.deepcopy for JSON-shaped data.
    return json.loads(json.dumps(obj))


def _dumps(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"))


# ---- health / readiness / metrics ------------------------------------------------------------------------------


@dataclass
class Readiness:
    """What /readyz checks: certificates loaded, caches synced and no needed kind unserved (each a zero-argument
    callable; ``problems``: one line per reason with its fix, e.g. ``kube.served.unserved``)."""

    certificates_loaded: Callable[[], bool]
    caches_synced: Callable[[], Mapping[str, bool]]
    problems: Callable[[], Sequence[str]] = tuple


def health_app(readiness: Readiness, metrics: AdmissionMetrics) -> web.Application:
    def probe() -> Probe:
        certs = readiness.certificates_loaded()
        caches = dict(readiness.caches_synced())
        problems = list(readiness.problems())
        return Probe(certs and all(caches.values()) and not problems,
                     {"certificates": certs, "caches": caches, "problems": problems})

    return probe_app(ready=probe, metrics=metrics.render)
