"""State facades: how processing functions see a task's keyed state.

:class:`StateAccess` hands out a task's named states, each method taking explicit keys
(the vectorized style of :class:`~gic_runtime.processing.processors.BatchProcessor`);
:class:`KeyState` binds them to one key (the per-key style of
:class:`~gic_runtime.processing.processors.PerKeyProcessor`), through
:class:`BoundValue`, :class:`BoundMap`, :class:`BoundList` and :class:`BoundTimers`.
Both tell where time stands in the batch (``watermark``, ``processing_time``) and hand
out the timers (:mod:`gic_runtime.state.timers`) when the processor has a timer handler.

Invariants: a facade caches nothing -- every call goes straight to the
task's :class:`~gic_runtime.state.backend.KeyedStateBackend` (so every change is
dual-written to the changelog); a bound facade only ever touches the key it was bound
to; ``batch_id`` is the micro-batch being processed; timers are refused (StateError)
unless the processor has a handler to fire them.

Not thread-safe: used on the task thread that owns the backend.
"""

from __future__ import annotations

import time as _time
from collections.abc import Iterable
from datetime import datetime
from typing import Any

from gic_runtime.errors import StateError
from gic_runtime.event_time import BatchTime
from gic_runtime.state.backend import KeyedStateBackend
from gic_runtime.state.states import ListState, MapState, ValueState
from gic_runtime.state.timers import Timer, TimerState, TimeValue, from_micros
from gic_runtime.state.ttl import TTL
from gic_runtime.state.ttl_states import TTLListState, TTLMapState, TTLValueState

__all__ = ["BoundList", "BoundMap", "BoundTimers", "BoundValue", "KeyState", "StateAccess"]

_NO_HANDLER = (
    "timers need a handler that fires them: pass on_timer= to process() "
    "(on_timers= to process_batches())"
)


class StateAccess:
    """Named states of a task, each method taking explicit keys (vectorized style)."""

    def __init__(
        self,
        backend: KeyedStateBackend,
        batch_id: int,
        time: BatchTime | None = None,
        *,
        timers: bool = False,
    ) -> None:
        self.backend = backend
        self.batch_id = batch_id
        self.time = time or BatchTime(batch_id, _time.time_ns() // 1000)
        self._timers_enabled = timers
        self._ttls: dict[tuple[str | float, str], TTL] = {}
        backend.set_batch_time(self.time)

    def _ttl(self, ttl: str | float | None, ttl_by: str) -> TTL | None:
        if ttl is None:
            return None
        found = self._ttls.get((ttl, ttl_by))
        if found is None:
            found = self._ttls[(ttl, ttl_by)] = TTL.parse(ttl, ttl_by)
        return found

    @property
    def watermark(self) -> datetime | None:
        """The event-time watermark this batch runs with (``None``: none yet)."""
        w = self.time.watermark_us
        return None if w is None else from_micros(w)

    @property
    def processing_time(self) -> datetime:
        """This batch's processing time (UTC)."""
        return from_micros(self.time.processing_time_us)

    @property
    def timers(self) -> TimerState:
        """The task's timers, each method taking the key."""
        if not self._timers_enabled:
            raise StateError(_NO_HANDLER)
        return self.backend.timer_state()

    def value(
        self, name: str, ttl: str | float | None = None, ttl_by: str = "processing"
    ) -> ValueState | TTLValueState:
        """The value state ``name``; with ``ttl`` (``"30 days"``, or seconds) its values
        expire that long after they were set, in ``ttl_by`` time (``"processing"`` or
        ``"event"``)."""
        spec = self._ttl(ttl, ttl_by)
        if spec is None:
            return self.backend.value_state(name)
        return self.backend.value_state(name, spec)

    def map(
        self, name: str, ttl: str | float | None = None, ttl_by: str = "processing"
    ) -> MapState | TTLMapState:
        """The map state ``name``; with ``ttl`` each entry expires that long after it was
        put."""
        spec = self._ttl(ttl, ttl_by)
        if spec is None:
            return self.backend.map_state(name)
        return self.backend.map_state(name, spec)

    def list(
        self, name: str, ttl: str | float | None = None, ttl_by: str = "processing"
    ) -> ListState | TTLListState:
        """The list state ``name``; with ``ttl`` each element expires that long after it
        was appended."""
        spec = self._ttl(ttl, ttl_by)
        if spec is None:
            return self.backend.list_state(name)
        return self.backend.list_state(name, spec)


class BoundValue:
    """A value state bound to one key."""

    def __init__(self, state: ValueState | TTLValueState, key: Any) -> None:
        self._state, self._key = state, key

    def get(self, default: Any = None) -> Any:
        return self._state.get(self._key, default)

    def set(self, value: Any) -> None:
        self._state.set(self._key, value)

    def clear(self) -> None:
        self._state.clear(self._key)


class BoundMap:
    """A map state bound to one key."""

    def __init__(self, state: MapState | TTLMapState, key: Any) -> None:
        self._state, self._key = state, key

    def get(self, user_key: Any, default: Any = None) -> Any:
        return self._state.get(self._key, user_key, default)

    def contains(self, user_key: Any) -> bool:
        return self._state.contains(self._key, user_key)

    def put(self, user_key: Any, value: Any) -> None:
        self._state.put(self._key, user_key, value)

    def remove(self, user_key: Any) -> None:
        self._state.remove(self._key, user_key)

    def items(self) -> list[tuple[Any, Any]]:
        return self._state.items(self._key)

    def keys(self) -> list[Any]:
        return self._state.keys(self._key)

    def clear(self) -> None:
        self._state.clear(self._key)


class BoundList:
    """A list state bound to one key."""

    def __init__(self, state: ListState | TTLListState, key: Any) -> None:
        self._state, self._key = state, key

    def get(self) -> list[Any]:
        return self._state.get(self._key)

    def append(self, value: Any) -> None:
        self._state.append(self._key, value)

    def extend(self, values: Iterable[Any]) -> None:
        self._state.extend(self._key, values)

    def clear(self) -> None:
        self._state.clear(self._key)


class BoundTimers:
    """The timers of one key: ``register(at, domain="event")``, ``delete``, ``list``,
    ``clear`` (see :class:`~gic_runtime.state.timers.TimerState`)."""

    def __init__(self, state: TimerState, key: Any) -> None:
        self._state, self._key = state, key

    def register(self, at: TimeValue, domain: str = "event") -> None:
        self._state.register(self._key, at, domain)

    def delete(self, at: TimeValue, domain: str = "event") -> None:
        self._state.delete(self._key, at, domain)

    def list(self, domain: str | None = None) -> list[Timer]:
        return self._state.list(self._key, domain)

    def clear(self, domain: str | None = None) -> int:
        return self._state.clear(self._key, domain)


class KeyState:
    """The states of one key (per-key style): ``state.value("count").get(0)``."""

    def __init__(self, access: StateAccess, key: Any) -> None:
        self._access = access
        self.key = key
        self.batch_id = access.batch_id

    @property
    def watermark(self) -> datetime | None:
        """The event-time watermark this batch runs with (``None``: none yet)."""
        return self._access.watermark

    @property
    def processing_time(self) -> datetime:
        """This batch's processing time (UTC)."""
        return self._access.processing_time

    @property
    def timers(self) -> BoundTimers:
        """This key's timers."""
        return BoundTimers(self._access.timers, self.key)

    def value(
        self, name: str, ttl: str | float | None = None, ttl_by: str = "processing"
    ) -> BoundValue:
        """The key's value in state ``name`` (``ttl``: see :meth:`StateAccess.value`)."""
        return BoundValue(self._access.value(name, ttl, ttl_by), self.key)

    def map(
        self, name: str, ttl: str | float | None = None, ttl_by: str = "processing"
    ) -> BoundMap:
        """The key's map in state ``name`` (``ttl``: see :meth:`StateAccess.map`)."""
        return BoundMap(self._access.map(name, ttl, ttl_by), self.key)

    def list(
        self, name: str, ttl: str | float | None = None, ttl_by: str = "processing"
    ) -> BoundList:
        """The key's list in state ``name`` (``ttl``: see :meth:`StateAccess.list`)."""
        return BoundList(self._access.list(name, ttl, ttl_by), self.key)
