"""The process shell the three long-running commands share (``trainguard webhook``, ``trainguard controller``,
``trainguard cache-agent``): what a process on a cluster needs around its own work, written once.

* ``logs``: ``configure_logging(level)``: one JSON object per line on stderr (``ts``, ``level``, ``logger``, ``msg``,
  then the record's structured fields), for every logger in the process;
* ``probes``: ``probe_app(ready=..., metrics=...)``: ``/healthz``, ``/readyz`` and ``/metrics`` as one aiohttp app;
  ``serve_probes(app, host, port)`` where the command does not need a guarded listener of its own;
* ``signals``: ``stop_event()``: an ``asyncio.Event`` set by SIGTERM or SIGINT, the commands' one way to stop;
* ``limits``: ``raise_nofile_limit()``: the soft open-files limit raised to the hard one.

Installed as ``trainguard.process``, not under ``trainguard.webhook``: the node agent uses it and imports nothing of
the control plane (``tests/unit/test_layout.py``). It imports aiohttp, prometheus_client and the standard library only.
"""

from trainguard.process.limits import NofileLimits, raise_nofile_limit
from trainguard.process.logs import JsonFormatter, configure_logging
from trainguard.process.probes import Probe, probe_app, serve_probes
from trainguard.process.signals import stop_event

__all__ = [
    "JsonFormatter",
    "NofileLimits",
    "Probe",
    "configure_logging",
    "probe_app",
    "raise_nofile_limit",
    "serve_probes",
    "stop_event",
]
