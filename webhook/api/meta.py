"""``meta/v1`` types shared by every object: ObjectMeta, OwnerReference, Condition, LabelSelector.

Only the fields trainguard reads are typed; everything else (managedFields, generateName, ...) is kept by the
base's ``extra="allow"``. Timestamps stay strings (RFC 3339 as the API server wrote them) so a round trip
never re-formats them.
"""

from __future__ import annotations





from trainguard.webhook.api.base import KubeModel, spec_field


class OwnerReference(KubeModel):
    """Link from a child object to the object that owns it (garbage collection, ``controller: true``)."""

    __openapi__ = "io.k8s.apimachinery.pkg.apis.meta.v1.OwnerReference"

    api_version: str = spec_field("API version of the owner.", required=True)
    kind: str = spec_field("Kind of the owner.", required=True)
    name: str = spec_field("Name of the owner.", required=True)
    uid: str = spec_field("UID of the owner.", required=True)
    controller: bool | None = spec_field("True when the owner is the managing controller.")
    block_owner_deletion: bool | None = spec_field("True to block foreground deletion of the owner.")


class ObjectMeta(KubeModel):
    """Standard object metadata (name, namespace, labels, annotations, owners, bookkeeping)."""

    __openapi__ = "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"

    name: str | None = spec_field("Name of the object, unique in its namespace.")
    generate_name: str | None = spec_field("Prefix for a server-generated name.")
    namespace: str | None = spec_field("Namespace of the object (empty for cluster-scoped objects).")
    uid: str | None = spec_field("Server-assigned unique id.")
    resource_version: str | None = spec_field("Opaque version for optimistic concurrency.")
    generation: int | None = spec_field("Sequence number of the desired state (bumped on spec changes).")
    creation_timestamp: str | None = spec_field("When the object was created (RFC 3339).")
    deletion_timestamp: str | None = spec_field("When deletion was requested (RFC 3339).")
    labels: dict[str, str] | None = spec_field("Labels: identifying key/value pairs used by selectors.")
    annotations: dict[str, str] | None = spec_field("Annotations: non-identifying key/value metadata.")
    owner_references: list[OwnerReference] | None = spec_field("Objects this object depends on.")
    finalizers: list[str] | None = spec_field("Finalizers that must be removed before deletion completes.")


class Condition(KubeModel):
    """One ``metav1.Condition`` (status is the string "True", "False" or "Unknown")."""

    __openapi__ = "io.k8s.apimachinery.pkg.apis.meta.v1.Condition"

    type: str = spec_field("Condition type, e.g. Complete, Failed, Suspended.", required=True)
    status: str = spec_field("True, False or Unknown.", required=True)
    reason: str | None = spec_field("Machine-readable CamelCase reason for the last transition.")
    message: str | None = spec_field("Human-readable details of the last transition.")
    last_transition_time: str | None = spec_field("When the status last changed (RFC 3339).")
    observed_generation: int | None = spec_field("metadata.generation the condition was computed from.")


class LabelSelectorRequirement(KubeModel):
    """``key operator values`` term of a LabelSelector (operator In, NotIn, Exists, DoesNotExist)."""

    __openapi__ = "io.k8s.apimachinery.pkg.apis.meta.v1.LabelSelectorRequirement"

    key: str = spec_field("Label key the requirement applies to.", required=True)
    operator: str = spec_field("In, NotIn, Exists or DoesNotExist.", required=True)
    values: list[str] | None = spec_field("Values for In/NotIn; empty for Exists/DoesNotExist.")


class LabelSelector(KubeModel):
    """A label query; all of matchLabels and matchExpressions must hold. An empty selector matches everything."""

    __openapi__ = "io.k8s.apimachinery.pkg.apis.meta.v1.LabelSelector"

    match_labels: dict[str, str] | None = spec_field("Exact key=value pairs that must all be present.")
    match_expressions: list[LabelSelectorRequirement] | None = spec_field("Set-based requirements, ANDed.")


class TemplateMeta(KubeModel):
    """The metadata a template may carry (labels and annotations), as upstream's embedded ObjectMeta.

    CRDs prune unknown fields, so the generator gives embedded metadata exactly these properties.
    """

    labels: dict[str, str] | None = spec_field("Labels merged into the objects built from this template.")
    annotations: dict[str, str] | None = spec_field("Annotations merged into the objects built from this template.")


def label_selector_matches(selector: LabelSelector | None, labels: dict[str, str] | None) -> bool:
    """Kubernetes label-selector semantics; ``None`` (no selector) matches everything, like an empty one.

    Pure helper here because both the policy matcher and the cache controller need the exact same meaning.
    """
    if selector is None:
        return True
    labels = labels or {}
    for key, value in (selector.match_labels or {}).items():
        if labels.get(key) != value:
            return False
    for req in selector.match_expressions or []:
        present = req.key in labels
        values = req.values or []
        if req.operator == "In" and not (present and labels[req.key] in values):
            return False
        if req.operator == "NotIn" and present and labels[req.key] in values:
            return False
        if req.operator == "Exists" and not present:
            return False
        if req.operator == "DoesNotExist" and present:
            return False
        if req.operator not in ("In", "NotIn", "Exists", "DoesNotExist"):
            return False
    return True


