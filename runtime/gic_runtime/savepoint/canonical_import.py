"""Importing a canonical savepoint (:mod:`gic_runtime.savepoint.canonical` for the
format) into a backend's buckets.

Importing re-creates state, it does not resume a lineage: every bucket starts a fresh
history at seq 0 and the imported rows become its first changes. Keys are re-routed, so
the importing job may use another bucket count. Timer rows get their time index back,
rows with a time to live their expiry index (or a pending entry while an event-time
row waits for its first watermark).

Invariants: only rows whose keys route into the backend's buckets are written; a row
that does not fit its kind (a timer without a valid domain and time, a TTL that is not
a domain and a positive duration) fails the import with CorruptFileError naming the
file; nothing is written outside the backend's buckets.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from gic_runtime.changelog.records import Op
from gic_runtime.errors import CorruptFileError
from gic_runtime.savepoint.canonical import KIND_BYTES, read_canonical_bucket, read_canonical_index
from gic_runtime.state.backend import KeyedStateBackend
from gic_runtime.state.keys import (
    KIND_LIST,
    KIND_LIST_TTL,
    KIND_MAP,
    KIND_MAP_TTL,
    KIND_TIMER,
    TTL_KINDS,
    bucket_for,
    decode_key,
    state_prefix,
)
from gic_runtime.state.timers import DOMAINS, due_key, timer_key
from gic_runtime.state.ttl import PENDING, TTL, index_entry, wrap
from gic_runtime.storage.uri import StoreResolver, join

__all__ = ["CanonicalImportStats", "restore_from_canonical"]


@dataclass(frozen=True, slots=True)
class CanonicalImportStats:
    """What :func:`restore_from_canonical` did."""

    files_read: int
    rows_imported: int
    changes: int


def restore_from_canonical(
    backend: KeyedStateBackend, src_uri: str, resolver: StoreResolver
) -> CanonicalImportStats:
    """Replace the state of ``backend``'s buckets with the rows of the canonical savepoint
    at ``src_uri`` whose keys route into them (see the module doc on lineage)."""
    index = read_canonical_index(resolver, src_uri)
    backend.restore({}, resolver)
    same_layout = index.num_buckets == backend.num_buckets
    owned = backend.bucket_range
    files = [f for f in index.files if not same_layout or f.bucket in owned]
    rows = changes = 0
    for entry in files:
        table = read_canonical_bucket(resolver, src_uri, entry)
        pending: tuple[int, bytes] | None = None
        chunks: list[bytes] = []
        for r in table.to_pylist():
            key = r["key"]
            bucket = (
                r["bucket"] if same_layout else bucket_for(decode_key(key), backend.num_buckets)
            )
            if bucket not in owned:
                continue
            kind = KIND_BYTES.get(r["kind"])
            if kind is None:
                raise CorruptFileError(
                    f"unknown state kind {r['kind']!r}", uri=join(src_uri, entry.name)
                )
            ttl = _row_ttl(r, join(src_uri, entry.name))
            if ttl is not None:
                kind = TTL_KINDS.get(kind, b"")
                if not kind:
                    raise CorruptFileError(
                        f"a {r['kind']} row cannot have a ttl", uri=join(src_uri, entry.name)
                    )
            skey = state_prefix(kind, r["state"]) + key
            if kind in (KIND_LIST, KIND_LIST_TTL):
                if pending is not None and pending != (bucket, skey):
                    backend.write_raw(pending[0], Op.APPEND, pending[1], b"".join(chunks))
                    changes += 1
                    chunks = []
                pending = (bucket, skey)
                if ttl is None:
                    chunks.append(r["value"])
                else:
                    chunks.append(_import_ttl_entry(backend, bucket, skey, r, ttl))
            elif kind == KIND_TIMER:
                changes += _import_timer(backend, bucket, r, join(src_uri, entry.name))
            else:
                if kind in (KIND_MAP, KIND_MAP_TTL):
                    if r["user_key"] is None:
                        raise CorruptFileError(
                            "map row without user_key", uri=join(src_uri, entry.name)
                        )
                    skey += r["user_key"]
                value = r["value"]
                if ttl is not None:
                    value = _import_ttl_entry(backend, bucket, skey, r, ttl)
                    changes += 1
                backend.write_raw(bucket, Op.PUT, skey, value)
                changes += 1
            rows += 1
        if pending is not None:
            backend.write_raw(pending[0], Op.APPEND, pending[1], b"".join(chunks))
            changes += 1
    return CanonicalImportStats(len(files), rows, changes)


def _import_timer(backend: KeyedStateBackend, bucket: int, row: Mapping[str, Any], uri: str) -> int:
    """Write a timer row's timer and due entries; returns the changes written."""
    domain = next((d for d in DOMAINS if d == row["state"]), None)
    raw_at = row["user_key"]
    at = None if raw_at is None else decode_key(raw_at)
    if domain is None or isinstance(at, bool) or not isinstance(at, int):
        raise CorruptFileError(
            f"timer row with domain {row['state']!r:.40} and time {at!r:.40}: the domain "
            "must be 'event' or 'processing' and the time integer microseconds",
            uri=uri,
        )
    backend.write_raw(bucket, Op.PUT, due_key(domain, row["key"], at))
    backend.write_raw(bucket, Op.PUT, timer_key(domain, row["key"], at))
    return 2


def _row_ttl(row: Mapping[str, Any], uri: str) -> TTL | None:
    """The TTL a row was written with (``None``: the state has none)."""
    by, duration = row.get("ttl_by"), row.get("ttl_us")
    if by is None and duration is None:
        return None
    if by not in ("processing", "event") or not isinstance(duration, int) or duration <= 0:
        raise CorruptFileError(
            f"row with ttl_by {by!r:.20} and ttl_us {duration!r:.20}: give 'processing' or "
            "'event' and a positive number of microseconds",
            uri=uri,
        )
    return TTL(duration, by)


def _import_ttl_entry(
    backend: KeyedStateBackend, bucket: int, skey: bytes, row: Mapping[str, Any], ttl: TTL
) -> bytes:
    """Index an imported TTL entry (its deadline, or pending) and return its stored form."""
    expires = row.get("expires_us")
    deadline = PENDING if expires is None else int(expires)
    backend.write_raw(bucket, Op.PUT, *index_entry(ttl, deadline, skey))
    return wrap(deadline, ttl, row["value"])
