"""Object skeletons shared by every builder: identity, namespace and the single controller ownerReference.

Every child object carries exactly one ownerReference to its TrainJob with ``controller`` and
``blockOwnerDeletion`` set (as every upstream plugin's ``Build`` sets it),
so garbage collection removes it with the TrainJob and watches can
map it back to its owner.
"""

from __future__ import annotations

import base64
from typing import Any, Mapping

from trainguard.webhook.api.apimachinery import controller_reference
from trainguard.webhook.api.views import Meta
from trainguard.webhook.runtime.names import TRAINER_API_VERSION, TRAINJOB_KIND


def owner_reference(trainjob: Mapping[str, Any]) -> dict:
    return controller_reference(TRAINER_API_VERSION, TRAINJOB_KIND, trainjob)


def owned_object(api_version: str, kind: str, name: str, trainjob: Mapping[str, Any]) -> dict:
    """``{apiVersion, kind, metadata: {name, namespace, ownerReferences}}`` for a child of ``trainjob``."""
    return {
        "apiVersion": api_version,
        "kind": kind,
        "metadata": {
            "name": name,
            "namespace": Meta.of(trainjob).namespace,
            "ownerReferences": [owner_reference(trainjob)],
        },
    }


def b64(text: str | bytes) -> str:
    """Secret ``data`` encoding."""
    raw = text.encode() if isinstance(text, str) else text
    return base64.b64encode(raw).decode()
