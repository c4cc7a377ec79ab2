"""Reading chosen keys of checkpointed buckets without restoring them equals restoring
them and reading those keys (gic_runtime.state.selective_read), with a restore's checks
and errors."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tests.unit.state.test_parallel_restore import (
    _build,
    _flip,
    _Plan,
    _plans,
    _restore_alone,
    counting_resolver,
    write_batches,
)

from gic_runtime.changelog.records import Op
from gic_runtime.errors import CorruptFileError, RestoreError
from gic_runtime.handles import BucketState
from gic_runtime.state.fetch import FetchSettings
from gic_runtime.state.memory_store import InMemoryStore
from gic_runtime.state.restore import restore_buckets
from gic_runtime.state.selective_read import select_keys
from gic_runtime.state.snapshot import encode_snapshot, open_snapshot
from gic_runtime.state.tail_fold import TailFold
from gic_runtime.storage.local import LocalObjectStore

# Every key the generated plans use (b"k0".."k5"), and one they never write.
_CANDIDATES = [b"k%d" % i for i in range(6)] + [b"absent"]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    plans=_plans(),
    chosen=st.lists(st.sets(st.sampled_from(_CANDIDATES)), min_size=5, max_size=5),
    window=st.sampled_from([1, 300, 32 * 1024 * 1024]),
)
def test_selected_keys_are_what_a_restore_leaves_for_them(
    plans: list[_Plan], chosen: list[set[bytes]], window: int
) -> None:
    """Whatever the snapshot, the tail (puts, deletes, appends, prefix deletions) and the
    keys chosen, present or not."""
    with tempfile.TemporaryDirectory() as tmp:
        store, states = _build(Path(tmp) / "objects", plans)
        keys = {s.bucket: chosen[i % len(chosen)] for i, s in enumerate(states)}
        resolver, _ = counting_resolver(store)
        tuning = FetchSettings(window_bytes=window)
        selected = select_keys(states, keys, resolver, settings=tuning)
        restored, _ = _restore_alone(states, counting_resolver(store)[0])
        for state in states:
            whole = dict(restored.scan(state.bucket, b""))
            expected = {k: v for k, v in whole.items() if k in keys[state.bucket]}
            assert selected[state.bucket] == expected
        assert list(selected) == [s.bucket for s in states]


def test_a_selection_reads_what_a_restore_reads_and_writes_nothing(
    object_store: LocalObjectStore,
) -> None:
    layout = write_batches(object_store, range(3), batches=6, snapshot_at=7)
    states = [layout.states[b] for b in range(3)]
    resolver, counting = counting_resolver(object_store)
    wanted = {b: {b"k%d-%d" % (b, i) for i in range(0, 7, 2)} for b in range(3)}
    selected = select_keys(states, wanted, resolver)
    reads = counting.gets
    restored = InMemoryStore()
    reference, restore_counting = counting_resolver(object_store)
    restore_buckets(restored, states, reference)
    assert reads == restore_counting.gets  # one read per segment object, one per snapshot
    for b in range(3):
        whole = dict(restored.scan(b, b""))
        assert selected[b] == {k: v for k, v in whole.items() if k in wanted[b]}
        assert selected[b]  # the layout's keys exist


def test_a_coverage_gap_fails_before_anything_is_read(object_store: LocalObjectStore) -> None:
    layout = write_batches(object_store, range(2), batches=6)
    gap = layout.states[1]
    broken = BucketState(1, gap.seq, None, gap.changelog[:2] + gap.changelog[3:], gap.token)
    resolver, counting = counting_resolver(object_store)
    with pytest.raises(RestoreError, match=r"^bucket 1: changelog is missing changes \[6, 9\)"):
        select_keys([layout.states[0], broken], {0: {b"k0-1"}, 1: {b"k1-1"}}, resolver)
    assert counting.gets == 0
    with pytest.raises(RestoreError, match="bucket 0 is given twice"):
        select_keys([layout.states[0], layout.states[0]], {}, resolver)


def test_a_damaged_snapshot_is_reported_as_in_a_restore(object_store: LocalObjectStore) -> None:
    layout = write_batches(object_store, [4], batches=3, snapshot_at=5)
    state = layout.states[4]
    assert state.snapshot is not None
    _flip(object_store, state.snapshot.uri, state.snapshot.size - 2)
    resolver, _ = counting_resolver(object_store)
    with pytest.raises(CorruptFileError, match="checksum mismatch in snapshot file") as err:
        select_keys([state], {4: {b"k4-1"}}, resolver)
    assert state.snapshot.uri in str(err.value)


def test_a_snapshot_scan_checks_every_key_but_copies_only_the_chosen() -> None:
    items = [(b"a", b"1"), (b"b", b"22"), (b"c", b"333"), (b"d", b"4444")]
    snapshot = open_snapshot(encode_snapshot(items, bucket=1, seq=9, compress=True), uri="u")
    assert list(snapshot.select({b"b", b"d", b"zz"})) == [(b"b", b"22"), (b"d", b"4444")]
    assert list(snapshot.entries()) == items
    backwards = encode_snapshot([(b"b", b"1"), (b"a", b"2")], bucket=1, seq=9)
    unordered = open_snapshot(backwards, uri="u")
    with pytest.raises(CorruptFileError, match="snapshot keys do not ascend"):
        list(unordered.select({b"nothing"}))  # unchosen keys are still checked


_KEYS = st.sampled_from([b"", b"a", b"ab", b"abc", b"b", b"ba"])
_CHANGES = st.lists(
    st.one_of(
        st.tuples(st.sampled_from([Op.PUT, Op.APPEND]), _KEYS, st.binary(max_size=3)),
        st.tuples(st.sampled_from([Op.DELETE, Op.DELETE_PREFIX]), _KEYS, st.just(b"")),
    ),
    max_size=30,
)


@given(st.dictionaries(_KEYS, st.binary(max_size=3), max_size=6), _CHANGES, st.sets(_KEYS))
def test_a_fold_of_some_keys_merges_them_as_the_whole_fold_does(
    base: dict[bytes, bytes], changes: list[tuple[Op, bytes, bytes]], keep: set[bytes]
) -> None:
    whole = TailFold()
    whole.add_all(changes)
    expected = [(k, v) for k, v in whole.merge(sorted(base.items())) if k in keep]
    kept = TailFold()  # what a selection folds: the kept keys' changes, every prefix deletion
    kept.add_all([c for c in changes if c[0] is Op.DELETE_PREFIX or c[1] in keep])
    assert list(kept.merge(sorted((k, v) for k, v in base.items() if k in keep))) == expected
    assert len(kept) <= len(keep)
