"""The view machinery: ``resolve(obj, path)``, ``View`` over one JSON object, ``Meta``, ``Condition`` and
``KubeObject``; and, for the reads made for every watch event, the same metadata reads without a view
(``object_key``, ``resource_version``, ``object_labels``) and ``find_condition``."""

from __future__ import annotations

from collections.abc import Mapping as _Mapping
from types import MappingProxyType
from typing import Any, Iterable, Mapping, Sequence

EMPTY: Mapping[str, Any] = MappingProxyType({})
_new = object.__new__
# "a.b.c" -> ("a", "b", "c"), split once per path (the views read a handful of fixed paths, many times).
_PATHS: dict[str, tuple[str, ...]] = {}


def _is_mapping(value: Any) -> bool:
    # Wire objects are dicts: test that first, the ABC check is an order of magnitude slower.
    return type(value) is dict or (value is not None and isinstance(value, _Mapping))


def resolve(obj: Any, path: str | Sequence[str], default: Any = None) -> Any:
    """``obj[a][b]...`` for ``path`` ``"a.b"`` (or a sequence of keys); ``default`` when a step is missing, null or
    not an object. Keys containing dots are passed as a sequence."""
    if isinstance(path, str):
        keys = _PATHS.get(path)
        if keys is None:
            keys = _PATHS[path] = tuple(path.split("."))
    else:
        keys = tuple(path)
    return _dig(obj, keys, default)


def _dig(obj: Any, keys: tuple[str, ...], default: Any = None) -> Any:
    current = obj
    for key in keys:
        # _is_mapping inlined: resolve runs for every field read.
        if type(current) is not dict and (current is None or not isinstance(current, _Mapping)):
            return default
        current = current.get(key)
        if current is None:
            return default
    return current


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if _is_mapping(value) else EMPTY


# The CRD's paths, walked with ``(x.get(k) or EMPTY)`` chains: a view's reads cost what the inline chains they
# replace cost, plus one call.
def _at2(d: Mapping[str, Any], k1: str, k2: str) -> Any:
    return (d.get(k1) or EMPTY).get(k2)


def _at3(d: Mapping[str, Any], k1: str, k2: str, k3: str) -> Any:
    return ((d.get(k1) or EMPTY).get(k2) or EMPTY).get(k3)


def _at4(d: Mapping[str, Any], k1: str, k2: str, k3: str, k4: str) -> Any:
    return (((d.get(k1) or EMPTY).get(k2) or EMPTY).get(k3) or EMPTY).get(k4)


def _in(d: Mapping[str, Any], k1: str, k2: str) -> Any:
    """``d[k1][k2]``, reading a ``k1`` that is not an object as empty (``_at2`` would raise on a truthy one): for
    objects no door has checked, read by watch transforms that must not fail."""
    inner = d.get(k1)
    return (inner if type(inner) is dict else _mapping(inner)).get(k2)


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


class View:
    """A read-only window on one JSON object (``raw`` is the caller's dict, never copied)."""

    __slots__ = ("raw",)

    def __init__(self, raw: Mapping[str, Any] | None) -> None:
        self.raw: Mapping[str, Any] = raw if type(raw) is dict or _is_mapping(raw) else EMPTY

    def get(self, path: str | Sequence[str], default: Any = None) -> Any:
        return resolve(self.raw, path, default)

    def only(self, keys: Sequence[str]) -> dict[str, Any]:
        """A new dict of the given top-level fields, as written, those present only: what a cache keeps of an
        object it trims (a watch transform), read here rather than by each transform."""
        raw = self.raw
        return {k: raw[k] for k in keys if k in raw}

    def _one(self, key: str, default: Any = None) -> Any:
        # One level down, the common case: ``raw`` is always a mapping.
        value = self.raw.get(key)
        return default if value is None else value

    def __repr__(self) -> str:
        return f"{type(self).__name__}({dict(self.raw)!r})"


class Meta(View):
    """``metadata`` of any object."""

    __slots__ = ()

    @classmethod
    def of(cls, obj: Mapping[str, Any] | None) -> Meta:
        """``KubeObject(obj).metadata`` in one allocation instead of two, and no ``__init__`` call: for the readers
        of every watch event and every cached object (the watch transforms, the snapshot's labels)."""
        meta = obj.get("metadata") if type(obj) is dict else _mapping(obj).get("metadata")  # _metadata, inlined
        view = _new(cls)
        view.raw = meta if type(meta) is dict else _mapping(meta)
        return view

    # name, namespace, uid and resourceVersion: ``_one`` inlined, the informer reads them for every watch event.
    @property
    def name(self) -> str:
        value = self.raw.get("name")
        return "" if value is None else value

    @property
    def namespace(self) -> str:
        value = self.raw.get("namespace")
        return "" if value is None else value

    @property
    def uid(self) -> str:
        value = self.raw.get("uid")
        return "" if value is None else value

    @property
    def labels(self) -> Mapping[str, str]:
        value = self.raw.get("labels")  # the dict case first: the snapshot reads every Namespace's labels
        return value if type(value) is dict else _mapping(value)

    @property
    def annotations(self) -> Mapping[str, str]:
        return _mapping(self._one("annotations"))

    @property
    def creation_timestamp(self) -> str | None:
        """As written (metav1 time); None when absent, which the apiserver never serves."""
        return self._one("creationTimestamp")

    @property
    def resource_version(self) -> str:
        value = self.raw.get("resourceVersion")
        return "" if value is None else value

    @property
    def generation(self) -> int | None:
        return self._one("generation")

    @property
    def deletion_timestamp(self) -> str | None:
        return self._one("deletionTimestamp")

    @property
    def owner_references(self) -> list[Mapping[str, Any]]:
        return _list(self._one("ownerReferences"))

    @property
    def finalizers(self) -> list[str]:
        return _list(self._one("finalizers"))


# ``Meta.of(obj).namespace`` / ``.name`` / ``.resource_version`` / ``.labels`` without the view, as ``job_ancestor``
# is for the build: the informer asks the first three of every watch event and every listed object, the snapshot the
# labels of every Namespace at each rebuild, where a view's allocation and property calls cost more than the reads.
def _metadata(obj: Mapping[str, Any] | None) -> Mapping[str, Any]:
    meta = obj.get("metadata") if type(obj) is dict else _mapping(obj).get("metadata")
    return meta if type(meta) is dict else _mapping(meta)


def object_key(obj: Mapping[str, Any]) -> tuple[str, str]:
    """``(metadata.namespace, metadata.name)``, each ``""`` when absent: the key of a watch cache's store."""
    meta = _metadata(obj)
    return (str(meta.get("namespace") or ""), str(meta.get("name") or ""))


def resource_version(obj: Mapping[str, Any]) -> str:
    """``metadata.resourceVersion``; ``""`` when absent."""
    return str(_metadata(obj).get("resourceVersion") or "")


def object_labels(obj: Mapping[str, Any]) -> Mapping[str, str]:
    """``metadata.labels``; empty when absent or not an object."""
    labels = _metadata(obj).get("labels")
    return labels if type(labels) is dict else _mapping(labels)


class Condition(View):
    """One ``status.conditions[]`` entry (metav1.Condition), of any kind. The API serves every field of it (none is
    omitempty but observedGeneration), so a missing or null one reads as Go's zero value, ``""``; only
    ``lastTransitionTime`` reads None when missing, which means "now" to whoever copies the condition."""

    __slots__ = ()

    @property
    def type(self) -> str:
        return self._one("type", "")

    @property
    def status(self) -> str:
        return self._one("status", "")

    @property
    def is_true(self) -> bool:
        return self.raw.get("status") == "True"

    @property
    def reason(self) -> str:
        return self._one("reason", "")

    @property
    def message(self) -> str:
        return self._one("message", "")

    @property
    def last_transition_time(self) -> str | None:
        return self._one("lastTransitionTime") or None


def find_condition(conditions: Iterable[Any], type_: str) -> Condition | None:
    """The ``type_`` entry of a ``status.conditions`` list as a view (``meta.FindStatusCondition``); None when there
    is none. The others are passed over without a view: the reconciler looks several types up per reconcile."""
    for raw in conditions:
        if (raw if type(raw) is dict else _mapping(raw)).get("type") == type_:
            return Condition(raw)
    return None


class KubeObject(View):
    """What every object has: apiVersion, kind, metadata, spec, status."""

    __slots__ = ()

    @property
    def api_version(self) -> str:
        return self._one("apiVersion", "")

    @property
    def kind(self) -> str:
        return self._one("kind", "")

    @property
    def metadata(self) -> Meta:
        return Meta(self.raw.get("metadata"))  # Meta reads a missing, null or non-object metadata as empty

    @property
    def spec(self) -> Mapping[str, Any]:
        return _mapping(self._one("spec"))

    @property
    def status(self) -> Mapping[str, Any]:
        return _mapping(self._one("status"))
