"""Firing a task's due timers (:mod:`gic_runtime.state.timers`) at the end of a batch.

After a task processed its rows, every timer of its buckets that is due fires: event-
time timers at or below the batch's watermark, processing-time timers at or below its
processing time. They fire in time order (then domain, bucket, key), each popped just
before its handler runs, so a handler that deletes a later due timer of its key keeps
it from firing. Timers registered while firing (by a handler) wait for the next batch,
even when already due, so a handler that re-registers its own time cannot loop.

Invariant: popping a timer is a state change of the batch like any other, so a timer
fires, with its output, in exactly the checkpoint whose batch popped it.

Not thread-safe: runs on the task thread that owns the backend.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pyarrow as pa

from gic_runtime.event_time import BatchTime
from gic_runtime.state.backend import KeyedStateBackend
from gic_runtime.state.timers import DueTimer, Timer

__all__ = ["FIRED_SCHEMA_NAMES", "due_now", "fired_table", "pop_due"]

FIRED_SCHEMA_NAMES = ("key", "domain", "at")
"""Columns of the table a vectorized timer handler receives."""


def _due(backend: KeyedStateBackend, time: BatchTime) -> list[DueTimer]:
    timers = backend.timer_state()
    buckets = backend.bucket_range
    due = timers.due(buckets, "event", time.watermark_us)
    due += timers.due(buckets, "processing", time.processing_time_us)
    due.sort()
    return due


def due_now(backend: KeyedStateBackend, time: BatchTime) -> Iterator[tuple[Any, Timer]]:
    """Pop and yield ``(key, timer)`` for every timer of ``backend``'s buckets due in the
    batch at ``time``, each popped just before it is yielded (see the module docstring
    for order and what is skipped)."""
    timers = backend.timer_state()
    for item in _due(backend, time):
        key = timers.pop(item)
        if key is not None:
            yield key, item.timer


def pop_due(backend: KeyedStateBackend, time: BatchTime) -> list[tuple[DueTimer, Any]]:
    """Pop every timer due in the batch at ``time`` at once, in bulk (for handlers that
    see all of them together, so none can delete another first): ``(due timer, key)``
    in firing order."""
    return backend.timer_state().pop_many(_due(backend, time))


def fired_table(fired: list[tuple[Any, Timer]]) -> pa.Table:
    """The fired timers as a table: ``key``, ``domain`` (string) and ``at``
    (timestamp[us, UTC]), in firing order."""
    return pa.table(
        {
            "key": pa.array([k for k, _ in fired]),
            "domain": pa.array([t.domain for _, t in fired], pa.string()),
            "at": pa.array([t.at_us for _, t in fired], pa.timestamp("us", tz="UTC")),
        }
    )
