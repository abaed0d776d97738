"""What /readyz says about a kind the apiserver does not serve, for the webhook and the controller alike.

A list or watch answered 404 means the CRD is not installed or does not serve the version trainguard uses (the
informer marks itself ``not_served``); optional kinds (``absent_ok``: Kueue's, PodGroups) are a supported setup and
are not reported. Read from the informers' state: no API call per probe.
"""

from __future__ import annotations

from typing import Iterable

from trainguard.webhook.kube.informer import Informer
from trainguard.webhook.kube.resources import Resource

# Who ships each group's CRDs: what the admin installs when one is missing.
_INSTALLED_BY = {
    "trainer.kubeflow.org": "Kubeflow Trainer's CRDs",
    "jobset.x-k8s.io": "JobSet's CRDs",
    "trainguard.io": "trainguard's CRDs (the repository's crds/, or the chart installed with its CRDs)",
}


def crd_name(resource: Resource) -> str:
    return f"{resource.plural}.{resource.group}" if resource.group else resource.plural


def not_served(resource: Resource) -> str:
    """The reason and the fix, one line."""
    crd = crd_name(resource)
    return (f"{crd} {resource.group}/{resource.version} is not served (CRD not installed, or not serving "
            f"{resource.version}): install {_INSTALLED_BY.get(resource.group, 'its CRD')} at {resource.version}; "
            f"kubectl get crd {crd} -o jsonpath='{{.spec.versions[?(@.served==true)].name}}' lists what is served")


def unserved(informers: Iterable[Informer]) -> list[str]:
    """``not_served`` for each required informer the apiserver answers 404, each resource once."""
    seen: dict[Resource, str] = {}
    for inf in informers:
        if inf.not_served and not inf.absent_ok:
            seen.setdefault(inf.resource, not_served(inf.resource))
    return list(seen.values())
