"""Time to live: states whose entries expire, by processing time or by event time.

A state declared with a TTL (``state.value("seen", ttl="30 days")``; maps and lists
too) gives every entry it writes a *deadline*: the batch's time in the TTL's domain
plus the TTL (``"processing"``: the batch's processing time; ``"event"``: its
watermark). A value or map entry written again gets a new deadline; each list element
keeps the deadline of the batch that appended it.

Visibility. An entry whose deadline is at or before the batch's time in its domain is
expired: reads skip it at once (:mod:`gic_runtime.state.ttl_states`).

Removal. Every write also records its deadline in an *expiry index* (kind ``x``,
ordered by deadline, like the timers' due entries). At the end of each batch
:func:`expire_due` scans the index of the task's buckets up to now, deletes each index
entry and the expired entry it names (rewriting a list without its expired elements),
all through the changelog: a key space that churns keeps its snapshots, changelog and
restores bounded, and an expired entry is never restored. An index entry whose entry
was rewritten with a later deadline (or deleted) meanwhile removes nothing.

Event time before the first watermark. An entry written while the stream has no
watermark yet is stored with :data:`PENDING` and listed in a pending index with its
TTL; the first batch with a watermark gives it ``watermark + ttl``. Until then it does
not expire.

Stored values (kinds ``V``, ``M``, ``L`` of :mod:`gic_runtime.state.keys`): the
msgpack array ``[deadline, domain, ttl, value]`` (:func:`wrap`), for lists one such
array per element. Index
entries: ``x + domain + u64be(deadline + 2**63) + store key -> b""``; pending:
``x + "?" + store key -> u64be(ttl)``.

Not thread-safe: used on the task thread that owns the backend.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Any, Final, Protocol

from gic_runtime.changelog.records import Op
from gic_runtime.errors import ConfigurationError, StateError
from gic_runtime.event_time import parse_duration
from gic_runtime.state.keys import (
    KIND_EXPIRY,
    KIND_LIST_TTL,
    decode_value,
    decode_values,
    encode,
)
from gic_runtime.state.stores import KVStore
from gic_runtime.state.timers import DOMAINS, Domain

__all__ = [
    "PENDING",
    "TTL",
    "Clock",
    "Entry",
    "expire_due",
    "index_entry",
    "index_key",
    "join_elements",
    "pending_key",
    "split_elements",
    "unwrap",
    "wrap",
]

_BIAS: Final = 1 << 63
_U64 = struct.Struct(">Q")
PENDING: Final = (1 << 63) - 1
"""The deadline of an event-time entry written before the first watermark."""
_DOMAIN_BYTE: Final[dict[str, bytes]] = {"processing": b"p", "event": b"e"}
_PENDING_TAG: Final = b"?"


@dataclass(frozen=True)
class TTL:
    """A state's time to live: ``duration_us`` in domain ``by``."""

    duration_us: int
    by: Domain = "processing"

    @classmethod
    def parse(cls, ttl: str | float, by: str = "processing") -> TTL:
        """``ttl`` as text (``"30 days"``, ``"10 minutes"``) or seconds, counted in
        ``by`` (``"processing"`` or ``"event"``); ConfigurationError otherwise."""
        micros = parse_duration(ttl, what="ttl")
        if micros <= 0:
            raise ConfigurationError(f"ttl must be longer than 0, got {ttl!r}")
        if by == "processing":
            return cls(micros, "processing")
        if by == "event":
            return cls(micros, "event")
        raise ConfigurationError(f"ttl_by {by!r} is neither 'processing' nor 'event'")

    def describe(self) -> str:
        return f"{self.duration_us} us of {self.by} time"


class Clock(Protocol):
    """Where time stands for the batch a backend runs."""

    def now_us(self, domain: Domain) -> int | None:
        """The batch's time in ``domain`` (``None``: no watermark yet)."""
        ...


_BY_CODE: Final[dict[str, int]] = {"processing": 0, "event": 1}
_BY_NAME: Final[tuple[Domain, Domain]] = ("processing", "event")


@dataclass(frozen=True, slots=True)
class Entry:
    """A stored TTL entry: its ``deadline`` (:data:`PENDING` until an event-time
    entry's first watermark), the ``ttl`` it was written with, and its ``value``."""

    deadline: int
    ttl: TTL
    value: Any

    def with_deadline(self, deadline: int) -> Entry:
        return Entry(deadline, self.ttl, self.value)


def wrap(deadline_us: int, ttl: TTL, encoded: bytes) -> bytes:
    """A stored TTL entry: the msgpack array ``[deadline, domain (0 processing, 1
    event), ttl, value]`` (``encoded``: the value's msgpack encoding). Self-describing,
    so exports and imports keep the deadline and its domain."""
    head = encode(deadline_us) + encode(_BY_CODE[ttl.by]) + encode(ttl.duration_us)
    return b"\x94" + head + encoded


def _entry(item: object) -> Entry:
    if (
        isinstance(item, list)
        and len(item) == 4
        and all(isinstance(x, int) and not isinstance(x, bool) for x in item[:3])
        and item[1] in (0, 1)
        and item[2] > 0
    ):
        return Entry(item[0], TTL(item[2], _BY_NAME[item[1]]), item[3])
    raise StateError(f"TTL entry {item!r:.60} is not [deadline, domain, ttl, value]")


def unwrap(raw: bytes) -> Entry:
    """The entry of a stored value or map entry."""
    return _entry(decode_value(raw))


def split_elements(raw: bytes) -> list[Entry]:
    """The entries of a stored TTL list, in order."""
    return [_entry(item) for item in decode_values(raw)]


def join_elements(elements: list[Entry]) -> bytes:
    """A stored TTL list of ``elements``."""
    return b"".join(wrap(e.deadline, e.ttl, encode(e.value)) for e in elements)


def index_key(domain: Domain, deadline_us: int, store_key: bytes) -> bytes:
    """Expiry index entry of ``store_key`` at ``deadline_us``."""
    return KIND_EXPIRY + _DOMAIN_BYTE[domain] + _U64.pack(deadline_us + _BIAS) + store_key


def index_entry(ttl: TTL, deadline_us: int, store_key: bytes) -> tuple[bytes, bytes]:
    """The index entry ``(key, value)`` of ``store_key`` written with ``ttl`` and due at
    ``deadline_us``: its place in the expiry index, or, while the deadline is
    :data:`PENDING`, in the pending index with the TTL (what :func:`expire_due` reads)."""
    if deadline_us == PENDING:
        return pending_key(store_key), _U64.pack(ttl.duration_us)
    return index_key(ttl.by, deadline_us, store_key), b""


def pending_key(store_key: bytes) -> bytes:
    """Pending index entry of an event-time ``store_key`` written before any watermark."""
    return KIND_EXPIRY + _PENDING_TAG + store_key


class _Writer(Protocol):
    @property
    def store(self) -> KVStore: ...

    def write(self, bucket: int, op: Op, key: bytes, value: bytes = b"") -> int: ...


def expire_due(backend: _Writer, buckets: range, clock: Clock) -> int:
    """Remove the entries of ``buckets`` whose deadline has passed (see the module
    docstring), first giving pending event-time entries their deadline once there is a
    watermark; returns how many entries (values, map entries, list elements) expired."""
    store, write = backend.store, backend.write
    watermark = clock.now_us("event")
    expired = 0
    for bucket in buckets:
        if watermark is not None:
            _settle_pending(backend, bucket, watermark)
        for domain in DOMAINS:
            now = clock.now_us(domain)
            if now is None:
                continue
            prefix = KIND_EXPIRY + _DOMAIN_BYTE[domain]
            stop = prefix + _U64.pack(min(now + _BIAS + 1, (1 << 64) - 1))
            for ikey, _ in store.scan_range(bucket, prefix, stop):
                write(bucket, Op.DELETE, ikey)
                skey = ikey[len(prefix) + 8 :]
                raw = store.get(bucket, skey)
                if raw is not None:
                    expired += _expire_entry(backend, bucket, skey, raw, now)
    return expired


def _expire_entry(backend: _Writer, bucket: int, skey: bytes, raw: bytes, now: int) -> int:
    if skey[:1] == KIND_LIST_TTL:
        elements = split_elements(raw)
        keep = [e for e in elements if e.deadline > now]
        if len(keep) == len(elements):
            return 0
        if keep:
            backend.write(bucket, Op.PUT, skey, join_elements(keep))
        else:
            backend.write(bucket, Op.DELETE, skey)
        return len(elements) - len(keep)
    if unwrap(raw).deadline > now:
        return 0
    backend.write(bucket, Op.DELETE, skey)
    return 1


def _settle_pending(backend: _Writer, bucket: int, watermark: int) -> None:
    """Give the pending event-time entries of ``bucket`` their deadline."""
    store, write = backend.store, backend.write
    prefix = KIND_EXPIRY + _PENDING_TAG
    for pkey, value in store.scan(bucket, prefix):
        write(bucket, Op.DELETE, pkey)
        skey = pkey[len(prefix) :]
        raw = store.get(bucket, skey)
        if raw is None:
            continue
        deadline = watermark + _U64.unpack(value)[0]
        if skey[:1] == KIND_LIST_TTL:
            fixed = join_elements(
                [e.with_deadline(deadline) if e.deadline == PENDING else e
                 for e in split_elements(raw)]
            )  # fmt: skip
        else:
            old = unwrap(raw)
            if old.deadline != PENDING:
                continue
            fixed = wrap(deadline, old.ttl, encode(old.value))
        if fixed != raw:
            write(bucket, Op.PUT, skey, fixed)
        write(bucket, Op.PUT, index_key("event", deadline, skey))
