"""`trainguard controller` (placeholder until implemented)."""

from __future__ import annotations

import argparse

from webhook.cli import Run, not_implemented


def configure(parser: argparse.ArgumentParser) -> Run:
    return not_implemented("controller")
