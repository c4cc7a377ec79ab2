"""Rebuild buckets in a store from :class:`~gic_runtime.handles.BucketState` objects.

Rule (the BucketState invariant): load the snapshot (or start empty when there is none,
base 0), then apply the changelog's changes with sequence numbers ``[base, seq)`` in
order. Every sequence number of that range must be seen exactly once; a missing range is
a :class:`~gic_runtime.errors.RestoreError` naming the bucket and the range, never a
silently different state. On success the bucket's lineage metadata is set to
``(state.seq, state.token)``.

:func:`restore_buckets` restores several buckets with few requests (docs/architecture.md
§6): every bucket's handles are checked first (snapshot consistency, coverage of
``[base, seq)``), before anything is downloaded or cleared; then one
:class:`~gic_runtime.state.fetch.RestoreFetcher` reads the snapshots and the needed
sections in parallel, coalescing the sections of each segment object into few ranged
reads and holding a bounded number of fetched bytes; the buckets are then applied one
after the other, in the order given, each exactly as :func:`restore_bucket` alone would.
A bucket restored before a later bucket fails keeps its restored content and metadata
(it is a correct copy of its lineage). A bucket whose tail is short (:func:`merges`) has
its tail read first and folded per key, then merged into the snapshot's entries as they
load (:mod:`~gic_runtime.state.tail_fold`): every key written once, by appending, with
the same result as replaying the tail after the snapshot.

Thread-safety: runs on the thread that owns the buckets in the store; only that thread
touches the store. Downloads run on the fetcher's pool threads.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from itertools import islice

from gic_runtime.changelog.reader import read_changes
from gic_runtime.changelog.records import Op
from gic_runtime.errors import CorruptFileError, RestoreError
from gic_runtime.handles import BucketState
from gic_runtime.state.fetch import ChangeReader, FetchSettings, Need, RestoreFetcher, SectionNeed
from gic_runtime.state.stores import BucketMeta, KVStore
from gic_runtime.state.tail_fold import TailFold
from gic_runtime.storage.uri import StoreResolver

__all__ = [
    "ChangeReader",
    "RestoreStats",
    "RestoreSummary",
    "apply_bucket",
    "apply_planned",
    "check_coverage",
    "check_state",
    "classify_range",
    "default_reader",
    "merges",
    "plan_restore",
    "replay_needs",
    "restore_bucket",
    "restore_buckets",
    "restore_range",
    "stored_bytes",
]

_BATCH = 10_000
_MAX_PREFIX_DELETES = 256
"""Prefix deletions one bucket's merge folds (each visits every key folded before it);
a tail with more is replayed after the snapshot from there on."""


def default_reader() -> ChangeReader:
    """The changelog segment reader of :mod:`gic_runtime.changelog.reader` (one ranged
    read per section; restores use coalesced reads unless a reader is injected)."""
    return read_changes


@dataclass(frozen=True, slots=True)
class RestoreStats:
    """What restoring one bucket did."""

    bucket: int
    snapshot_entries: int
    replayed: int


@dataclass(frozen=True, slots=True)
class RestoreSummary:
    """What restoring a bucket range did (:func:`restore_range`): buckets reused from the
    local store (lineage matched), rebuilt from storage, or started empty; changes
    replayed; snapshot entries loaded; buckets served from selected keys instead."""

    local_hits: tuple[int, ...] = ()
    restored: tuple[int, ...] = ()
    empty: tuple[int, ...] = ()
    replayed: int = 0
    snapshot_entries: int = 0
    selected: tuple[int, ...] = ()
    """Buckets served from the keys the batch named, restored after it (§6.3)."""


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


def check_state(state: BucketState) -> None:
    """Every check that needs no download (raises RestoreError)."""
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


def replay_needs(state: BucketState) -> list[SectionNeed]:
    """The sections the replay of ``state`` reads, in order: those overlapping
    ``[base, seq)`` that the running replay position has not passed (a section wholly
    covered by earlier ones is skipped), assuming each section holds its whole range."""
    expected, seq = state.base, state.seq
    out: list[SectionNeed] = []
    for handle in state.changelog:
        if handle.to_seq <= expected or expected >= seq:
            continue
        out.append(SectionNeed(handle, max(state.base, handle.from_seq), seq))
        expected = handle.to_seq
    return out


def _replay(state: BucketState, fetcher: RestoreFetcher) -> Iterator[tuple[Op, bytes, bytes]]:
    """The changes ``[base, seq)`` of ``state`` in order, each exactly once."""
    expected = state.base
    for handle in state.changelog:
        if handle.to_seq <= expected or expected >= state.seq:
            continue
        need = SectionNeed(handle, max(state.base, handle.from_seq), state.seq)
        for record in fetcher.section(need):
            if record.seq < expected:
                continue  # a change before the requested range
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


def merges(state: BucketState, settings: FetchSettings) -> bool:
    """Whether the restore of ``state`` folds its changelog tail into its snapshot's
    entries (:mod:`~gic_runtime.state.tail_fold`) rather than replaying it after the
    snapshot: when the replay reads at most ``settings.merge_stored_bytes``. The plan
    then fetches the tail's sections before the snapshot."""
    if state.seq <= state.base:
        return False
    return sum(need.handle.length for need in replay_needs(state)) <= settings.merge_stored_bytes


def _load(store: KVStore, bucket: int, entries: Iterator[tuple[bytes, bytes]]) -> int:
    """Append ``entries`` (ascending) to the emptied ``bucket``; a damaged snapshot
    leaves it empty again."""
    loaded = 0
    try:
        while chunk := list(islice(entries, _BATCH)):
            loaded += store.load_sorted(bucket, chunk)  # the reader checks they ascend
    except CorruptFileError:
        store.clear_bucket(bucket)  # nothing of a damaged snapshot stays
        raise
    return loaded


def _apply_changes(store: KVStore, bucket: int, changes: Iterator[tuple[Op, bytes, bytes]]) -> int:
    applied = 0
    while batch := list(islice(changes, _BATCH)):
        applied += store.apply(bucket, batch)
    return applied


def apply_bucket(store: KVStore, state: BucketState, fetcher: RestoreFetcher) -> RestoreStats:
    """Replace bucket ``state.bucket`` in ``store`` with the state ``state`` describes,
    from ``fetcher`` (planned by :func:`plan_restore` with ``state`` among its states):
    cleared; snapshot loaded and changelog replayed, or (:func:`merges`) the changelog
    folded and merged into the snapshot's entries as they load; metadata set; flushed."""
    bucket = state.bucket
    store.clear_bucket(bucket)
    if merges(state, fetcher.settings):
        return _apply_merged(store, state, fetcher)
    loaded = 0
    if state.snapshot is not None:
        loaded = _load(store, bucket, fetcher.snapshot_entries(state.snapshot))
    replayed = 0
    if state.seq > state.base:
        replayed = _apply_changes(store, bucket, _replay(state, fetcher))
    store.set_meta(bucket, BucketMeta(state.seq, state.token))
    store.flush()
    return RestoreStats(bucket, loaded, replayed)


def _apply_merged(store: KVStore, state: BucketState, fetcher: RestoreFetcher) -> RestoreStats:
    """The tail first (planned before the snapshot), folded; then the snapshot's entries
    merged with it, appended once. A tail whose changes pass ``merge_raw_bytes`` (or that
    deletes many prefixes, each a pass over the fold) stops folding: the snapshot is
    loaded, the fold applied as changes, and the rest replayed in order (its sections
    are read again if their window was released)."""
    bucket = state.bucket
    limit = fetcher.settings.merge_raw_bytes
    fold = TailFold()
    changes = _replay(state, fetcher)
    complete = True
    for op, key, value in changes:
        fold.add(op, key, value)
        if fold.raw_bytes > limit or fold.prefix_deletes > _MAX_PREFIX_DELETES:
            complete = False
            break
    base = fetcher.snapshot_entries(state.snapshot) if state.snapshot is not None else iter(())
    if complete:
        _load(store, bucket, fold.merge(base))
        loaded, replayed = fold.base_entries, fold.changes
    else:
        loaded = _load(store, bucket, base)
        _apply_changes(store, bucket, fold.changes_to_apply())
        replayed = fold.changes + _apply_changes(store, bucket, changes)
    store.set_meta(bucket, BucketMeta(state.seq, state.token))
    store.flush()
    return RestoreStats(bucket, loaded, replayed)


def restore_buckets(
    store: KVStore,
    states: Sequence[BucketState],
    resolver: StoreResolver,
    *,
    reader: ChangeReader | None = None,
    settings: FetchSettings | None = None,
    on_applied: Callable[[RestoreStats], None] | None = None,
) -> list[RestoreStats]:
    """Replace each bucket ``state.bucket`` in ``store`` with the state ``state``
    describes, in the order given (see the module docstring). Buckets must be distinct.

    ``reader`` replaces the coalesced ranged reads with one call per section (it must be
    thread-safe); ``settings`` tunes the parallel reads; ``on_applied`` is called with
    each bucket's stats right after that bucket is complete (content, metadata, flush),
    before the next one is applied; an exception it raises stops the restore there.
    """
    with plan_restore(states, resolver, reader=reader, settings=settings) as fetcher:
        return apply_planned(store, states, fetcher, on_applied=on_applied)


def plan_restore(
    states: Sequence[BucketState],
    resolver: StoreResolver,
    *,
    reader: ChangeReader | None = None,
    settings: FetchSettings | None = None,
) -> RestoreFetcher:
    """Check ``states`` (distinct buckets, every check that needs no download) and plan
    the fetches of their restore, in the order given: the fetcher of
    :func:`restore_buckets`, not started (:meth:`RestoreFetcher.prefetch` starts its
    first windows' reads; the caller closes it)."""
    seen: set[int] = set()
    for state in states:
        if state.bucket in seen:
            raise RestoreError(f"bucket {state.bucket} is given twice in one restore")
        seen.add(state.bucket)
        check_state(state)
    settings = settings or FetchSettings()
    needs: list[Need] = []
    for state in states:
        if merges(state, settings):  # the tail is folded before the snapshot streams in
            needs.extend(replay_needs(state))
            if state.snapshot is not None:
                needs.append(state.snapshot)
            continue
        if state.snapshot is not None:
            needs.append(state.snapshot)
        if state.seq > state.base:
            needs.extend(replay_needs(state))
    return RestoreFetcher(resolver, needs, reader=reader, settings=settings)


def apply_planned(
    store: KVStore,
    states: Sequence[BucketState],
    fetcher: RestoreFetcher,
    *,
    on_applied: Callable[[RestoreStats], None] | None = None,
) -> list[RestoreStats]:
    """Apply ``states`` in order from ``fetcher`` (planned for them by
    :func:`plan_restore`): the second half of :func:`restore_buckets`."""
    out: list[RestoreStats] = []
    for state in states:
        stats = apply_bucket(store, state, fetcher)
        out.append(stats)
        if on_applied is not None:
            on_applied(stats)
    return out


def stored_bytes(state: BucketState) -> int:
    """Bytes a restore of ``state`` fetches at least: its snapshot and the sections its
    replay reads (gaps a coalesced read spans are not counted)."""
    total = state.snapshot.size if state.snapshot is not None else 0
    if state.seq > state.base:
        total += sum(need.handle.length for need in replay_needs(state))
    return total


def classify_range(
    store: KVStore, states: Sequence[BucketState]
) -> tuple[list[int], list[int], list[BucketState]]:
    """Sort ``states`` (distinct buckets) into ``(local hits, empty, to rebuild)`` as
    :func:`restore_range` does, emptying the empty ones (metadata ``(0, token)``) on the
    way; the buckets to rebuild are left untouched."""
    hits: list[int] = []
    empty: list[int] = []
    rebuild: list[BucketState] = []
    for state in states:
        bucket = state.bucket
        if state.seq == 0 and state.snapshot is None:
            store.clear_bucket(bucket)
            store.set_meta(bucket, BucketMeta(0, state.token))
            empty.append(bucket)
        elif state.token and store.get_meta(bucket) == BucketMeta(state.seq, state.token):
            hits.append(bucket)
        else:
            rebuild.append(state)
    return hits, empty, rebuild


def restore_range(
    store: KVStore,
    states: Sequence[BucketState],
    resolver: StoreResolver,
    *,
    reader: ChangeReader | None = None,
    settings: FetchSettings | None = None,
) -> RestoreSummary:
    """Bring each bucket of ``states`` (distinct buckets) to its state: a bucket at seq 0
    without snapshot is emptied (metadata ``(0, token)``); one whose local metadata
    already equals ``(seq, token)`` (with a non-empty token) is a *local hit* and storage
    is not read for it; the others go to one :func:`restore_buckets` call. The store is
    flushed at the end."""
    hits, empty, rebuild = classify_range(store, states)
    stats = restore_buckets(store, rebuild, resolver, reader=reader, settings=settings)
    store.flush()
    return RestoreSummary(
        local_hits=tuple(hits),
        restored=tuple(s.bucket for s in stats),
        empty=tuple(empty),
        replayed=sum(s.replayed for s in stats),
        snapshot_entries=sum(s.snapshot_entries for s in stats),
    )


def restore_bucket(
    store: KVStore,
    state: BucketState,
    resolver: StoreResolver,
    *,
    reader: ChangeReader | None = None,
) -> RestoreStats:
    """Replace bucket ``state.bucket`` in ``store`` with the state ``state`` describes."""
    (stats,) = restore_buckets(store, [state], resolver, reader=reader)
    return stats
