"""Kubernetes Events the operator posts: their bodies and their aggregation.

An Event is a ``core/v1`` Event on one object (``involvedObject`` from the object's
``apiVersion``, ``kind`` and ``metadata``), with a count and first/last timestamps.
Like kubectl's event recorder, a repeat of the same Event (same object, type, reason and
message) within :data:`EVENT_AGGREGATE_S` raises the count of the one already posted
instead of posting another, so a reconciler repeating itself every few seconds does not
flood the namespace. :class:`EventCache` remembers what was posted recently.

Errors a reconcile meets are reported on every pass that meets them, but posted as a
Warning Event only when they change: :class:`ErrorEventGate` lets one through when the
resource's error (reason, message) differs from the last one posted for it, or when
:data:`ERROR_REPEAT_S` passed since; a repeat then says how often the error was met in
between.

Invariants: messages longer than :data:`EVENT_MESSAGE_MAX` characters are cut (ending
in ``...``), and :func:`bounded_text` cuts every text the operator writes into a status
to :data:`STATUS_TEXT_MAX`; the cache and the gate hold at most their ``size`` entries
(least recently used dropped).

Thread-safety: the functions are pure; an :class:`EventCache` and an
:class:`ErrorEventGate` may be shared between threads (guarded by a lock).
"""

from __future__ import annotations

import threading
import time
import uuid
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from gic_operator.kube.bodies import Body

#: Longest Event message posted (longer ones are cut).
EVENT_MESSAGE_MAX = 1024
#: Longest text written into a status field (``status.message``, a condition's message,
#: a Savepoint's ``error``); longer ones are cut.
STATUS_TEXT_MAX = 4096
#: Repeats within this many seconds raise the count of the Event already posted.
EVENT_AGGREGATE_S = 600.0
#: An unchanged error of a resource is posted again at most this often (seconds).
ERROR_REPEAT_S = 600.0

EventKey = tuple[str, ...]


@dataclass(frozen=True)
class RecentEvent:
    """An Event posted recently: its name, count so far, first timestamp (RFC 3339)
    and when it was last posted or counted (monotonic seconds)."""

    name: str
    count: int
    first: str
    at: float


def bounded_text(text: str, limit: int = STATUS_TEXT_MAX) -> str:
    """``text`` cut to at most ``limit`` characters (ending in ``...`` when cut): every
    text the operator writes into a status or an Event goes through here, so whatever a
    driver, a file or an error quotes, no status patch grows past what the API server
    accepts."""
    if len(text) <= limit:
        return text
    return text[: limit - 3] + "..."


def event_message(message: str) -> str:
    """``message`` cut to :data:`EVENT_MESSAGE_MAX` characters."""
    return bounded_text(message, EVENT_MESSAGE_MAX)


def _namespace_and_name(obj: Mapping[str, Any]) -> tuple[str, str]:
    body = Body(obj)
    return body.namespace, body.name


def event_key(obj: Mapping[str, Any], type: str, reason: str, message: str) -> EventKey:
    """What makes two Events the same (for aggregation)."""
    namespace, name = _namespace_and_name(obj)
    uid = Body(obj).uid or name
    return (namespace, uid, type, reason, event_message(message))


def event_body(
    obj: Mapping[str, Any], type: str, reason: str, message: str, *, component: str, now: str
) -> dict[str, Any]:
    """A new Event (count 1, a fresh name) on ``obj``, posted by ``component`` at
    ``now`` (RFC 3339)."""
    meta = Body(obj).metadata
    namespace, name = _namespace_and_name(obj)
    involved = {
        "apiVersion": obj.get("apiVersion"),
        "kind": obj.get("kind"),
        "name": name,
        "namespace": namespace,
        "uid": meta.get("uid"),
    }
    return {
        "metadata": {"name": f"{name[:200]}.{uuid.uuid4().hex[:16]}", "namespace": namespace},
        "involvedObject": {k: v for k, v in involved.items() if v is not None},
        "type": type,
        "reason": reason,
        "message": event_message(message),
        "count": 1,
        "firstTimestamp": now,
        "lastTimestamp": now,
        "source": {"component": component},
        "reportingComponent": component,
    }


class EventCache:
    """Events posted recently, by :func:`event_key` (see the module docstring)."""

    def __init__(
        self,
        size: int = 512,
        window_s: float = EVENT_AGGREGATE_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._size = size
        self._window_s = window_s
        self._clock = clock
        self._lock = threading.Lock()
        self._recent: OrderedDict[EventKey, RecentEvent] = OrderedDict()

    def recent(self, key: EventKey) -> RecentEvent | None:
        """The Event posted for ``key`` within the aggregation window, if any."""
        with self._lock:
            found = self._recent.get(key)
        if found is None or self._clock() - found.at >= self._window_s:
            return None
        return found

    def remember(self, key: EventKey, name: str, count: int, first: str) -> None:
        """Record that Event ``name`` for ``key`` now has ``count``."""
        with self._lock:
            self._recent[key] = RecentEvent(name, count, first, self._clock())
            self._recent.move_to_end(key)
            while len(self._recent) > self._size:
                self._recent.popitem(last=False)


@dataclass(frozen=True)
class _ErrorSeen:
    reason: str
    message: str
    posted_at: float
    since_post: int


class ErrorEventGate:
    """Decides which errors become Warning Events (see the module docstring)."""

    def __init__(
        self,
        size: int = 2048,
        repeat_s: float = ERROR_REPEAT_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._size = size
        self._repeat_s = repeat_s
        self._clock = clock
        self._lock = threading.Lock()
        self._seen: OrderedDict[tuple[str, ...], _ErrorSeen] = OrderedDict()

    def admit(self, key: tuple[str, ...], reason: str, message: str) -> str | None:
        """The Event message to post for error ``reason``/``message`` of resource ``key``
        met now, or ``None`` when it is a recent repeat (only counted)."""
        now = self._clock()
        with self._lock:
            seen = self._seen.get(key)
            same = seen is not None and (seen.reason, seen.message) == (reason, message)
            if seen is not None and same and now - seen.posted_at < self._repeat_s:
                self._seen[key] = _ErrorSeen(reason, message, seen.posted_at, seen.since_post + 1)
                self._seen.move_to_end(key)
                return None
            repeats = seen.since_post if seen is not None and same else 0
            self._seen[key] = _ErrorSeen(reason, message, now, 0)
            self._seen.move_to_end(key)
            while len(self._seen) > self._size:
                self._seen.popitem(last=False)
        if repeats:
            minutes = max(1, round(self._repeat_s / 60))
            return f"{message} (met {repeats + 1} times in the last {minutes} min)"
        return message

    def clear(self, key: tuple[str, ...]) -> None:
        """The resource's error is gone: its next error is posted at once."""
        with self._lock:
            self._seen.pop(key, None)
