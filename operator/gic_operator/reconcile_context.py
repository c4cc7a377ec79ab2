"""One reconcile pass over one resource: its body, a working copy of its status, events.

A :class:`Pass` is created per reconcile call. Steps read ``body``/``status`` and write to
``status`` (a plain camelCase dict, the status subresource); :meth:`Pass.commit` then
sends one merge patch with exactly the keys that changed (a removed key is sent as
``null``), carrying the ``resourceVersion`` the body was read at, and posts the events the
steps queued. Nothing is written when nothing changed, so a reconcile triggered by its own
status patch ends quietly.

Invariants: events are posted only after the status patch succeeded, so an event never
announces a transition the status does not show; a status derived from a read never
overwrites a newer one: when the object changed since the read (HTTP 409 ``Conflict``),
nothing is written and no event is posted, and the next pass (the change itself triggers
one) reads it again and decides again.

Thread-safety: a pass belongs to one thread.
"""

from __future__ import annotations

import copy
import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from gic_operator.conditions import set_condition
from gic_operator.errors import ConflictError
from gic_operator.kube import KubeApi

log = logging.getLogger(__name__)


class KeyedLocks:
    """One lock per resource (namespace, name), created on first use: reconciles of the
    same resource run one at a time, different resources in parallel. Thread-safe."""

    def __init__(self) -> None:
        self._locks: dict[tuple[str, str], threading.Lock] = {}
        self._guard = threading.Lock()

    def __call__(self, namespace: str, name: str) -> threading.Lock:
        with self._guard:
            return self._locks.setdefault((namespace, name), threading.Lock())

    def forget(self, namespace: str, name: str) -> None:
        """Drop the lock of a deleted resource."""
        with self._guard:
            self._locks.pop((namespace, name), None)


@dataclass
class Pass:
    """Working state of one reconcile of the object ``body`` (a ``plural`` custom object)."""

    kube: KubeApi
    plural: str
    body: Mapping[str, Any]
    clock: Callable[[], float] = time.time
    status: dict[str, Any] = field(init=False)
    _events: list[tuple[str, str, str]] = field(init=False, default_factory=list)
    _old: dict[str, Any] = field(init=False)
    now: float = field(init=False)
    #: Set by :meth:`commit` when the object changed since it was read (nothing written).
    conflicted: bool = field(init=False, default=False)

    def __post_init__(self) -> None:
        self._old = copy.deepcopy(dict(self.body.get("status") or {}))
        self.status = copy.deepcopy(self._old)
        self.now = self.clock()

    # --- identity ---------------------------------------------------------------------

    @property
    def meta(self) -> Mapping[str, Any]:
        return self.body.get("metadata") or {}

    @property
    def name(self) -> str:
        return str(self.meta.get("name"))

    @property
    def namespace(self) -> str:
        return str(self.meta.get("namespace") or "default")

    @property
    def uid(self) -> str:
        return str(self.meta.get("uid") or "")

    @property
    def generation(self) -> int:
        return int(self.meta.get("generation") or 1)

    @property
    def resource_version(self) -> str | None:
        version = self.meta.get("resourceVersion")
        return str(version) if version else None

    @property
    def annotations(self) -> Mapping[str, str]:
        return self.meta.get("annotations") or {}

    @property
    def labels(self) -> Mapping[str, str]:
        return self.meta.get("labels") or {}

    @property
    def deleting(self) -> bool:
        return bool(self.meta.get("deletionTimestamp"))

    # --- writing ----------------------------------------------------------------------

    def set(self, **values: Any) -> None:
        """Set status keys (camelCase); ``None`` removes the key."""
        for key, value in values.items():
            if value is None:
                self.status.pop(key, None)
            else:
                self.status[key] = value

    def condition(self, type_: str, status: bool | None, reason: str, message: str) -> None:
        self.status["conditions"] = set_condition(
            self.status.get("conditions") or [],
            type_,
            status,
            reason,
            message,
            now=self.now,
            generation=self.generation,
        )

    def event(self, type_: str, reason: str, message: str) -> None:
        """Queue a Kubernetes Event (``Normal`` or ``Warning``) for after the patch."""
        self._events.append((type_, reason, message))

    def changed(self) -> dict[str, Any]:
        """The merge patch from the stored status to the working one."""
        patch: dict[str, Any] = {}
        for key, value in self.status.items():
            if self._old.get(key) != value:
                patch[key] = value
        for key in self._old:
            if key not in self.status:
                patch[key] = None
        return patch

    def commit(self) -> dict[str, Any]:
        """Patch the status (when it changed) then post the queued events; return the
        patch (empty when the object changed since it was read: nothing was written)."""
        patch = self.changed()
        if patch:
            try:
                self.kube.patch_status(
                    self.plural,
                    self.namespace,
                    self.name,
                    patch,
                    resource_version=self.resource_version,
                )
            except ConflictError:
                log.info(
                    "%s %s/%s changed while it was reconciled; it is read again on the next pass",
                    self.plural,
                    self.namespace,
                    self.name,
                )
                self._events.clear()
                self.conflicted = True
                return {}
        for type_, reason, message in self._events:
            log.info("%s/%s %s %s: %s", self.namespace, self.name, type_, reason, message)
            self.kube.event(self.body, type_, reason, message)
        self._events.clear()
        return patch
