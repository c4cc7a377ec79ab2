"""User-facing keyed states: value, map and list, with explicit keys.

Every method takes the key it works on; the key decides the bucket
(:func:`~gic_runtime.state.keys.bucket_for`) and must route into the backend's bucket
range. Each mutation becomes exactly one key-value change, applied to the store and
appended to the changelog (dual write, see :class:`~gic_runtime.state.backend.KeyedStateBackend`):

========================  =======================================================
``ValueState.set``        PUT ``prefix+key`` -> ``msgpack(value)``
``ValueState.clear``      DELETE ``prefix+key``
``MapState.put``          PUT ``prefix+key+user_key`` -> ``msgpack(value)``
``MapState.remove``       DELETE ``prefix+key+user_key``
``MapState.clear``        DELETE_PREFIX ``prefix+key``
``ListState.append``      APPEND ``prefix+key`` += ``msgpack(value)``
``ListState.extend``      APPEND ``prefix+key`` += concatenated encodings (one change)
``ListState.clear``       DELETE ``prefix+key``
========================  =======================================================

Bulk path (:meth:`ValueState.locate_many` and :meth:`MapState.locate_entries`, then
``get_located``, ``set_located``, ``set_changed`` and ``remove_located``): keys are
located once (bucket and store key; buckets may come precomputed from the routing side
and are then spot-checked), and reads and writes go to the store and the changelog one
run of same-bucket keys at a time. The changes are exactly those of the single-key
calls, in the same order; ``set_changed`` leaves out the calls that would store a value
equal to the one already there (no change, so nothing to store or log).

A state sees its backend only through :class:`StateBackend` (the store, routing and the
dual write), which :class:`~gic_runtime.state.backend.KeyedStateBackend` implements; this
module does not import the backend.

Not thread-safe: used by the task thread that owns the backend.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import Any, Protocol

from gic_runtime.changelog.records import Op
from gic_runtime.errors import StateError
from gic_runtime.state.keys import (
    KIND_LIST,
    KIND_MAP,
    KIND_VALUE,
    decode_key,
    decode_value,
    decode_values,
    encode,
    encode_many,
    state_prefix,
)
from gic_runtime.state.stores import KVStore


class StateBackend(Protocol):
    """What a state needs from the backend that owns it."""

    @property
    def store(self) -> KVStore:
        """The local store the states read."""
        ...

    def route(self, key: Any) -> int:
        """Bucket of ``key``; raises StateError if the backend does not own it."""
        ...

    def key_buckets(self, keys: Sequence[Any], buckets: Sequence[int] | None) -> list[int]:
        """Each key's bucket: routed, or ``buckets`` once they are checked to be owned
        and to agree with the routing on a sample (StateError otherwise)."""
        ...

    def write(self, bucket: int, op: Op, key: bytes, value: bytes = b"") -> int:
        """Apply one change to the store and the changelog; return its seq."""
        ...

    def write_many(
        self, bucket: int, op: Op, keys: Sequence[bytes], values: Sequence[bytes]
    ) -> int:
        """:meth:`write` of each ``(keys[i], values[i])`` in order; returns how many."""
        ...


class Located:
    """Store keys of a sequence of keys with their buckets, as runs of consecutive keys
    of one bucket (from :meth:`ValueState.locate_many`). Immutable once built."""

    __slots__ = ("runs", "store_keys")

    def __init__(self, store_keys: list[bytes], buckets: Sequence[int]) -> None:
        self.store_keys = store_keys
        runs: list[tuple[int, int, int]] = []
        start = 0
        n = len(buckets)
        while start < n:
            bucket = buckets[start]
            stop = start + 1
            while stop < n and buckets[stop] == bucket:
                stop += 1
            runs.append((bucket, start, stop))
            start = stop
        self.runs: tuple[tuple[int, int, int], ...] = tuple(runs)
        """``(bucket, start, stop)``: ``store_keys[start:stop]`` are in ``bucket``."""

    def __len__(self) -> int:
        return len(self.store_keys)

    def __iter__(self) -> Iterator[tuple[int, bytes]]:
        """``(bucket, store key)`` of each key, in order."""
        skeys = self.store_keys
        for bucket, start, stop in self.runs:
            for i in range(start, stop):
                yield bucket, skeys[i]


class _State:
    kind = b""

    def __init__(self, backend: StateBackend, name: str) -> None:
        self._backend = backend
        self._store = backend.store
        self.name = name
        self._prefix = state_prefix(self.kind, name)

    def _locate(self, key: Any) -> tuple[int, bytes]:
        return self._backend.route(key), self._prefix + encode(key)


class _LocatedEntries(_State):
    """Bulk reads and writes of single encoded values at :class:`Located` store keys
    (value states, and map states' entries)."""

    def get_located(self, located: Located, default: Any = None) -> list[Any]:
        """Values at ``located``, ``default`` where absent."""
        get_many = self._store.get_many
        skeys = located.store_keys
        out: list[Any] = []
        for bucket, start, stop in located.runs:
            out += [
                default if raw is None else decode_value(raw)
                for raw in get_many(bucket, skeys[start:stop])
            ]
        return out

    def set_located(self, located: Located, values: Sequence[Any]) -> int:
        """Set the values at ``located``, pairwise in order."""
        if len(values) != len(located):
            raise StateError(f"{len(values)} values for {len(located)} located keys")
        encoded = encode_many(values)
        skeys = located.store_keys
        write_many = self._backend.write_many
        for bucket, start, stop in located.runs:
            write_many(bucket, Op.PUT, skeys[start:stop], encoded[start:stop])
        return len(encoded)

    def set_changed(self, located: Located, old: Sequence[Any], new: Sequence[Any]) -> int:
        """Set the values ``new`` at ``located`` where they differ from ``old``, the
        values :meth:`get_located` read there (``None``: absent); returns how many were
        set. A value equal to the stored one is no change: leaving it out keeps the store
        as a write would, and logs nothing a replay would need (read-modify-write of
        running aggregates, where most values often stay: a maximum, a minimum).
        ``old`` must be what the store holds, read in the same batch, and ``located``
        must name each key once (a repeated key's later ``old`` would be stale)."""
        if len(new) != len(located) or len(old) != len(located):
            raise StateError(
                f"{len(old)} old and {len(new)} new values for {len(located)} located keys"
            )
        skeys = located.store_keys
        write_many = self._backend.write_many
        written = 0
        for bucket, start, stop in located.runs:
            picked = [i for i in range(start, stop) if old[i] is None or new[i] != old[i]]
            if not picked:
                continue
            if len(picked) == stop - start:
                keys, values = skeys[start:stop], new[start:stop]
            else:
                keys, values = [skeys[i] for i in picked], [new[i] for i in picked]
            write_many(bucket, Op.PUT, keys, encode_many(values))
            written += len(picked)
        return written

    def remove_located(self, located: Located) -> int:
        """Delete the values at ``located`` (each one change, also where absent)."""
        skeys = located.store_keys
        write_many = self._backend.write_many
        for bucket, start, stop in located.runs:
            write_many(bucket, Op.DELETE, skeys[start:stop], [b""] * (stop - start))
        return len(skeys)


class ValueState(_LocatedEntries):
    """One value per key."""

    kind = KIND_VALUE

    def get(self, key: Any, default: Any = None) -> Any:
        bucket, skey = self._locate(key)
        raw = self._store.get(bucket, skey)
        return default if raw is None else decode_value(raw)

    def set(self, key: Any, value: Any) -> None:
        bucket, skey = self._locate(key)
        self._backend.write(bucket, Op.PUT, skey, encode(value))

    def clear(self, key: Any) -> None:
        bucket, skey = self._locate(key)
        self._backend.write(bucket, Op.DELETE, skey)

    def get_many(self, keys: Iterable[Any], default: Any = None) -> list[Any]:
        """Values of ``keys`` in order (``default`` where absent)."""
        get = self._store.get
        out: list[Any] = []
        for key in keys:
            bucket, skey = self._locate(key)
            raw = get(bucket, skey)
            out.append(default if raw is None else decode_value(raw))
        return out

    def locate_many(self, keys: Sequence[Any], buckets: Sequence[int] | None = None) -> Located:
        """Buckets and store keys of ``keys``: compute once, then read and write through
        :meth:`get_located` / :meth:`set_located` (read-modify-write batches).

        ``buckets`` (optional) is each key's bucket as computed elsewhere (Spark's own
        ``pmod(xxhash64(key), B)`` on the routing side): then no key is hashed here
        except a sample that must agree (see :meth:`StateBackend.key_buckets`).
        Keys grouped by bucket (and ascending within it) read and write fastest."""
        bucket_list = self._backend.key_buckets(keys, buckets)
        return Located(encode_many(keys, self._prefix), bucket_list)

    def set_many(self, items: Iterable[tuple[Any, Any]]) -> int:
        """Set every ``(key, value)`` in order; returns how many."""
        write = self._backend.write
        n = 0
        for key, value in items:
            bucket, skey = self._locate(key)
            write(bucket, Op.PUT, skey, encode(value))
            n += 1
        return n


class MapState(_LocatedEntries):
    """A map of user keys to values per key."""

    kind = KIND_MAP

    def _entry(self, key: Any, user_key: Any) -> tuple[int, bytes]:
        bucket, skey = self._locate(key)
        return bucket, skey + encode(user_key)

    def locate_entries(
        self, keys: Sequence[Any], user_keys: Sequence[Any], buckets: Sequence[int] | None = None
    ) -> Located:
        """Buckets and store keys of the entries ``(keys[i], user_keys[i])``, for
        :meth:`get_located`, :meth:`set_located` and :meth:`remove_located` (``buckets``
        as for :meth:`ValueState.locate_many`)."""
        if len(user_keys) != len(keys):
            raise StateError(f"{len(user_keys)} user keys for {len(keys)} keys")
        bucket_list = self._backend.key_buckets(keys, buckets)
        entries = [
            k + u
            for k, u in zip(encode_many(keys, self._prefix), encode_many(user_keys), strict=True)
        ]
        return Located(entries, bucket_list)

    def locate_encoded(
        self, bucket: int, key_bytes: Sequence[bytes], user_keys: Sequence[Any]
    ) -> Located:
        """Store keys of the entries ``(key_bytes[i], user_keys[i])`` of ``bucket``, where
        ``key_bytes`` are keys as :func:`~gic_runtime.state.keys.encode` wrote them to
        this backend's own store (a timer's key, read from ``bucket``): neither routed
        nor spot-checked again."""
        if len(user_keys) != len(key_bytes):
            raise StateError(f"{len(user_keys)} user keys for {len(key_bytes)} keys")
        prefix = self._prefix
        entries = [prefix + k + u for k, u in zip(key_bytes, encode_many(user_keys), strict=True)]
        return Located(entries, [bucket] * len(entries))

    def get(self, key: Any, user_key: Any, default: Any = None) -> Any:
        bucket, ekey = self._entry(key, user_key)
        raw = self._store.get(bucket, ekey)
        return default if raw is None else decode_value(raw)

    def contains(self, key: Any, user_key: Any) -> bool:
        bucket, ekey = self._entry(key, user_key)
        return self._store.get(bucket, ekey) is not None

    def put(self, key: Any, user_key: Any, value: Any) -> None:
        bucket, ekey = self._entry(key, user_key)
        self._backend.write(bucket, Op.PUT, ekey, encode(value))

    def remove(self, key: Any, user_key: Any) -> None:
        bucket, ekey = self._entry(key, user_key)
        self._backend.write(bucket, Op.DELETE, ekey)

    def items(self, key: Any) -> list[tuple[Any, Any]]:
        """``(user_key, value)`` pairs of ``key``, ordered by encoded user key."""
        bucket, skey = self._locate(key)
        n = len(skey)
        return [(decode_key(k[n:]), decode_value(v)) for k, v in self._store.scan(bucket, skey)]

    def keys(self, key: Any) -> list[Any]:
        """User keys of ``key``, ordered by encoded user key."""
        bucket, skey = self._locate(key)
        n = len(skey)
        return [decode_key(k[n:]) for k, _ in self._store.scan(bucket, skey)]

    def clear(self, key: Any) -> None:
        bucket, skey = self._locate(key)
        self._backend.write(bucket, Op.DELETE_PREFIX, skey)


class ListState(_State):
    """A list of values per key (stored as concatenated msgpack encodings)."""

    kind = KIND_LIST

    def get(self, key: Any) -> list[Any]:
        bucket, skey = self._locate(key)
        raw = self._store.get(bucket, skey)
        return [] if raw is None else decode_values(raw)

    def append(self, key: Any, value: Any) -> None:
        bucket, skey = self._locate(key)
        self._backend.write(bucket, Op.APPEND, skey, encode(value))

    def extend(self, key: Any, values: Iterable[Any]) -> None:
        data = b"".join(encode(v) for v in values)
        if data:
            bucket, skey = self._locate(key)
            self._backend.write(bucket, Op.APPEND, skey, data)

    def clear(self, key: Any) -> None:
        bucket, skey = self._locate(key)
        self._backend.write(bucket, Op.DELETE, skey)
