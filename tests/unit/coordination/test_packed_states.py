"""Barriers pickle their expected states packed per task: equal after the trip, each
task decodes only its own buckets, and anything unusual still pickles."""

from __future__ import annotations

import pickle

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gic_runtime.coordination.barrier import Barrier
from gic_runtime.coordination.packed_states import PackedStates
from gic_runtime.errors import ConfigurationError
from gic_runtime.handles import BucketState, ChangelogHandle, SnapshotHandle

B, TASKS = 16, 3


def _state(bucket: int, handles: int, snapshot: bool, shared: bool = True) -> BucketState:
    # segments are shared by the buckets of a task, as the writer uploads them
    owner = bucket // 6 if shared else bucket
    changelog = tuple(
        ChangelogHandle(f"s3://b/j/seg-{owner}-{i}.seg", i * 10, 9, bucket, i, i + 1, 2**32 - 1)
        for i in range(handles)
    )
    snap = SnapshotHandle(f"file:///j/snap-{bucket}", bucket, 0, 123, 7) if snapshot else None
    token = changelog[-1].uri if changelog else (snap.uri if snap else "")
    return BucketState(bucket, handles, snap, changelog, token)


def _barrier(expected: dict[int, BucketState]) -> Barrier:
    return Barrier("job", "file:///r", 1, 5, B, TASKS, "/tmp/local", expected=expected)


_states = st.dictionaries(
    st.integers(0, B - 1),
    st.tuples(st.integers(0, 4), st.booleans(), st.booleans()),
    max_size=B,
).map(lambda d: {b: _state(b, n, snap, shared) for b, (n, snap, shared) in d.items()})


class TestRoundTrip:
    @given(_states)
    def test_barrier_equal_after_pickling(self, expected: dict[int, BucketState]) -> None:
        barrier = _barrier(expected)
        back = pickle.loads(pickle.dumps(barrier))
        assert back == barrier
        assert dict(back.expected) == expected
        for i in range(TASKS):
            assert back.expected_for(i) == barrier.expected_for(i)
        assert pickle.loads(pickle.dumps(back)) == barrier  # packed states pickle as is

    def test_a_task_decodes_only_its_own_buckets(self) -> None:
        expected = {b: _state(b, 3, b % 2 == 0) for b in range(B)}
        back = pickle.loads(pickle.dumps(_barrier(expected)))
        packed = back.expected
        assert isinstance(packed, PackedStates)
        owned = back.bucket_range(1)
        assert back.expected_for(1) == {b: expected[b] for b in owned}
        decoded = [d is not None for d in packed._decoded]
        assert decoded == [False, True, False]

    def test_shared_uris_are_stored_once(self) -> None:
        expected = {b: _state(b, 30, True) for b in range(B)}
        packed = PackedStates.pack(expected, B, TASKS)
        plain = len(pickle.dumps(expected))
        assert len(pickle.dumps(packed)) < plain / 2
        assert packed == expected

    def test_empty_and_unusual_expectations_pickle_plainly(self) -> None:
        assert pickle.loads(pickle.dumps(_barrier({}))).expected == {}
        odd = {B + 3: _state(B + 3, 1, False)}  # out of range: left for the task to reject
        back = pickle.loads(pickle.dumps(_barrier(odd)))
        assert type(back.expected) is dict and back.expected == odd


class TestMapping:
    def test_mapping_protocol(self) -> None:
        expected = {b: _state(b, 1, False) for b in (0, 5, 15)}
        packed = PackedStates.pack(expected, B, TASKS)
        assert len(packed) == 3 and sorted(packed) == [0, 5, 15]
        assert 5 in packed and 6 not in packed and "5" not in packed and -1 not in packed
        assert packed[15] == expected[15]
        with pytest.raises(KeyError):
            packed[B]
        assert packed.get(6) is None
        assert repr(packed) == f"PackedStates(3 buckets, {TASKS} tasks)"

    def test_bad_input(self) -> None:
        with pytest.raises(ConfigurationError, match="outside"):
            PackedStates.pack({B: _state(B, 0, False)}, B, TASKS)
        with pytest.raises(ConfigurationError, match="same gic version"):
            PackedStates(b"\x90", (b"\x90",), ((),), B, TASKS)
