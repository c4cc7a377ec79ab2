"""Keyed states with a time to live: value, map and list whose entries expire
(:mod:`gic_runtime.state.ttl` for deadlines, the expiry index and removal).

They offer the calls of :mod:`gic_runtime.state.states` (bulk value calls included,
except the located ones), with explicit keys, and differ in two ways: every write
stores the entry's deadline and lists it in the expiry index (one more change per
write), and every read skips entries whose deadline has passed at the batch's time.

Invariants: an expired entry is never returned; writes are dual-written like every
change; a state's TTL is part of its declaration (the backend refuses the same name
with another TTL).

Not thread-safe: used by the task thread that owns the backend.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Protocol

from gic_runtime.changelog.records import Op
from gic_runtime.state.keys import (
    KIND_LIST_TTL,
    KIND_MAP_TTL,
    KIND_VALUE_TTL,
    decode_key,
    encode,
    state_prefix,
)
from gic_runtime.state.states import StateBackend
from gic_runtime.state.ttl import (
    PENDING,
    TTL,
    Clock,
    index_entry,
    split_elements,
    unwrap,
    wrap,
)

__all__ = ["TTLListState", "TTLMapState", "TTLValueState"]


class TTLStateBackend(StateBackend, Clock, Protocol):
    """What a TTL state needs: a state backend that knows the batch's time."""


class _TTLState:
    kind = b""

    def __init__(self, backend: TTLStateBackend, name: str, ttl: TTL) -> None:
        self._backend = backend
        self._store = backend.store
        self.name = name
        self.ttl = ttl
        self._prefix = state_prefix(self.kind, name)

    def _locate(self, key: Any) -> tuple[int, bytes]:
        return self._backend.route(key), self._prefix + encode(key)

    def _now(self) -> int | None:
        return self._backend.now_us(self.ttl.by)

    def _deadline(self) -> int:
        now = self._now()
        return PENDING if now is None else now + self.ttl.duration_us

    def _live(self, deadline: int, now: int | None) -> bool:
        return now is None or deadline == PENDING or deadline > now

    def _index(self, bucket: int, skey: bytes, deadline: int) -> None:
        self._backend.write(bucket, Op.PUT, *index_entry(self.ttl, deadline, skey))

    def _put(self, bucket: int, skey: bytes, value: Any) -> None:
        deadline = self._deadline()
        self._backend.write(bucket, Op.PUT, skey, wrap(deadline, self.ttl, encode(value)))
        self._index(bucket, skey, deadline)

    def _get(self, bucket: int, skey: bytes, default: Any) -> Any:
        raw = self._store.get(bucket, skey)
        if raw is None:
            return default
        entry = unwrap(raw)
        return entry.value if self._live(entry.deadline, self._now()) else default


class TTLValueState(_TTLState):
    """One value per key, expiring ``ttl`` after it was last set."""

    kind = KIND_VALUE_TTL

    def get(self, key: Any, default: Any = None) -> Any:
        return self._get(*self._locate(key), default)

    def set(self, key: Any, value: Any) -> None:
        self._put(*self._locate(key), value)

    def clear(self, key: Any) -> None:
        bucket, skey = self._locate(key)
        self._backend.write(bucket, Op.DELETE, skey)

    def get_many(self, keys: Iterable[Any], default: Any = None) -> list[Any]:
        return [self.get(key, default) for key in keys]

    def set_many(self, items: Iterable[tuple[Any, Any]]) -> int:
        n = 0
        for key, value in items:
            self.set(key, value)
            n += 1
        return n


class TTLMapState(_TTLState):
    """A map per key whose entries expire ``ttl`` after they were last put."""

    kind = KIND_MAP_TTL

    def _entry(self, key: Any, user_key: Any) -> tuple[int, bytes]:
        bucket, skey = self._locate(key)
        return bucket, skey + encode(user_key)

    def get(self, key: Any, user_key: Any, default: Any = None) -> Any:
        return self._get(*self._entry(key, user_key), default)

    def contains(self, key: Any, user_key: Any) -> bool:
        missing = object()
        return self.get(key, user_key, missing) is not missing

    def put(self, key: Any, user_key: Any, value: Any) -> None:
        self._put(*self._entry(key, user_key), value)

    def remove(self, key: Any, user_key: Any) -> None:
        bucket, ekey = self._entry(key, user_key)
        self._backend.write(bucket, Op.DELETE, ekey)

    def items(self, key: Any) -> list[tuple[Any, Any]]:
        """Live ``(user_key, value)`` pairs of ``key``, ordered by encoded user key."""
        bucket, skey = self._locate(key)
        n, now = len(skey), self._now()
        out: list[tuple[Any, Any]] = []
        for k, raw in self._store.scan(bucket, skey):
            entry = unwrap(raw)
            if self._live(entry.deadline, now):
                out.append((decode_key(k[n:]), entry.value))
        return out

    def keys(self, key: Any) -> list[Any]:
        return [k for k, _ in self.items(key)]

    def clear(self, key: Any) -> None:
        bucket, skey = self._locate(key)
        self._backend.write(bucket, Op.DELETE_PREFIX, skey)


class TTLListState(_TTLState):
    """A list per key whose elements expire ``ttl`` after they were appended."""

    kind = KIND_LIST_TTL

    def get(self, key: Any) -> list[Any]:
        bucket, skey = self._locate(key)
        raw = self._store.get(bucket, skey)
        if raw is None:
            return []
        now = self._now()
        return [e.value for e in split_elements(raw) if self._live(e.deadline, now)]

    def append(self, key: Any, value: Any) -> None:
        self.extend(key, (value,))

    def extend(self, key: Any, values: Iterable[Any]) -> None:
        deadline = self._deadline()
        data = b"".join(wrap(deadline, self.ttl, encode(v)) for v in values)
        if data:
            bucket, skey = self._locate(key)
            self._backend.write(bucket, Op.APPEND, skey, data)
            self._index(bucket, skey, deadline)

    def clear(self, key: Any) -> None:
        bucket, skey = self._locate(key)
        self._backend.write(bucket, Op.DELETE, skey)
