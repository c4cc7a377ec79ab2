"""WATCH streams of the Kubernetes API emulator, as the event lines a client reads.

A watch starts from a resource version: none (or ``0``) means "the current objects as
ADDED, then what follows"; a version means "the events after it", replayed from the
store's history, or a single ``410 Expired`` ERROR event when that history is gone. With
``sendInitialEvents=true`` the initial ADDED events end with a BOOKMARK annotated
``k8s.io/initial-events-end``. Then live events follow until ``timeoutSeconds``, the
client leaves, or the server stops (a ``None`` in the queue).

Selectors are applied to each event as a real server does: an update that makes an
object match arrives as ADDED, one that makes it stop matching as DELETED.

Invariant: between taking the snapshot (or the replay) and subscribing to live events
there is no ``await``, so no event falls in between.

Thread-safety: runs in the emulator's event loop only.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from typing import Any

from gic_operator.testing.kube_errors import ApiError
from gic_operator.testing.kube_objects import render
from gic_operator.testing.kube_resources import ResourceType
from gic_operator.testing.kube_selectors import FieldSelector, LabelSelector
from gic_operator.testing.kube_store import KubeStore, WatchEvent

WatchQueue = asyncio.Queue[WatchEvent | None]


@dataclass(frozen=True)
class WatchScope:
    """What one watch covers: a resource, maybe one namespace, and selectors."""

    rtype: ResourceType
    namespace: str | None
    labels: LabelSelector
    fields: FieldSelector

    def _matches(self, obj: dict[str, Any] | None) -> bool:
        return obj is not None and self.labels.matches(obj) and self.fields.matches(obj)

    def translate(self, event: WatchEvent) -> dict[str, Any] | None:
        """The event as this watch reports it, or None when it does not concern it."""
        if event.storage_key != self.rtype.storage_key:
            return None
        if self.namespace is not None and event.obj["metadata"].get("namespace") != self.namespace:
            return None
        now, before = self._matches(event.obj), self._matches(event.old)
        kind: str | None = None
        if event.type == "ADDED":
            kind = "ADDED" if now else None
        elif event.type == "MODIFIED":
            kind = ("MODIFIED" if before else "ADDED") if now else ("DELETED" if before else None)
        elif now or before:
            kind = "DELETED"
        return None if kind is None else {"type": kind, "object": render(self.rtype, event.obj)}


async def stream_events(
    store: KubeStore, scope: WatchScope, params: Mapping[str, str], open_watches: set[WatchQueue]
) -> AsyncIterator[Any]:
    """Yield ``b""`` (to send the headers) and then watch events, as dicts."""
    timeout = float(params.get("timeoutSeconds") or 0)
    deadline = time.monotonic() + timeout if timeout > 0 else float("inf")
    since = params.get("resourceVersion") or ""
    initial_events = params.get("sendInitialEvents") == "true"
    backlog: list[dict[str, Any]] = []
    if since in ("", "0") or initial_events:
        listing = store.list_objects(scope.rtype, scope.namespace, scope.labels, scope.fields)
        backlog = [{"type": "ADDED", "object": item} for item in listing["items"]]
    else:
        replay = store.events_since(int(since)) if since.isdigit() else None
        if replay is None:
            yield b""
            expired = ApiError(410, "Expired", f"too old resource version: {since}")
            yield {"type": "ERROR", "object": expired.status()}
            return
        backlog = [e for e in map(scope.translate, replay) if e is not None]
    if initial_events:
        annotations = {"k8s.io/initial-events-end": "true"}
        metadata = {"resourceVersion": str(store.resource_version), "annotations": annotations}
        bookmark = {"kind": scope.rtype.kind, "apiVersion": scope.rtype.group_version}
        backlog.append({"type": "BOOKMARK", "object": {**bookmark, "metadata": metadata}})
    queue: WatchQueue = asyncio.Queue()
    unsubscribe = store.subscribe(queue.put_nowait)
    open_watches.add(queue)
    try:
        yield b""  # send the headers now, even when nothing happens for a while
        for event in backlog:
            yield event
        while (remaining := deadline - time.monotonic()) > 0:
            try:
                item = await asyncio.wait_for(queue.get(), timeout=min(remaining, 5.0))
            except TimeoutError:
                continue
            if item is None:
                return
            translated = scope.translate(item)
            if translated is not None:
                yield translated
    finally:
        unsubscribe()
        open_watches.discard(queue)
