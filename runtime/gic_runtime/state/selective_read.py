"""Read chosen keys of checkpointed buckets without restoring them (docs/architecture.md
§6.3).

A restore rebuilds a whole bucket: every snapshot entry becomes a Python object and is
written to the local store, whatever the next batch needs. A batch after a restart needs
a few keys of each bucket (the sweep's 4 GB restart: 390 of 15,500 a bucket), and
:func:`select_keys` reads just those: the bucket's changelog tail decoded for the chosen
keys only (the other records' framing is checked, nothing of them copied) and folded
(:class:`~gic_runtime.state.tail_fold.TailFold`), the snapshot's
entries scanned with only the chosen values copied
(:meth:`~gic_runtime.state.snapshot.SnapshotBody.select`), the two merged. It downloads
what a restore downloads and writes nothing.

Invariant (property-tested against :func:`~gic_runtime.state.restore.restore_buckets`):
for every bucket state and key set, the result maps each chosen key the restored bucket
holds to the value it holds there, and holds no other key. The checks are a restore's:
coverage of ``[base, seq)`` before anything is read, checksums, framing and key order of
every file read, with the same errors naming the bucket and the file.

Memory: the changes of the chosen keys and one bucket's snapshot body at a time (the
fetcher's windows bound what is read ahead), not the bucket's entries.

The task core uses it for a batch whose processor names the keys it reads and that
finds buckets to rebuild (:meth:`~gic_runtime.state.backend.KeyedStateBackend.restore`
with ``select``): the batch runs on
:class:`~gic_runtime.state.selected_store.SelectedBuckets` and the buckets are restored
behind it (docs/architecture.md §6.3).

Thread-safety: as a restore, on the calling thread; downloads on the fetcher's threads.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence

from gic_runtime.errors import RestoreError
from gic_runtime.handles import BucketState
from gic_runtime.state.fetch import FetchSettings, Need, RestoreFetcher
from gic_runtime.state.restore import check_state, replay_needs
from gic_runtime.state.tail_fold import TailFold
from gic_runtime.storage.uri import StoreResolver

__all__ = ["plan_select", "select_keys", "select_planned"]


def plan_select(
    states: Sequence[BucketState],
    resolver: StoreResolver,
    *,
    settings: FetchSettings | None = None,
) -> RestoreFetcher:
    """Check ``states`` (distinct buckets; every check of a restore that needs no
    download) and plan their reads in the order given, each bucket's changelog tail
    before its snapshot: the fetcher of :func:`select_planned` (the caller closes it)."""
    seen: set[int] = set()
    needs: list[Need] = []
    for state in states:
        if state.bucket in seen:
            raise RestoreError(f"bucket {state.bucket} is given twice in one read")
        seen.add(state.bucket)
        check_state(state)
        if state.seq > state.base:
            needs.extend(replay_needs(state))
        if state.snapshot is not None:
            needs.append(state.snapshot)
    return RestoreFetcher(resolver, needs, settings=settings or FetchSettings())


def select_planned(
    states: Sequence[BucketState],
    keys: Mapping[int, Collection[bytes]],
    fetcher: RestoreFetcher,
) -> dict[int, dict[bytes, bytes]]:
    """Per bucket of ``states`` (in order, from ``fetcher`` planned for them by
    :func:`plan_select`), the value of each of its ``keys[bucket]`` the bucket holds at
    ``state.seq``; a key it does not hold is left out (see the module docstring)."""
    out: dict[int, dict[bytes, bytes]] = {}
    for state in states:
        wanted = frozenset(keys.get(state.bucket, ()))
        fold = TailFold()
        if state.seq > state.base:
            _fold_tail(state, wanted, fetcher, fold)
        if state.snapshot is not None:
            base = fetcher.snapshot_body(state.snapshot).select(wanted)
            out[state.bucket] = dict(fold.merge(base))
        else:
            out[state.bucket] = dict(fold.merge(()))
    return out


def _fold_tail(
    state: BucketState, wanted: frozenset[bytes], fetcher: RestoreFetcher, fold: TailFold
) -> None:
    """Fold the changes ``[base, seq)`` of ``state`` to ``wanted``'s keys (and the prefix
    deletions), in order, each once: a restore's replay of the bucket, filtered.
    The sections are decoded keeping only those records, so the per-record check of a
    replay (consecutive seqs) becomes a per-section one: :func:`check_state` found the
    handles covering ``[base, seq)`` without gaps, and each section was checked against
    its handle's range and count when decoded."""
    expected, seq = state.base, state.seq
    for need in replay_needs(state):
        for record in fetcher.section(need, wanted):
            if expected <= record.seq < seq:
                fold.add(record.op, record.key, record.value)
        expected = max(expected, min(need.handle.to_seq, seq))


def select_keys(
    states: Sequence[BucketState],
    keys: Mapping[int, Collection[bytes]],
    resolver: StoreResolver,
    *,
    settings: FetchSettings | None = None,
) -> dict[int, dict[bytes, bytes]]:
    """:func:`plan_select` then :func:`select_planned`: the chosen keys' values of each
    bucket of ``states``, read from storage without restoring the buckets."""
    with plan_select(states, resolver, settings=settings) as fetcher:
        return select_planned(states, keys, fetcher)
