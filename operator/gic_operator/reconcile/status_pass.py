"""One reconcile pass over one resource: its body, its typed status, events.

A :class:`Pass` is created per reconcile call with the resource's status model
(:class:`~gic_operator.models.GICJobStatus`, :class:`~gic_operator.models.SavepointStatus`).
It reads the stored status with :meth:`~gic_operator.models.base.ResourceStatus.read`,
which never fails (what does not validate reads as absent, and is logged). Steps read
``p.status`` (a frozen model) and change it with :meth:`Pass.update` (model fields by
their Python names, validated) and :meth:`Pass.condition`. :meth:`Pass.commit` then sends
one merge patch, :func:`status_patch`: the typed status's JSON (camelCase) against the
stored status, over the fields the pass updated, so exactly the keys that changed (a
removed key as ``null``), carrying the ``resourceVersion`` the body was read at, and
posts the events the steps queued. Nothing is written when nothing changed, so a
reconcile triggered by its own status patch ends quietly; fields the pass did not update
are never sent, so what the operator cannot read (another version's fields, a value it
dropped as invalid) stays as it is until a step replaces it.

Invariants: every text a pass writes (a status text field, a condition's message, an
Event's message) is bounded (:func:`~gic_operator.kube.kube_events.bounded_text`), so
no quoted error or driver report makes a status patch too large for the API server;
events are posted only after the status patch succeeded, so an event never
announces a transition the status does not show; a status derived from a read never
overwrites a newer one: when the object changed since the read (HTTP 409 ``Conflict``),
nothing is written and no event is posted, and the next pass (the change itself triggers
one) reads it again and decides again. :meth:`Pass.write_ahead` stores the working
status in the middle of a pass, before a side effect that must never go unrecorded (a
recovery's epoch claim); a conflict there ends the pass's writing, and after it the
pass's later patch is conditional on the version that write produced.

Thread-safety: a pass belongs to one thread.
"""

from __future__ import annotations

import logging
import threading
import time
import types
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar, Union, get_args, get_origin

from pydantic import BaseModel

from gic_operator.kube.bodies import Body
from gic_operator.kube.conditions import set_condition
from gic_operator.kube.kube_api import KubeApi
from gic_operator.kube.kube_events import EVENT_MESSAGE_MAX, bounded_text
from gic_operator.kube.merge_patch import merge_patch
from gic_operator.models import Condition, GICJobStatus, ResourceStatus, SavepointStatus
from gic_operator.models.base import plain_json, read_tolerantly
from gic_operator.operator_errors import ConflictError

log = logging.getLogger(__name__)

S = TypeVar("S", bound=ResourceStatus)

#: Status fields holding free text (what happened, an error): bounded when set.
TEXT_FIELDS = frozenset({"message", "error", "disposal_error"})


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
class Pass(Generic[S]):
    """Working state of one reconcile of the object ``body`` (a ``plural`` custom object
    whose status is a ``status_model``)."""

    kube: KubeApi
    plural: str
    body: Mapping[str, Any]
    status_model: type[S]
    clock: Callable[[], float] = time.time
    _status: S = field(init=False)
    _stored: dict[str, Any] = field(init=False)
    _updated: set[str] = field(init=False, default_factory=set)
    _events: list[tuple[str, str, str]] = field(init=False, default_factory=list)
    now: float = field(init=False)
    #: Set by :meth:`commit` or :meth:`write_ahead` when the object changed since it was
    #: read (nothing more is written by this pass).
    conflicted: bool = field(init=False, default=False)
    #: The resourceVersion after this pass's own :meth:`write_ahead` (``None``: none yet).
    _written_version: str | None = field(init=False, default=None)

    def __post_init__(self) -> None:
        raw = Body(self.body).status
        self._stored = {} if raw is None else plain_json(raw)
        self._status, dropped = read_tolerantly(self.status_model, self._stored)
        if dropped:
            log.warning(
                "%s %s/%s: status fields %s are not valid; they read as unset",
                self.plural,
                self.namespace,
                self.name,
                ", ".join(dropped),
            )
        self.now = self.clock()

    # --- identity ---------------------------------------------------------------------

    @property
    def resource(self) -> Body:
        """The body read, typed (:class:`~gic_operator.kube.bodies.Body`)."""
        return Body(self.body)

    @property
    def name(self) -> str:
        return self.resource.name

    @property
    def namespace(self) -> str:
        return self.resource.namespace

    @property
    def uid(self) -> str:
        return self.resource.uid

    @property
    def generation(self) -> int:
        return self.resource.generation

    @property
    def resource_version(self) -> str | None:
        """The version the next patch is conditional on: the body's, or the one this
        pass's own :meth:`write_ahead` produced."""
        return self._written_version or self.resource.resource_version

    @property
    def annotations(self) -> Mapping[str, str]:
        return self.resource.annotations

    @property
    def labels(self) -> Mapping[str, str]:
        return self.resource.labels

    @property
    def deleting(self) -> bool:
        return self.resource.deleting

    # --- the status ---------------------------------------------------------------------

    @property
    def status(self) -> S:
        """The working status (frozen; change it with :meth:`update`)."""
        return self._status

    def stored(self, field_name: str) -> Any:
        """The stored (JSON) value of field ``field_name``, valid or not (``None`` when
        absent): for telling "absent" from "dropped as invalid" and for messages only."""
        info = self.status_model.model_fields[field_name]
        return self._stored.get(info.alias or field_name)

    def update(self, **values: Any) -> None:
        """Set status fields (Python names, e.g. ``driver_pod``); ``None`` removes one.
        The values are validated by the status model (a wrong name or type raises); a
        text field (:data:`TEXT_FIELDS`) is cut to
        :data:`~gic_operator.kube.kube_events.STATUS_TEXT_MAX` characters."""
        values = {
            name: bounded_text(value) if name in TEXT_FIELDS and isinstance(value, str) else value
            for name, value in values.items()
        }
        fields = self.status_model.model_fields
        unknown = sorted(set(values) - set(fields))
        if unknown:
            raise TypeError(f"{self.status_model.__name__} has no fields {unknown}")
        current = {name: getattr(self._status, name) for name in fields}
        self._status = self.status_model.model_validate({**current, **values})
        self._updated.update(values)

    def condition(self, type_: str, status: bool | None, reason: str, message: str) -> None:
        conditions = set_condition(
            [c.to_kube() for c in self._status.condition_list()],
            type_,
            status,
            reason,
            bounded_text(message),
            now=self.now,
            generation=self.generation,
        )
        self.update(conditions=[Condition.model_validate(c) for c in conditions])

    def event(self, type_: str, reason: str, message: str) -> None:
        """Queue a Kubernetes Event (``Normal`` or ``Warning``) for after the patch; its
        message is cut to :data:`~gic_operator.kube.kube_events.EVENT_MESSAGE_MAX`."""
        self._events.append((type_, reason, bounded_text(message, EVENT_MESSAGE_MAX)))

    def changed(self) -> dict[str, Any]:
        """The merge patch from the stored status to the working one."""
        return status_patch(self._stored, self._status, self._updated)

    def write_ahead(self) -> bool:
        """Write the working status now, before a side effect that must never happen
        without it being recorded (an epoch claimed in storage), under the same
        precondition as :meth:`commit`. True when it is stored (the rest of the pass
        patches on top of it, conditional on the version this write produced); False
        when the object changed since it was read: nothing was written, the pass must
        not perform that side effect, and :meth:`commit` writes nothing either. Queued
        events wait for :meth:`commit`."""
        if self.conflicted:
            return False
        patch = self.changed()
        if not patch:
            return True
        if not self._patch(patch):
            return False
        self._stored = merge_patch(self._stored, patch)
        self._updated.clear()
        return True

    def commit(self) -> dict[str, Any]:
        """Patch the status (when it changed) then post the queued events; return the
        patch (empty when the object changed since it was read: nothing was written)."""
        if self.conflicted:
            self._events.clear()
            return {}
        patch = self.changed()
        if patch and not self._patch(patch):
            return {}
        for type_, reason, message in self._events:
            log.info("%s/%s %s %s: %s", self.namespace, self.name, type_, reason, message)
            self.kube.event(self.body, type_, reason, message)
        self._events.clear()
        return patch

    def _patch(self, patch: Mapping[str, Any]) -> bool:
        """Send ``patch`` conditional on :attr:`resource_version`; False (and the pass
        marked :attr:`conflicted`, its events dropped) on a 409 Conflict."""
        try:
            version = self.kube.patch_status(
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
            return False
        if version is not None:
            self._written_version = version
        return True


#: The pass of a GICJob and of a Savepoint.
JobPass = Pass[GICJobStatus]
SavepointPass = Pass[SavepointStatus]


def status_patch(
    stored: Mapping[str, Any], status: BaseModel, fields: Collection[str]
) -> dict[str, Any]:
    """The JSON merge patch that takes the ``stored`` status (JSON, camelCase) to
    ``status`` in the model's ``fields`` (Python names; the others are taken as
    unchanged).

    A field is sent when applying it would change the stored status: a field that is
    ``None`` as ``null`` when the stored status has it; a nested object whole (the API
    server merges it into the stored one, so fields of another version in it are kept),
    with ``null`` for the fields its model knows that it lacks and the stored one has.
    """
    model_fields = type(status).model_fields
    names = [name for name in model_fields if name in fields]
    dumped = status.model_dump(mode="json", by_alias=True, exclude_none=True, include=set(names))
    patch: dict[str, Any] = {}
    for name in names:
        info = model_fields[name]
        key = info.alias or name
        old = stored.get(key)
        if key not in dumped:
            if old is not None:
                patch[key] = None
            continue
        new = dumped[key]
        if isinstance(new, dict) and isinstance(old, dict):
            gone = {k: None for k in _known_keys(info.annotation) if k in old and k not in new}
            new = {**new, **gone}
        if old is None or _merged(old, new) != old:
            patch[key] = new
    return patch


def _known_keys(annotation: Any) -> set[str]:
    """The JSON names of the fields of every model in ``annotation`` (``X | None``, a
    union of models)."""
    if get_origin(annotation) in (Union, types.UnionType):
        return set().union(*(_known_keys(arg) for arg in get_args(annotation)))
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return {info.alias or name for name, info in annotation.model_fields.items()}
    return set()


def _merged(old: Any, patch: Any) -> Any:
    """``old`` with the JSON merge patch ``patch`` applied (RFC 7386)."""
    if not isinstance(patch, dict):
        return patch
    out = dict(old) if isinstance(old, dict) else {}
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = _merged(out.get(key), value)
    return out
