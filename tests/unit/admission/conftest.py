"""Admission unit tests run with trainguard's INFO logs on and rendered by the JSON formatter, so that a logging
mistake (a reserved ``extra`` key, an unserialisable field) fails here and not in a running server."""

from __future__ import annotations

import json
import logging
from typing import Iterator

import pytest

from trainguard.process.logs import JsonFormatter


class RenderingHandler(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.setFormatter(JsonFormatter())
        self.lines: list[dict] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(json.loads(self.format(record)))


@pytest.fixture(autouse=True)
def json_logs() -> Iterator[RenderingHandler]:
    handler = RenderingHandler()
    logger = logging.getLogger("trainguard")
    previous = logger.level
    logger.setLevel(logging.DEBUG)
    logger.addHandler(handler)
    yield handler
    logger.removeHandler(handler)
    logger.setLevel(previous)
