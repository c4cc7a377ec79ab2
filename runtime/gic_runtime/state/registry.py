"""The named states of a backend, and where time stands for its batch.

:class:`StateRegistry` is the part of :class:`~gic_runtime.state.backend.KeyedStateBackend`
that hands out states by name -- value, map and list, each with or without a time to
live (:mod:`gic_runtime.state.ttl_states`), and the timers
(:mod:`gic_runtime.state.timers`) -- and keeps the batch's time for TTL deadlines and
expiry (:mod:`gic_runtime.state.ttl`).

Invariants: one state object per name; a name keeps one kind and one TTL for the life
of the backend (asking for it otherwise is a StateError naming both declarations).

Not thread-safe: used by the task thread that owns the backend.
"""

from __future__ import annotations

import time as _clock
from typing import Any, cast, overload

from gic_runtime.errors import StateError
from gic_runtime.event_time import BatchTime
from gic_runtime.state.keys import KIND_NAMES
from gic_runtime.state.states import ListState, MapState, ValueState
from gic_runtime.state.timers import Domain, TimerState
from gic_runtime.state.ttl import TTL, expire_due
from gic_runtime.state.ttl_states import (
    TTLListState,
    TTLMapState,
    TTLStateBackend,
    TTLValueState,
)

__all__ = ["StateRegistry"]


class StateRegistry:
    """Named states and batch time of a backend (mixed into the backend, which routes
    and dual-writes for the states it hands out)."""

    bucket_range: range

    def __init__(self) -> None:
        self._states: dict[str, Any] = {}
        self._timers: TimerState | None = None
        self._time: BatchTime | None = None

    def _owner(self) -> TTLStateBackend:
        return cast(TTLStateBackend, self)

    def _state(self, cls: type[Any], name: str, ttl: TTL | None) -> Any:
        existing = self._states.get(name)
        if existing is None:
            owner = self._owner()
            made = cls(owner, name) if ttl is None else cls(owner, name, ttl)
            existing = self._states[name] = made
        elif not isinstance(existing, cls) or getattr(existing, "ttl", None) != ttl:
            raise StateError(
                f"state {name!r} is a {_describe(type(existing), existing)} state, not a "
                f"{_describe(cls, None, ttl)} state; use another name, or declare it the "
                "same way everywhere"
            )
        return existing

    @overload
    def value_state(self, name: str, ttl: None = None) -> ValueState: ...
    @overload
    def value_state(self, name: str, ttl: TTL) -> TTLValueState: ...
    def value_state(self, name: str, ttl: TTL | None = None) -> ValueState | TTLValueState:
        """The value state ``name`` (with ``ttl``: its values expire)."""
        result: ValueState | TTLValueState = self._state(
            ValueState if ttl is None else TTLValueState, name, ttl
        )
        return result

    @overload
    def map_state(self, name: str, ttl: None = None) -> MapState: ...
    @overload
    def map_state(self, name: str, ttl: TTL) -> TTLMapState: ...
    def map_state(self, name: str, ttl: TTL | None = None) -> MapState | TTLMapState:
        """The map state ``name`` (with ``ttl``: its entries expire)."""
        result: MapState | TTLMapState = self._state(
            MapState if ttl is None else TTLMapState, name, ttl
        )
        return result

    @overload
    def list_state(self, name: str, ttl: None = None) -> ListState: ...
    @overload
    def list_state(self, name: str, ttl: TTL) -> TTLListState: ...
    def list_state(self, name: str, ttl: TTL | None = None) -> ListState | TTLListState:
        """The list state ``name`` (with ``ttl``: its elements expire)."""
        result: ListState | TTLListState = self._state(
            ListState if ttl is None else TTLListState, name, ttl
        )
        return result

    def timer_state(self) -> TimerState:
        """The timers of this backend's keys (:mod:`gic_runtime.state.timers`)."""
        if self._timers is None:
            self._timers = TimerState(self._owner())
        return self._timers

    # --- time ----------------------------------------------------------------------------

    def set_batch_time(self, time: BatchTime) -> None:
        """Where time stands for the batch now running (TTL deadlines and expiry)."""
        self._time = time

    def now_us(self, domain: Domain) -> int | None:
        """The batch's time in ``domain``: its processing time (the clock, before a batch
        time was set) or its watermark (``None`` before the first)."""
        t = self._time
        if domain == "event":
            return None if t is None else t.watermark_us
        return _clock.time_ns() // 1000 if t is None else t.processing_time_us

    def expire(self) -> int:
        """Remove the entries whose TTL has passed at the batch's time
        (:func:`~gic_runtime.state.ttl.expire_due`); returns how many expired."""
        return expire_due(self._owner(), self.bucket_range, self._owner())


def _describe(cls: type[Any], state: Any, ttl: TTL | None = None) -> str:
    kind = KIND_NAMES[cls.kind]
    ttl = getattr(state, "ttl", None) if state is not None else ttl
    return kind if ttl is None else f"{kind} (ttl {ttl.describe()})"
