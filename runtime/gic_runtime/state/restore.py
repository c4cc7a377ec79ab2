"""Rebuild one bucket in a store from a :class:`~gic_runtime.handles.BucketState`.

Rule (the BucketState invariant): load the snapshot (or start empty when there is none,
base 0), then apply the changelog's changes with sequence numbers ``[base, seq)`` in
order. Every sequence number of that range must be seen exactly once; a missing range is
a :class:`~gic_runtime.errors.RestoreError` naming the bucket and the range, never a
silently different state. On success the bucket's lineage metadata is set to
``(state.seq, state.token)``.

Thread-safety: runs on the thread that owns the bucket in the store.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from itertools import islice
from typing import Protocol

from gic_runtime.changelog.reader import read_changes
from gic_runtime.changelog.records import ChangeRecord, Op
from gic_runtime.errors import RestoreError
from gic_runtime.handles import BucketState, ChangelogHandle
from gic_runtime.state.snapshot import read_snapshot
from gic_runtime.state.stores import BucketMeta, KVStore
from gic_runtime.storage.uri import StoreResolver

_BATCH = 10_000


class ChangeReader(Protocol):
    """Reads one bucket's changes from a changelog section (``changelog.reader``)."""

    def __call__(
        self,
        resolver: StoreResolver,
        handle: ChangelogHandle,
        *,
        from_seq: int = 0,
        to_seq: int | None = None,
    ) -> Iterator[ChangeRecord]: ...


def default_reader() -> ChangeReader:
    """The changelog segment reader of :mod:`gic_runtime.changelog.reader`."""
    return read_changes


@dataclass(frozen=True, slots=True)
class RestoreStats:
    """What restoring one bucket did."""

    bucket: int
    snapshot_entries: int
    replayed: int


def check_coverage(state: BucketState) -> None:
    """Raise RestoreError unless ``state.changelog`` covers ``[base, seq)`` without gaps
    (checked on the handles alone, before anything is downloaded)."""
    expected = state.base
    for handle in state.changelog:
        if handle.bucket != state.bucket:
            raise RestoreError(
                f"bucket {state.bucket}: changelog handle {handle.uri} belongs to bucket "
                f"{handle.bucket}; the checkpoint's bucket state is inconsistent"
            )
        if handle.to_seq <= expected:
            continue
        if handle.from_seq > expected:
            raise RestoreError(
                f"bucket {state.bucket}: changelog is missing changes [{expected}, "
                f"{handle.from_seq}) before {handle.uri}; cannot rebuild seq {state.seq}"
            )
        expected = handle.to_seq
    if expected < state.seq:
        raise RestoreError(
            f"bucket {state.bucket}: changelog is missing changes [{expected}, {state.seq}); "
            "the checkpoint's handles end early"
        )


def _replay(
    state: BucketState, resolver: StoreResolver, reader: ChangeReader
) -> Iterator[tuple[Op, bytes, bytes]]:
    expected = state.base
    for handle in state.changelog:
        if handle.to_seq <= expected or expected >= state.seq:
            continue
        for record in reader(resolver, handle, from_seq=expected, to_seq=state.seq):
            if record.seq < expected:
                continue  # reader returned a change before the requested range
            if record.seq >= state.seq:
                break
            if record.seq != expected:
                raise RestoreError(
                    f"bucket {state.bucket}: changelog {handle.uri} is missing changes "
                    f"[{expected}, {record.seq})"
                )
            yield record.op, record.key, record.value
            expected += 1
    if expected != state.seq:
        raise RestoreError(
            f"bucket {state.bucket}: changelog is missing changes [{expected}, {state.seq}); "
            f"replay reached seq {expected}, the checkpoint says {state.seq}"
        )


def restore_bucket(
    store: KVStore,
    state: BucketState,
    resolver: StoreResolver,
    *,
    reader: ChangeReader | None = None,
) -> RestoreStats:
    """Replace bucket ``state.bucket`` in ``store`` with the state ``state`` describes."""
    if state.snapshot is not None and state.snapshot.bucket != state.bucket:
        raise RestoreError(
            f"bucket {state.bucket}: snapshot {state.snapshot.uri} belongs to bucket "
            f"{state.snapshot.bucket}; the checkpoint's bucket state is inconsistent"
        )
    if state.base > state.seq:
        raise RestoreError(
            f"bucket {state.bucket}: snapshot seq {state.base} is beyond the state's seq "
            f"{state.seq}; the checkpoint's bucket state is inconsistent"
        )
    check_coverage(state)
    bucket = state.bucket
    store.clear_bucket(bucket)
    loaded = 0
    if state.snapshot is not None:
        entries = read_snapshot(resolver, state.snapshot)
        while batch := [(Op.PUT, k, v) for k, v in islice(entries, _BATCH)]:
            loaded += store.apply(bucket, batch)
    replayed = 0
    if state.seq > state.base:
        changes = _replay(state, resolver, reader or default_reader())
        while batch := list(islice(changes, _BATCH)):
            replayed += store.apply(bucket, batch)
    store.set_meta(bucket, BucketMeta(state.seq, state.token))
    store.flush()
    return RestoreStats(bucket, loaded, replayed)
