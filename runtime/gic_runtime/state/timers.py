"""Timers: per key, in event time or in processing time, kept as keyed state.

A timer is ``(key, domain, at)``: a key's wish to be called back once time reaches
``at`` (microseconds since the Unix epoch, UTC). In the ``"event"`` domain time is the
batch's watermark (:mod:`gic_runtime.event_time`), in ``"processing"`` the batch's
processing time (the driver's clock when it built the batch's barrier). A key holds a
set of timers: registering one it already holds changes nothing, deleting one it does
not hold is a no-op.

Storage, inside the key's bucket (every change dual-written like any other state, so
timers go through the changelog, materialization, checkpoints, savepoints and
restores; :mod:`gic_runtime.state.keys` for the kinds):

=================  ======================================================================
timer entry        ``t + msgpack(domain) + msgpack(key) + msgpack(at)`` -> ``b""``
due entry          ``d + msgpack(domain) + u64be(at + 2**63) + msgpack(key)`` -> ``b""``
=================  ======================================================================

The timer entries are the timers (listing a key's timers is one prefix scan; they are
what a canonical savepoint exports); the due entries order them by time, so finding
the due timers of a bucket is one range scan whatever the number of future timers.

Invariants: a due entry exists exactly when its timer entry does (both are written,
and deleted, together; registering writes the due entry first, deleting removes the
timer entry first, and :meth:`TimerState.pop` fires a timer only while its timer entry
exists). A timer fires at most once per registration: popping it deletes both entries
in the same batch as the handler's changes and output, so a checkpoint holds both or
neither.

Not thread-safe: used on the task thread that owns the backend.
"""

from __future__ import annotations

import builtins
import struct
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Final, Literal, TypeAlias

from gic_runtime.changelog.records import Op
from gic_runtime.errors import StateError
from gic_runtime.state.keys import KIND_DUE, KIND_TIMER, decode_key, encode, encode_many
from gic_runtime.state.states import Located, StateBackend

__all__ = [
    "DOMAINS",
    "Domain",
    "DueRun",
    "DueTimer",
    "TimeValue",
    "Timer",
    "TimerState",
    "due_key",
    "from_micros",
    "timer_key",
    "to_micros",
]

Domain: TypeAlias = Literal["event", "processing"]
DOMAINS: Final[tuple[Domain, ...]] = ("event", "processing")
TimeValue: TypeAlias = datetime | int
"""A point in time: a ``datetime`` (naive ones are UTC) or microseconds since the epoch."""

_BIAS: Final = 1 << 63
_U64 = struct.Struct(">Q")
_TIME_BOUND: Final = 1 << 62
_EPOCH: Final = datetime(1970, 1, 1, tzinfo=UTC)
_DOMAIN_PREFIX: Final = {d: encode(d) for d in DOMAINS}


def to_micros(at: TimeValue, *, what: str = "timer time") -> int:
    """Microseconds since the epoch of ``at`` (see :data:`TimeValue`); StateError for
    anything else or a time beyond +-2**62 microseconds."""
    if isinstance(at, datetime):
        aware = at if at.tzinfo is not None else at.replace(tzinfo=UTC)
        delta = aware - _EPOCH
        micros = (delta.days * 86400 + delta.seconds) * 1_000_000 + delta.microseconds
    elif isinstance(at, int) and not isinstance(at, bool):
        micros = at
    else:
        raise StateError(
            f"{what} must be a datetime or integer microseconds since the epoch, not "
            f"{type(at).__name__} ({at!r:.40})"
        )
    if not -_TIME_BOUND < micros < _TIME_BOUND:
        raise StateError(f"{what} {at!r:.40} is out of range")
    return micros


def from_micros(micros: int) -> datetime:
    """The UTC ``datetime`` of ``micros`` since the epoch."""
    return _EPOCH + timedelta(microseconds=micros)


def _domain(domain: str) -> Domain:
    if domain == "event":
        return "event"
    if domain == "processing":
        return "processing"
    raise StateError(f"timer domain {domain!r} is neither 'event' nor 'processing'")


@dataclass(frozen=True, order=True, slots=True)
class Timer:
    """One timer of a key: fires once time in ``domain`` reaches ``at_us``."""

    at_us: int
    domain: Domain

    @property
    def at(self) -> datetime:
        """When it fires, as a UTC ``datetime``."""
        return from_micros(self.at_us)


@dataclass(frozen=True, order=True, slots=True)
class DueTimer:
    """A timer found due in a bucket, ordered by time (then domain, bucket, key)."""

    at_us: int
    domain: Domain
    bucket: int
    key: bytes
    """The key, msgpack-encoded."""

    @property
    def timer(self) -> Timer:
        return Timer(self.at_us, self.domain)


@dataclass(frozen=True, slots=True)
class DueRun:
    """The timers of one bucket popped together (:meth:`TimerState.pop_due_runs`):
    ``ats[i]`` and ``keys[i]`` (msgpack-encoded) of each, ordered by key, then time."""

    bucket: int
    domain: Domain
    ats: list[int]
    keys: list[bytes]

    def __len__(self) -> int:
        return len(self.ats)


def timer_key(domain: Domain, key_bytes: bytes, at_us: int) -> bytes:
    """Store key of the timer entry (``key_bytes``: the msgpack-encoded key)."""
    return KIND_TIMER + _DOMAIN_PREFIX[domain] + key_bytes + encode(at_us)


def due_key(domain: Domain, key_bytes: bytes, at_us: int) -> bytes:
    """Store key of the due entry (ordered by time within the domain)."""
    return KIND_DUE + _DOMAIN_PREFIX[domain] + _U64.pack(at_us + _BIAS) + key_bytes


def _due_range(domain: Domain, until_us: int) -> tuple[bytes, bytes, int]:
    """Store keys ``[start, stop)`` of the due entries of ``domain`` at or before
    ``until_us``, and the length of their prefix (the time follows it)."""
    prefix = KIND_DUE + _DOMAIN_PREFIX[domain]
    stop = prefix + _U64.pack(min(until_us + _BIAS + 1, (1 << 64) - 1))
    return prefix + _U64.pack(0), stop, len(prefix)


class TimerState:
    """The timers of a backend's keys, each method taking the key (vectorized style;
    :class:`~gic_runtime.processing.facades.BoundTimers` binds one key)."""

    def __init__(self, backend: StateBackend) -> None:
        self._backend = backend
        self._store = backend.store

    def register(self, key: Any, at: TimeValue, domain: str = "event") -> None:
        """Fire ``key``'s handler once time in ``domain`` reaches ``at``."""
        d, at_us = _domain(domain), to_micros(at)
        bucket, kbytes = self._backend.route(key), encode(key)
        write = self._backend.write
        write(bucket, Op.PUT, due_key(d, kbytes, at_us))
        write(bucket, Op.PUT, timer_key(d, kbytes, at_us))

    def register_many(
        self,
        keys: Sequence[Any],
        ats: Sequence[TimeValue],
        domain: str = "event",
        buckets: Sequence[int] | None = None,
    ) -> int:
        """:meth:`register` of each ``(keys[i], ats[i])``, in bulk: one run of same-bucket
        keys at a time, the run's due entries before its timer entries (``buckets``:
        each key's bucket from the routing side, spot-checked, as for
        :meth:`~gic_runtime.state.states.ValueState.locate_many`). Returns how many."""
        if len(keys) != len(ats):
            raise StateError(f"{len(ats)} times for {len(keys)} keys")
        d = _domain(domain)
        at_list = [to_micros(at) for at in ats]
        bucket_list = self._backend.key_buckets(keys, buckets)
        kbytes = encode_many(keys)
        dkeys = [due_key(d, k, at) for k, at in zip(kbytes, at_list, strict=True)]
        tkeys = [timer_key(d, k, at) for k, at in zip(kbytes, at_list, strict=True)]
        write_many = self._backend.write_many
        for bucket, start, stop in Located(dkeys, bucket_list).runs:
            empty = [b""] * (stop - start)
            write_many(bucket, Op.PUT, dkeys[start:stop], empty)
            write_many(bucket, Op.PUT, tkeys[start:stop], empty)
        return len(kbytes)

    def delete(self, key: Any, at: TimeValue, domain: str = "event") -> None:
        """Remove ``key``'s timer at ``at`` in ``domain`` (no-op when it has none)."""
        d, at_us = _domain(domain), to_micros(at)
        bucket, kbytes = self._backend.route(key), encode(key)
        tkey = timer_key(d, kbytes, at_us)
        if self._store.get(bucket, tkey) is None:
            return
        write = self._backend.write
        write(bucket, Op.DELETE, tkey)
        write(bucket, Op.DELETE, due_key(d, kbytes, at_us))

    def list(self, key: Any, domain: str | None = None) -> list[Timer]:
        """``key``'s timers (of ``domain``, or of both), ordered by time."""
        bucket, kbytes = self._backend.route(key), encode(key)
        return sorted(self._timers(bucket, kbytes, domain))

    def clear(self, key: Any, domain: str | None = None) -> int:
        """Remove every timer of ``key`` (of ``domain``, or of both); returns how many."""
        bucket, kbytes = self._backend.route(key), encode(key)
        found = list(self._timers(bucket, kbytes, domain))
        write = self._backend.write
        for t in found:
            write(bucket, Op.DELETE, timer_key(t.domain, kbytes, t.at_us))
            write(bucket, Op.DELETE, due_key(t.domain, kbytes, t.at_us))
        return len(found)

    def _timers(self, bucket: int, kbytes: bytes, domain: str | None) -> Iterable[Timer]:
        domains = DOMAINS if domain is None else (_domain(domain),)
        for d in domains:
            prefix = KIND_TIMER + _DOMAIN_PREFIX[d] + kbytes
            n = len(prefix)
            for skey, _ in self._store.scan(bucket, prefix):
                yield Timer(int(decode_key(skey[n:])), d)

    # --- firing ------------------------------------------------------------------------

    def due(
        self, buckets: Iterable[int], domain: str, until_us: int | None
    ) -> builtins.list[DueTimer]:
        """The timers of ``buckets`` in ``domain`` due at ``until_us`` (``at <= until_us``;
        none when ``until_us`` is ``None``), ordered by time."""
        if until_us is None:
            return []
        d = _domain(domain)
        start, stop, n = _due_range(d, until_us)
        found: builtins.list[DueTimer] = []
        for bucket in buckets:
            for skey, _ in self._store.scan_range(bucket, start, stop):
                at = _U64.unpack_from(skey, n)[0] - _BIAS
                found.append(DueTimer(at, d, bucket, skey[n + 8 :]))
        found.sort()
        return found

    def pop_due_runs(
        self, buckets: Iterable[int], domain: str, until_us: int | None
    ) -> builtins.list[DueRun]:
        """Pop every timer of ``buckets`` in ``domain`` due at ``until_us`` (as :meth:`due`
        then :meth:`pop_many` would), one bucket at a time, without building a
        :class:`DueTimer` per timer: per bucket with due timers, a :class:`DueRun` of
        their times and encoded keys, ordered by key within the bucket (the order of
        the store's entries of a key; callers sort into firing order).

        Each bucket's due entries are scanned and both entries of each timer deleted
        right away: the timer entries first (in key order), then the due entries (in
        time order). No timer entry is looked up first: nothing runs between the scan
        and the deletes, and a due entry exists exactly when its timer entry does."""
        if until_us is None:
            return []
        d = _domain(domain)
        start, stop, n = _due_range(d, until_us)
        tprefix = KIND_TIMER + _DOMAIN_PREFIX[d]
        unpack, scan_range = _U64.unpack_from, self._store.scan_range
        write_many = self._backend.write_many
        runs: builtins.list[DueRun] = []
        for bucket in buckets:
            dkeys = [skey for skey, _ in scan_range(bucket, start, stop)]
            if not dkeys:
                continue
            # by key, so the timer entries' deletes (and the caller's reads) go through
            # the store in its own order
            popped = sorted([(skey[n + 8 :], unpack(skey, n)[0] - _BIAS) for skey in dkeys])
            kbytes = [k for k, _ in popped]
            ats = [at for _, at in popped]
            tkeys = [tprefix + k + t for k, t in zip(kbytes, encode_many(ats), strict=True)]
            empty = [b""] * len(dkeys)
            write_many(bucket, Op.DELETE, tkeys, empty)
            write_many(bucket, Op.DELETE, dkeys, empty)
            runs.append(DueRun(bucket, d, ats, kbytes))
        return runs

    def pop_many(self, dues: Sequence[DueTimer]) -> builtins.list[tuple[DueTimer, Any]]:
        """:meth:`pop` of each of ``dues``, in bulk per bucket (the timer entries of a
        bucket deleted before its due entries): ``(due, decoded key)`` of those whose
        key still held them, in the order of ``dues``. For handlers that see every due
        timer at once (a per-timer handler that may delete later timers pops one by one)."""
        n = len(dues)
        order = sorted(range(n), key=lambda i: dues[i].bucket)
        held = [False] * n
        get_many, write_many = self._store.get_many, self._backend.write_many
        lo = 0
        while lo < n:
            bucket = dues[order[lo]].bucket
            hi = lo + 1
            while hi < n and dues[order[hi]].bucket == bucket:
                hi += 1
            run = order[lo:hi]
            tkeys = [timer_key(dues[i].domain, dues[i].key, dues[i].at_us) for i in run]
            found = get_many(bucket, tkeys)
            kept = [j for j, raw in enumerate(found) if raw is not None]
            if kept:
                empty = [b""] * len(kept)
                write_many(bucket, Op.DELETE, [tkeys[j] for j in kept], empty)
                dkeys = [
                    due_key(dues[run[j]].domain, dues[run[j]].key, dues[run[j]].at_us) for j in kept
                ]
                write_many(bucket, Op.DELETE, dkeys, empty)
                for j in kept:
                    held[run[j]] = True
            lo = hi
        return [(dues[i], decode_key(dues[i].key)) for i in range(n) if held[i]]

    def pop(self, due: DueTimer) -> Any | None:
        """Delete ``due``'s timer if the key still holds it and return the decoded key
        (``None`` when it was deleted meanwhile: it must not fire). A key of ``None`` is
        never stored (keys are not null)."""
        tkey = timer_key(due.domain, due.key, due.at_us)
        if self._store.get(due.bucket, tkey) is None:
            return None
        write = self._backend.write
        write(due.bucket, Op.DELETE, tkey)
        write(due.bucket, Op.DELETE, due_key(due.domain, due.key, due.at_us))
        return decode_key(due.key)
