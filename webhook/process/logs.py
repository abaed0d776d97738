"""Structured logs: one JSON object per line, so a request uid, an object or a verdict can be queried, not grepped.

A line is ``{"ts", "level", "logger", "msg", ...fields}``: the fields are whatever the call passed with ``extra=``
(``log.info("served", extra={"port": 9443})``); an ``extra={"fields": {...}}`` dict is spread the same way, so both
spellings read the same in the output.
"""

from __future__ import annotations

import json
import logging
import sys
from datetime import datetime, timezone

# Attributes every LogRecord has; anything else passed with ``extra=`` is a structured field.
_STANDARD = set(vars(logging.LogRecord("", 0, "", 0, "", (), None))) | {"message", "asctime", "taskName"}


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, object] = {
            "ts": datetime.fromtimestamp(record.created, timezone.utc).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        for key, value in vars(record).items():
            if key in _STANDARD or key.startswith("_"):
                continue
            if key == "fields" and isinstance(value, dict):
                entry.update(value)
            else:
                entry[key] = value
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return json.dumps(entry, default=str, separators=(",", ":"))


def configure_logging(level: str = "info") -> None:
    """Route every logger (ours, aiohttp's, the kubernetes client's) through the JSON formatter on stderr."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    # aiohttp's access log would add a line per probe and per review; each command logs what it served itself.
    logging.getLogger("aiohttp.access").setLevel(logging.WARNING)
