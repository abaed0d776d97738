"""The view machinery: ``resolve(obj, path)``, ``View`` over one JSON object, ``Meta`` and ``KubeObject``."""

from __future__ import annotations

from collections.abc import Mapping as _Mapping
from types import MappingProxyType
from typing import Any, Mapping, Sequence

EMPTY: Mapping[str, Any] = MappingProxyType({})
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


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


class View:
    """A read-only window on one JSON object (``raw`` is the caller's dict, never copied)."""

    __slots__ = ("raw",)

    def __init__(self, raw: Mapping[str, Any] | None) -> None:
        self.raw: Mapping[str, Any] = raw if type(raw) is dict or _is_mapping(raw) else EMPTY

    def get(self, path: str | Sequence[str], default: Any = None) -> Any:
        return resolve(self.raw, path, default)

    def _one(self, key: str, default: Any = None) -> Any:
        # One level down, the common case: ``raw`` is always a mapping.
        value = self.raw.get(key)
        return default if value is None else value

    def __repr__(self) -> str:
        return f"{type(self).__name__}({dict(self.raw)!r})"


class Meta(View):
    """``metadata`` of any object."""

    __slots__ = ()

    @property
    def name(self) -> str:
        return self._one("name", "")

    @property
    def namespace(self) -> str:
        return self._one("namespace", "")

    @property
    def uid(self) -> str:
        return self._one("uid", "")

    @property
    def labels(self) -> Mapping[str, str]:
        return _mapping(self._one("labels"))

    @property
    def annotations(self) -> Mapping[str, str]:
        return _mapping(self._one("annotations"))

    @property
    def resource_version(self) -> str:
        return self._one("resourceVersion", "")

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
        return Meta(self._one("metadata"))

    @property
    def spec(self) -> Mapping[str, Any]:
        return _mapping(self._one("spec"))

    @property
    def status(self) -> Mapping[str, Any]:
        return _mapping(self._one("status"))
