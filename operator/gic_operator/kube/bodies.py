"""Typed access to the bodies of Kubernetes objects (plain JSON dicts from the API).

:class:`Body` wraps one body read from the API or handed over by kopf and answers what
the operator reads of it: the metadata (name, namespace, uid, generation,
resourceVersion, labels, annotations, owner references, creation and deletion
timestamps), the spec and the status, as read-only mappings. It never fails on a body
that lacks a part: a missing or ``null`` ``metadata``, ``spec`` or ``status`` reads as
empty, a missing namespace as ``default`` (the namespace the API server gives an object
created without one), a missing generation as 1. Only :attr:`Body.required_name`
raises (``KeyError``) on a body without a name, for callers that cannot go on without.

A body is not validated here: what a spec or status means is the models' business
(:mod:`gic_operator.models`); this module only replaces ``body.get("metadata") or {}``.

Thread-safety: a :class:`Body` is immutable (it never writes the wrapped mapping).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

_EMPTY: Mapping[str, Any] = {}


def _mapping(value: object) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else _EMPTY


@dataclass(frozen=True)
class Body:
    """Read-only, typed view of one Kubernetes object's body (see the module doc)."""

    raw: Mapping[str, Any]

    @property
    def metadata(self) -> Mapping[str, Any]:
        return _mapping(self.raw.get("metadata"))

    @property
    def spec(self) -> Mapping[str, Any]:
        return _mapping(self.raw.get("spec"))

    @property
    def status(self) -> Mapping[str, Any] | None:
        """The stored status, ``None`` when the body has none (or not an object)."""
        status = self.raw.get("status")
        return status if isinstance(status, Mapping) else None

    @property
    def name(self) -> str:
        """``metadata.name`` (``""`` when absent)."""
        return str(self.metadata.get("name") or "")

    @property
    def required_name(self) -> str:
        """``metadata.name``; raises ``KeyError`` when absent."""
        return str(self.metadata["name"])

    @property
    def namespace(self) -> str:
        return str(self.metadata.get("namespace") or "default")

    @property
    def uid(self) -> str:
        return str(self.metadata.get("uid") or "")

    @property
    def generation(self) -> int:
        return int(self.metadata.get("generation") or 1)

    @property
    def resource_version(self) -> str | None:
        version = self.metadata.get("resourceVersion")
        return str(version) if version else None

    @property
    def labels(self) -> Mapping[str, str]:
        return _mapping(self.metadata.get("labels"))

    @property
    def annotations(self) -> Mapping[str, str]:
        return _mapping(self.metadata.get("annotations"))

    @property
    def owner_references(self) -> Sequence[Mapping[str, Any]]:
        refs = self.metadata.get("ownerReferences")
        return [ref for ref in refs if isinstance(ref, Mapping)] if isinstance(refs, list) else []

    @property
    def creation_timestamp(self) -> str:
        """``metadata.creationTimestamp`` (``""`` when absent)."""
        return str(self.metadata.get("creationTimestamp") or "")

    @property
    def deleting(self) -> bool:
        """Whether ``metadata.deletionTimestamp`` is set."""
        return bool(self.metadata.get("deletionTimestamp"))
