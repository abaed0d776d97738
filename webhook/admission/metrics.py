"""Prometheus metrics of the admission server, in a registry of their own (one per server, so tests can run many).

Names and what they answer:

* ``trainguard_admission_requests_total{webhook,verdict}``: how many reviews, with verdict one of
  ``allowed`` (no change), ``patched`` (allowed with a patch), ``denied``, ``error`` (could not decide).
* ``trainguard_admission_duration_seconds{webhook,verdict}``: server-side latency from the body being read to the
  response being ready; buckets resolve the 25 ms target and the apiserver's own buckets.
* ``trainguard_admission_denials_total{webhook,reason}``: denials by the policy's machine-readable reason.
* ``trainguard_admission_patch_bytes{webhook}``: size of the JSON patch sent back (mutating webhook).
* ``trainguard_admission_bad_requests_total{reason}``: HTTP-level rejections (bad_json, too_large, ...).
* ``trainguard_admission_policy_errors_total{webhook}``: exceptions raised by a policy function.
* ``trainguard_admission_policy_timeouts_total{webhook}``: reviews not decided within ``--policy-timeout``.
* ``trainguard_cache_synced{cache}``: 1 once that informer has listed, else 0.
* ``trainguard_certificate_not_after_timestamp_seconds``: expiry of the serving certificate now loaded.
* ``trainguard_certificate_reloads_total``: serving certificate swaps without restart.
"""

from __future__ import annotations

from typing import Callable, Mapping

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)
PATCH_BUCKETS = (0, 64, 256, 1024, 4096, 16384, 65536, 262144)


class AdmissionMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.requests = Counter("trainguard_admission_requests", "Admission reviews answered.", ["webhook", "verdict"], registry=r)
        self.duration = Histogram(
            "trainguard_admission_duration_seconds", "Server-side admission latency.", ["webhook", "verdict"],
            buckets=LATENCY_BUCKETS, registry=r,
        )
        self.denials = Counter("trainguard_admission_denials", "Denials by policy reason.", ["webhook", "reason"], registry=r)
        self.patch_bytes = Histogram(
            "trainguard_admission_patch_bytes", "JSON patch size in bytes.", ["webhook"], buckets=PATCH_BUCKETS, registry=r
        )
        self.bad_requests = Counter(
            "trainguard_admission_bad_requests", "Requests rejected before a policy ran.", ["reason"], registry=r
        )
        self.policy_errors = Counter(
            "trainguard_admission_policy_errors", "Exceptions raised inside a policy function.", ["webhook"], registry=r
        )
        self.policy_timeouts = Counter(
            "trainguard_admission_policy_timeouts", "Reviews not decided within the policy timeout.", ["webhook"], registry=r
        )
        self.cache_synced = Gauge("trainguard_cache_synced", "1 when the informer cache has synced.", ["cache"], registry=r)
        self.cert_not_after = Gauge(
            "trainguard_certificate_not_after_timestamp_seconds", "Expiry of the serving certificate.", registry=r
        )
        self.cert_reloads = Counter("trainguard_certificate_reloads", "Serving certificate reloads.", registry=r)
        self._cache_state: Callable[[], Mapping[str, bool]] = dict

    def watch_caches(self, state: Callable[[], Mapping[str, bool]]) -> None:
        """Read cache sync state at scrape time (no background task keeps the gauge in step)."""
        self._cache_state = state

    def render(self) -> bytes:
        for cache, synced in self._cache_state().items():
            self.cache_synced.labels(cache).set(1 if synced else 0)
        return generate_latest(self.registry)
