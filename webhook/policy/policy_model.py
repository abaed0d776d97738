"""The door a TrainJobPolicy passes before any rule reads it: validated by the API model, then read as a view.

The API model ``trainguard.webhook.api.trainguard.TrainJobPolicy`` (the single source of truth for the CRD) checks
every field's type and range, so a policy the apiserver would refuse, or a file given to ``render`` with a wrong
type, is reported with its field path (``PolicyParseError``) and never reaches the rules. What passes is read
through the view ``trainguard.webhook.api.views.TrainJobPolicy`` over the same dict: no copy, the CRD defaults
applied where each field is read (mode Enforce, priority 0, placement Preferred, target Kueue, GPU resource
``nvidia.com/gpu``), so the rules never re-implement defaulting.

Kept apart from ``matching`` (which caches what this returns) because ``policy_rules`` parses the policy under
review and its peers through the same door, uncached.
"""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError

from trainguard.webhook.api import trainguard as api
from trainguard.webhook.api.views import KubeObject, TrainJobPolicy

# What the rules call a parsed policy: the view ``parse_policy`` returns.
Policy = TrainJobPolicy


class PolicyParseError(ValueError):
    """A TrainJobPolicy the engine cannot read; carries the field path, the bad value and why."""

    def __init__(self, policy: str, path: str, value: Any, detail: str):
        self.policy, self.path, self.value, self.detail = policy, path, value, detail
        super().__init__(f'TrainJobPolicy "{policy}": {path}: {detail}')


def parse_policy(obj: dict[str, Any]) -> Policy:
    """The view over ``obj`` once the API model accepts it; ``PolicyParseError`` naming the first bad field if not.

    The view reads ``obj`` itself: the caller must not change it afterwards (the informer replaces a changed
    object, it never edits one in place)."""
    try:
        api.TrainJobPolicy.parse(obj)
    except ValidationError as e:
        first = e.errors()[0]
        where = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in first["loc"]).lstrip(".")
        name = str(KubeObject(obj).metadata.name or "")
        raise PolicyParseError(name, where, first.get("input"), first["msg"]) from e
    return TrainJobPolicy(obj)
