"""Restoring many buckets at once: few, coalesced, parallel reads (docs/architecture.md
§6), the same store contents as restoring each bucket alone, the same errors, and a
bounded number of windows fetched ahead."""

from __future__ import annotations

import random
import tempfile
import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tests.support.stores import DelegatingStore

from gic_runtime.changelog.reader import read_changes
from gic_runtime.changelog.records import ChangeRecord, Op
from gic_runtime.changelog.segment import SegmentBuilder
from gic_runtime.errors import CorruptFileError, RestoreError
from gic_runtime.handles import BucketState, ChangelogHandle, SnapshotHandle
from gic_runtime.state.backend import KeyedStateBackend
from gic_runtime.state.fetch import FetchSettings, RestoreFetcher, SectionNeed, plan_windows
from gic_runtime.state.memory_store import InMemoryStore
from gic_runtime.state.restore import replay_needs, restore_bucket, restore_buckets
from gic_runtime.state.snapshot import upload_snapshot
from gic_runtime.storage.local import LocalObjectStore
from gic_runtime.storage.object_store import ObjectStore
from gic_runtime.storage.uri import StoreResolver
from gic_runtime.testing.changelog_fakes import TestingChangelogWriter

# --- seam fake and layouts ---------------------------------------------------------------


class CountingObjectStore(DelegatingStore):
    """An ``ObjectStore`` seam fake: every call goes to a real store; reads are counted
    (thread-safe), with their ranges."""

    def __init__(self, inner: ObjectStore) -> None:
        super().__init__(inner)
        self._lock = threading.Lock()
        self.reads: list[tuple[str, int, int | None]] = []

    @property
    def gets(self) -> int:
        with self._lock:
            return len(self.reads)

    def get(self, key: str, *, start: int = 0, length: int | None = None) -> bytes:
        with self._lock:
            self.reads.append((key, start, length))
        return self.inner.get(key, start=start, length=length)


def counting_resolver(store: ObjectStore) -> tuple[StoreResolver, CountingObjectStore]:
    counting = CountingObjectStore(store)
    resolver = StoreResolver()
    resolver.register(counting)
    return resolver, counting


def record(seq: int, bucket: int) -> ChangeRecord:
    """A deterministic change: puts on a few keys, some deletes and appends."""
    key = b"k%d-%d" % (bucket, seq % 7)
    if seq % 11 == 5:
        return ChangeRecord(seq, Op.DELETE, key)
    if seq % 5 == 3:
        return ChangeRecord(seq, Op.APPEND, key, b"+%d" % seq)
    return ChangeRecord(seq, Op.PUT, key, b"v%d" % seq)


@dataclass
class Layout:
    """Bucket states over segments written to ``store``, and each bucket's records."""

    states: dict[int, BucketState]
    records: dict[int, list[ChangeRecord]] = field(default_factory=dict)
    segments: list[str] = field(default_factory=list)


def write_batches(
    store: ObjectStore,
    buckets: Sequence[int],
    *,
    batches: int,
    per_section: int = 3,
    snapshot_at: int | None = None,
    prefix: str = "changelog/1",
) -> Layout:
    """``batches`` segment objects, each with one section of ``per_section`` records of
    every bucket (bucket order); with ``snapshot_at``, each bucket's base is a snapshot at
    that seq and the states keep every handle (those below the base included)."""
    resolver = StoreResolver()
    resolver.register(store)
    handles: dict[int, list[ChangelogHandle]] = {b: [] for b in buckets}
    records = {b: [record(s, b) for s in range(batches * per_section)] for b in buckets}
    layout = Layout(states={}, records=records)
    for batch in range(batches):
        builder = SegmentBuilder()
        lo = batch * per_section
        for b in buckets:
            builder.add_records(b, lo, records[b][lo : lo + per_section])
        data, infos = builder.build()
        key = f"{prefix}/{batch:06d}.seg"
        store.put(key, data, if_absent=True)
        layout.segments.append(key)
        for info in infos:
            handles[info.bucket].append(info.handle(store.uri_for(key)))
    seq = batches * per_section
    for b in buckets:
        snapshot = None
        if snapshot_at is not None:
            snapshot = snapshot_of(resolver, store, b, records[b][:snapshot_at], snapshot_at)
        layout.states[b] = BucketState(b, seq, snapshot, tuple(handles[b]), handles[b][-1].uri)
    return layout


def snapshot_of(
    resolver: StoreResolver,
    store: ObjectStore,
    bucket: int,
    changes: Sequence[ChangeRecord],
    seq: int,
) -> SnapshotHandle:
    """Upload the state ``changes`` produce as bucket ``bucket``'s snapshot at ``seq``."""
    model = InMemoryStore()
    model.apply(bucket, [(r.op, r.key, r.value) for r in changes])
    with model.snapshot_items(bucket) as view:
        items = list(view)
    model.close()
    uri = store.uri_for(f"snapshots/{bucket}/{seq}-{len(changes)}.snap")
    return upload_snapshot(resolver, uri, items, bucket=bucket, seq=seq, compress=True)


def contents(store: InMemoryStore, buckets: Iterable[int]) -> dict[int, object]:
    """Every bucket's entries and lineage metadata."""
    return {b: (store.scan(b, b""), store.get_meta(b)) for b in buckets}


def _restore_alone(
    states: Iterable[BucketState], resolver: StoreResolver
) -> tuple[InMemoryStore, list[int]]:
    """The reference: each bucket alone, one after the other, one ranged read per
    section (``read_changes``)."""
    store = InMemoryStore()
    buckets = []
    for state in states:
        restore_bucket(store, state, resolver, reader=read_changes)
        buckets.append(state.bucket)
    return store, buckets


# --- request counts ----------------------------------------------------------------------


def test_a_range_restores_with_one_read_per_segment_object(
    object_store: LocalObjectStore,
) -> None:
    buckets = range(32)
    layout = write_batches(object_store, buckets, batches=100)
    states = [layout.states[b] for b in buckets]
    resolver, counting = counting_resolver(object_store)

    store = InMemoryStore()
    stats = restore_buckets(store, states, resolver)
    assert counting.gets == 100  # one per segment object, not 32 x 100 = 3,200
    assert {key for key, _, _ in counting.reads} == set(layout.segments)
    assert sum(s.replayed for s in stats) == 32 * 300

    ref_resolver, ref_counting = counting_resolver(object_store)
    reference, _ = _restore_alone(states, ref_resolver)
    assert ref_counting.gets == 3_200
    assert contents(store, buckets) == contents(reference, buckets)


def test_buckets_in_any_order_still_read_each_segment_object_once(
    object_store: LocalObjectStore,
) -> None:
    buckets = range(32)
    layout = write_batches(object_store, buckets, batches=100)
    order = [layout.states[b] for b in buckets]
    random.Random(5).shuffle(order)  # a task's input order, not the objects' layout
    resolver, counting = counting_resolver(object_store)
    store = InMemoryStore()
    restore_buckets(store, order, resolver)
    assert counting.gets == 100
    reference, _ = _restore_alone(order, counting_resolver(object_store)[0])
    assert contents(store, buckets) == contents(reference, buckets)


def test_snapshots_are_one_read_each_and_sections_below_the_base_are_not_read(
    object_store: LocalObjectStore,
) -> None:
    buckets = range(8)
    layout = write_batches(object_store, buckets, batches=40, snapshot_at=60)  # 20 below
    states = [layout.states[b] for b in buckets]
    resolver, counting = counting_resolver(object_store)
    store = InMemoryStore()
    restore_buckets(store, states, resolver)
    snapshot_reads = [r for r in counting.reads if r[0].startswith("snapshots/")]
    assert len(snapshot_reads) == 8
    assert counting.gets == 8 + 20  # batches 20..39 only
    reference, _ = _restore_alone(states, counting_resolver(object_store)[0])
    assert contents(store, buckets) == contents(reference, buckets)


def test_backend_restore_reads_only_for_buckets_it_rebuilds(
    object_store: LocalObjectStore,
) -> None:
    buckets = range(16)
    layout = write_batches(object_store, buckets, batches=30)
    resolver, counting = counting_resolver(object_store)
    backend = KeyedStateBackend(buckets, 16, InMemoryStore(), TestingChangelogWriter())
    summary = backend.restore(layout.states, resolver)
    assert summary.restored == tuple(buckets) and counting.gets == 30
    again = backend.restore(layout.states, resolver)  # the local copy carries the lineage
    assert again.local_hits == tuple(buckets) and counting.gets == 30


# --- same contents as each bucket alone ----------------------------------------------------

_OPS = st.sampled_from([Op.PUT, Op.PUT, Op.DELETE, Op.APPEND, Op.DELETE_PREFIX])


@dataclass(frozen=True)
class _Plan:
    """One generated bucket: its changes, how they are cut into sections, which segment
    object holds each section, and its base."""

    bucket: int
    changes: tuple[ChangeRecord, ...]
    chunks: tuple[tuple[int, int], ...]
    segments: tuple[int, ...]
    base: int
    snapshot: bool
    drop_old: bool


@st.composite
def _plans(draw: st.DrawFn) -> list[_Plan]:
    plans = []
    for bucket in draw(st.lists(st.integers(0, 40), min_size=1, max_size=5, unique=True)):
        ops = draw(st.lists(st.tuples(_OPS, st.integers(0, 5)), max_size=30))
        n = len(ops)
        cuts = sorted(draw(st.sets(st.integers(1, n - 1), max_size=6))) if n > 1 else []
        chunks = tuple(zip([0, *cuts], [*cuts, n], strict=True)) if n else ()
        changes = tuple(
            ChangeRecord(seq, op, b"k%d" % key, b"" if op is Op.DELETE else b"v%d" % seq)
            for seq, (op, key) in enumerate(ops)
        )
        snapshot = draw(st.booleans())
        plans.append(
            _Plan(
                bucket=bucket,
                changes=changes,
                chunks=chunks,
                segments=tuple(draw(st.integers(0, 4)) for _ in chunks),
                base=draw(st.integers(0, n)) if snapshot else 0,
                snapshot=snapshot,
                drop_old=draw(st.booleans()),
            )
        )
    return plans


def _build(root: Path, plans: list[_Plan]) -> tuple[LocalObjectStore, list[BucketState]]:
    """Write the plans' segments (each holding sections of several buckets, in bucket
    order) and snapshots; return the bucket states."""
    store = LocalObjectStore(root)
    resolver = StoreResolver()
    resolver.register(store)
    by_segment: dict[int, list[tuple[int, int, int]]] = {}
    for plan in plans:
        for (lo, hi), seg in zip(plan.chunks, plan.segments, strict=True):
            by_segment.setdefault(seg, []).append((plan.bucket, lo, hi))
    changes = {plan.bucket: plan.changes for plan in plans}
    handles: dict[int, list[ChangelogHandle]] = {plan.bucket: [] for plan in plans}
    for seg, sections in sorted(by_segment.items()):
        builder = SegmentBuilder()
        for bucket, lo, hi in sorted(sections):
            builder.add_records(bucket, lo, changes[bucket][lo:hi])
        data, infos = builder.build()
        key = f"changelog/{seg}.seg"
        store.put(key, data, if_absent=True)
        for info in infos:
            handles[info.bucket].append(info.handle(store.uri_for(key)))
    states = []
    for plan in plans:
        snapshot = None
        if plan.snapshot:
            snapshot = snapshot_of(
                resolver, store, plan.bucket, plan.changes[: plan.base], plan.base
            )
        mine = sorted(handles[plan.bucket], key=lambda h: h.from_seq)
        if plan.drop_old:
            mine = [h for h in mine if h.to_seq > plan.base]
        token = mine[-1].uri if mine else (snapshot.uri if snapshot else "")
        states.append(BucketState(plan.bucket, len(plan.changes), snapshot, tuple(mine), token))
    return store, states


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    plans=_plans(),
    window=st.sampled_from([1, 64, 300, 32 * 1024 * 1024]),
    gap=st.sampled_from([0, 24, 1024 * 1024]),
    threads=st.integers(1, 4),
    ahead=st.integers(0, 2),
    merge_stored=st.sampled_from([0, 16 * 1024 * 1024]),
    merge_raw=st.sampled_from([0, 20, 64 * 1024 * 1024]),
)
def test_restoring_together_equals_restoring_each_bucket_alone(
    plans: list[_Plan],
    *,
    window: int,
    gap: int,
    threads: int,
    ahead: int,
    merge_stored: int,
    merge_raw: int,
) -> None:
    """Whatever the windows and whether a bucket's tail is merged into its snapshot
    (``merge_stored``), wholly or until its bound (``merge_raw``: 0 stops after the first
    change, 20 after a few), or replayed after it."""
    with tempfile.TemporaryDirectory() as tmp:
        store, states = _build(Path(tmp) / "objects", plans)
        buckets = [s.bucket for s in states]
        resolver, counting = counting_resolver(store)
        together = InMemoryStore()
        together.put(buckets[0], b"stale", b"x")  # replaced, never merged
        tuning = FetchSettings(
            threads=threads,
            window_bytes=window,
            max_gap_bytes=gap,
            ahead=ahead,
            merge_stored_bytes=merge_stored,
            merge_raw_bytes=merge_raw,
        )
        stats = restore_buckets(together, states, resolver, settings=tuning)
        ref_resolver, ref_counting = counting_resolver(store)
        alone, _ = _restore_alone(states, ref_resolver)
        assert contents(together, buckets) == contents(alone, buckets)
        assert [s.bucket for s in stats] == buckets
        if merge_raw > 20:  # a merge stopped at its bound may read a section again
            assert counting.gets <= ref_counting.gets  # coalescing never reads more often
        for plan in plans:  # both equal the plan's changes applied in order
            model = InMemoryStore()
            model.apply(plan.bucket, [(c.op, c.key, c.value) for c in plan.changes])
            assert model.scan(plan.bucket, b"") == together.scan(plan.bucket, b"")


# --- errors: as clear as restoring one bucket ------------------------------------------------


def _flip(object_store: LocalObjectStore, uri: str, offset: int) -> None:
    path = Path(object_store.root_uri.removeprefix("file://")) / uri.removeprefix(
        object_store.root_uri + "/"
    )
    data = bytearray(path.read_bytes())
    data[offset] ^= 0x01
    path.chmod(0o644)
    path.write_bytes(bytes(data))


def test_a_coverage_gap_fails_before_anything_is_read_or_cleared(
    object_store: LocalObjectStore,
) -> None:
    layout = write_batches(object_store, range(3), batches=6)
    gap = layout.states[2]
    broken = BucketState(2, gap.seq, None, gap.changelog[:2] + gap.changelog[3:], gap.token)
    resolver, counting = counting_resolver(object_store)
    store = InMemoryStore()
    store.put(0, b"kept", b"1")
    with pytest.raises(RestoreError, match=r"^bucket 2: changelog is missing changes \[6, 9\)"):
        restore_buckets(store, [layout.states[0], layout.states[1], broken], resolver)
    assert counting.gets == 0
    assert store.scan(0, b"") == [(b"kept", b"1")]


def test_a_damaged_section_names_bucket_and_object(object_store: LocalObjectStore) -> None:
    layout = write_batches(object_store, range(3), batches=4)
    damaged = layout.states[1].changelog[2]
    _flip(object_store, damaged.uri, damaged.offset + damaged.length - 1)
    resolver, _ = counting_resolver(object_store)
    store = InMemoryStore()
    states = [layout.states[b] for b in range(3)]
    with pytest.raises(
        CorruptFileError, match="checksum mismatch in section payload of bucket 1"
    ) as err:
        restore_buckets(store, states, resolver)
    assert damaged.uri in str(err.value)
    assert store.get_meta(0) is not None  # restored before the damaged bucket
    assert store.get_meta(1) is None and store.get_meta(2) is None


def test_a_missing_segment_names_bucket_and_range(object_store: LocalObjectStore) -> None:
    layout = write_batches(object_store, range(2), batches=5)
    object_store.delete_many([layout.segments[3]])
    resolver, _ = counting_resolver(object_store)
    with pytest.raises(
        RestoreError, match=r"^bucket 0: changelog segment .*000003\.seg holding changes \[9, 12\)"
    ):
        restore_buckets(InMemoryStore(), [layout.states[0], layout.states[1]], resolver)


def test_a_truncated_segment_is_corrupt(object_store: LocalObjectStore) -> None:
    layout = write_batches(object_store, range(4), batches=2)
    key = layout.segments[1]
    data = object_store.get(key)
    object_store.delete_many([key])
    object_store.put(key, data[: len(data) // 2])
    resolver, _ = counting_resolver(object_store)
    with pytest.raises(CorruptFileError, match="truncated"):
        restore_buckets(InMemoryStore(), [layout.states[b] for b in range(4)], resolver)


def test_a_missing_snapshot_is_a_restore_error(object_store: LocalObjectStore) -> None:
    layout = write_batches(object_store, range(2), batches=3, snapshot_at=3)
    snapshot = layout.states[1].snapshot
    assert snapshot is not None
    object_store.delete_many([snapshot.uri.removeprefix(object_store.root_uri + "/")])
    resolver, _ = counting_resolver(object_store)
    with pytest.raises(RestoreError, match=r"snapshot .* of bucket 1 is missing"):
        restore_buckets(InMemoryStore(), [layout.states[0], layout.states[1]], resolver)


def test_a_bucket_given_twice_is_refused(object_store: LocalObjectStore) -> None:
    layout = write_batches(object_store, range(1), batches=1)
    with pytest.raises(RestoreError, match="bucket 0 is given twice"):
        restore_buckets(InMemoryStore(), [layout.states[0]] * 2, counting_resolver(object_store)[0])


# --- planning and bounded prefetch -----------------------------------------------------------


def test_sections_of_one_object_coalesce_when_the_gaps_are_small(
    object_store: LocalObjectStore,
) -> None:
    layout = write_batches(object_store, range(6), batches=3)
    every_other = [n for b in (0, 2, 4) for n in replay_needs(layout.states[b])]
    longest = max(h.length for b in (1, 3) for h in layout.states[b].changelog)
    (spanning,) = plan_windows(every_other, window_bytes=1 << 20, max_gap_bytes=longest)
    assert len(spanning.reads) == 3  # one per object, each spanning the skipped sections
    assert spanning.nbytes == sum(r.stop - r.start for r in spanning.reads)
    (separate,) = plan_windows(every_other, window_bytes=1 << 20, max_gap_bytes=0)
    assert len(separate.reads) == 9
    assert separate.nbytes == sum(n.handle.length for n in every_other)


def test_windows_hold_at_most_window_bytes_and_every_need_once(
    object_store: LocalObjectStore,
) -> None:
    layout = write_batches(object_store, range(8), batches=10, snapshot_at=6)
    needs: list[SnapshotHandle | SectionNeed] = []
    for b in range(8):
        state = layout.states[b]
        assert state.snapshot is not None
        needs += [state.snapshot, *replay_needs(state), *replay_needs(state)[:1]]  # a repeat
    budget = 400
    windows = plan_windows(needs, window_bytes=budget, max_gap_bytes=1 << 20)
    planned = [n for w in windows for n in w.snapshots] + [
        s for w in windows for r in w.reads for s in r.sections
    ]
    assert len(planned) == len(set(planned)) == len(set(needs))
    for window in windows:
        single = len(window.snapshots) + sum(len(r.sections) for r in window.reads) == 1
        assert window.nbytes <= budget or single
        assert window.nbytes == sum(s.size for s in window.snapshots) + sum(
            r.stop - r.start for r in window.reads
        )


def test_the_fetcher_reads_at_most_ahead_windows_past_the_one_applied(
    object_store: LocalObjectStore,
) -> None:
    layout = write_batches(object_store, range(4), batches=12)
    needs = [n for b in range(4) for n in replay_needs(layout.states[b])]
    resolver, counting = counting_resolver(object_store)
    tuning = FetchSettings(threads=2, window_bytes=300, ahead=1)
    with RestoreFetcher(resolver, needs, settings=tuning) as fetcher:
        windows = fetcher.windows
        assert len(windows) > 4
        window_of = {
            s.handle: i for i, w in enumerate(windows) for r in w.reads for s in r.sections
        }
        reads_through = [sum(len(w.reads) for w in windows[: i + 1]) for i in range(len(windows))]
        for need in needs:
            records = fetcher.section(need)
            assert [r.seq for r in records] == list(range(need.handle.from_seq, need.handle.to_seq))
            current = window_of[need.handle]
            allowed = reads_through[min(current + 1, len(windows) - 1)]
            assert fetcher.reads <= allowed and counting.gets <= allowed
    assert counting.gets == fetcher.reads == reads_through[-1]


def test_an_unplanned_section_is_read_directly(object_store: LocalObjectStore) -> None:
    layout = write_batches(object_store, range(2), batches=2)
    needs = replay_needs(layout.states[0])
    resolver, counting = counting_resolver(object_store)
    with RestoreFetcher(resolver, needs) as fetcher:
        other = replay_needs(layout.states[1])[0]
        assert [r.seq for r in fetcher.section(other)] == [0, 1, 2]
        assert counting.gets == 1  # nothing planned was fetched for it
