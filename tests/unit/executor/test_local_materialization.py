"""Background materialization through the executor-local records."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from executor_helpers import EAGER, counts_from_storage, expected_counts, run_batch, states_of

from gic_runtime.coordination.barrier import Barrier, TaskAck
from gic_runtime.errors import CorruptFileError, UnsupportedVersionError
from gic_runtime.executor.core import local_stats, wait_local_materializations
from gic_runtime.handles import BucketState, ChangelogHandle, SnapshotHandle
from gic_runtime.materialization.pool import LocalMaterializationStats
from gic_runtime.materialization.scheduler import MaterializationSettings
from gic_runtime.materialization.snapshot_record import (
    ADOPTION_MAX_AGE_S,
    MaterializationRecord,
    decode_record,
    encode_record,
    read_record,
    record_path,
    usable_for,
    write_record,
)
from gic_runtime.storage.local import LocalObjectStore

MakeBarrier = Callable[..., Barrier]
KEYS = [f"k{i}" for i in range(60)]
EAGER_ALL = replace(
    EAGER, materialization=replace(EAGER.materialization, max_in_flight=8, retry_delay_s=0.0)
)


def first_batch(
    make_barrier: MakeBarrier,
) -> tuple[list[TaskAck], int, LocalMaterializationStats, LocalMaterializationStats]:
    """Run batch 1 on ``KEYS`` with eager background materializations and wait for them;
    return its acks, how many materializations it started (at least one), and this
    process's materialization counters before and after."""
    before = local_stats()
    acks1 = run_batch(make_barrier(1, settings=EAGER_ALL), KEYS)
    started = sum(a.stats.materializations_started for a in acks1)
    assert started >= 1
    assert wait_local_materializations(30)
    return acks1, started, before, local_stats()


def test_a_background_snapshot_is_adopted_by_the_next_batch(make_barrier: MakeBarrier) -> None:
    acks1, started, before, after = first_batch(make_barrier)
    assert after.completed - before.completed == started
    assert after.failed == before.failed
    assert after.bytes_uploaded > before.bytes_uploaded

    acks2 = run_batch(make_barrier(2, settings=EAGER_ALL, expected=states_of(acks1)), KEYS[:30])
    assert sum(a.stats.materializations_adopted for a in acks2) == started
    states2 = states_of(acks2)
    with_snapshot = [s for s in states2.values() if s.snapshot is not None]
    assert len(with_snapshot) == started
    for state in with_snapshot:
        assert state.snapshot is not None
        assert state.snapshot.seq == states_of(acks1)[state.bucket].seq
        assert all(h.from_seq >= state.snapshot.seq for h in state.changelog)
        assert "/snapshots/" in state.snapshot.uri
    assert counts_from_storage(states2) == expected_counts(KEYS, KEYS[:30])
    assert wait_local_materializations(30)


def test_a_record_older_than_the_adoption_limit_is_not_adopted(
    make_barrier: MakeBarrier, tmp_path: Path
) -> None:
    acks1 = run_batch(make_barrier(1, settings=EAGER_ALL), KEYS)
    assert wait_local_materializations(30)
    directory = tmp_path / "local" / "job" / "materialized"
    aged = 0
    for bucket in range(8):
        record = read_record(directory, bucket)
        if record is not None:  # as if written just past the limit
            write_record(directory, replace(record, time=record.time - ADOPTION_MAX_AGE_S - 1))
            aged += 1
    assert aged
    acks2 = run_batch(make_barrier(2, settings=EAGER_ALL, expected=states_of(acks1)), KEYS[:30])
    assert sum(a.stats.materializations_adopted for a in acks2) == 0
    assert counts_from_storage(states_of(acks2)) == expected_counts(KEYS, KEYS[:30])
    assert wait_local_materializations(30)


def test_a_snapshot_of_an_abandoned_lineage_is_not_adopted(
    make_barrier: MakeBarrier, tmp_path: Path
) -> None:
    acks1 = run_batch(make_barrier(1, settings=EAGER_ALL), KEYS)
    assert wait_local_materializations(30)
    acks2 = run_batch(make_barrier(2, settings=EAGER_ALL, expected=states_of(acks1)), KEYS)
    assert wait_local_materializations(30)
    directory = tmp_path / "local" / "job" / "materialized"
    states2 = states_of(acks2)
    records = [read_record(directory, b) for b in range(8)]
    of_batch2 = {
        r.snapshot.uri for r in records if r is not None and r.token == states2[r.bucket].token
    }
    assert of_batch2  # batch 2's lineage was materialized in the background
    # batch 2 never completed: its background snapshots are of a lineage nobody expects
    rerun = run_batch(make_barrier(2, settings=EAGER_ALL, expected=states_of(acks1)), KEYS[:5])
    states = states_of(rerun)
    assert not of_batch2 & {s.snapshot.uri for s in states.values() if s.snapshot}
    assert counts_from_storage(states) == expected_counts(KEYS, KEYS[:5])
    assert wait_local_materializations(30)


def test_unchanged_buckets_are_not_materialized_again(make_barrier: MakeBarrier) -> None:
    acks1 = run_batch(make_barrier(1, settings=EAGER_ALL), KEYS)
    assert wait_local_materializations(30)
    idle = run_batch(make_barrier(2, settings=EAGER_ALL, expected=states_of(acks1)), [])
    assert sum(a.stats.materializations_started for a in idle) == 0


def test_a_corrupt_record_is_ignored(make_barrier: MakeBarrier, tmp_path: Path) -> None:
    acks1 = run_batch(make_barrier(1), KEYS)
    directory = tmp_path / "local" / "job" / "materialized"
    directory.mkdir(parents=True)
    for bucket in range(8):
        record_path(directory, bucket).write_bytes(b"GICR 1 crc32c=00000000\n{}")
    acks2 = run_batch(make_barrier(2, settings=EAGER_ALL, expected=states_of(acks1)), KEYS)
    assert sum(a.stats.materializations_adopted for a in acks2) == 0
    assert sum(a.stats.materializations_started for a in acks2) >= 1
    assert wait_local_materializations(30)
    assert counts_from_storage(states_of(acks2)) == expected_counts(KEYS, KEYS)


def test_at_most_max_in_flight_start_per_process(make_barrier: MakeBarrier) -> None:
    one = replace(EAGER, materialization=MaterializationSettings(interval_s=1e-6, jitter=0.0))
    acks = run_batch(make_barrier(1, settings=one, num_tasks=1), KEYS)
    assert acks[0].stats.materializations_started == 1
    assert wait_local_materializations(30)


# --- the record itself ---------------------------------------------------------------------


def _handle(uri: str, bucket: int, start: int, stop: int) -> ChangelogHandle:
    return ChangelogHandle(uri, 0, 10, bucket, start, stop, 0)


def _record(seq: int, token: str, epoch: int = 1) -> MaterializationRecord:
    snap = SnapshotHandle("file:///r/jobs/j/snapshots/3/s.snap", 3, seq, 100, 7)
    return MaterializationRecord("j", "file:///r", epoch, 3, seq, token, snap, 1.5)


def test_record_round_trip_and_damage(tmp_path: Path) -> None:
    record = _record(10, "file:///r/seg-a")
    write_record(tmp_path, record)
    assert read_record(tmp_path, 3) == record
    assert read_record(tmp_path, 4) is None
    data = encode_record(record)
    try:
        decode_record(data.replace(b'"seq":10', b'"seq":11'), where="x")
    except CorruptFileError as exc:
        assert "checksum" in str(exc)
    else:  # pragma: no cover
        raise AssertionError("a damaged record was accepted")
    try:
        decode_record(data.replace(b"GICR 1", b"GICR 9"), where="x")
    except UnsupportedVersionError:
        pass
    else:  # pragma: no cover
        raise AssertionError("an unknown version was accepted")


def test_record_usable_only_on_its_own_history() -> None:
    seg_a, seg_b = "file:///r/seg-a", "file:///r/seg-b"
    history = (_handle(seg_a, 3, 0, 10), _handle(seg_b, 3, 10, 15))
    at_15 = BucketState(3, 15, None, history, seg_b)
    ok = {"root": "file:///r", "job_id": "j", "epoch": 1}
    assert usable_for(_record(15, seg_b), at_15, **ok)  # the state itself
    assert usable_for(_record(10, seg_a), at_15, **ok)  # a point it passed through
    assert not usable_for(_record(10, seg_b), at_15, **ok)  # seg-b does not end at 10
    assert not usable_for(_record(15, "file:///r/seg-other"), at_15, **ok)  # other history
    assert not usable_for(_record(16, seg_b), at_15, **ok)  # beyond the state
    assert not usable_for(_record(15, seg_b, epoch=0), at_15, **ok)  # older attempt
    based = BucketState(3, 15, SnapshotHandle("file:///r/s", 3, 10, 1, 1), history[1:], seg_b)
    assert not usable_for(_record(10, seg_a), based, **ok)  # not newer than the base


def test_failed_background_uploads_never_fail_a_task(
    make_barrier: MakeBarrier, local_store: LocalObjectStore
) -> None:
    for bucket in range(8):  # a file where the bucket's snapshot directory should be
        local_store.put(f"jobs/job/snapshots/{bucket}", b"in the way")
    acks1, started, before, after = first_batch(make_barrier)
    assert after.failed - before.failed == started
    assert after.completed == before.completed

    acks2 = run_batch(make_barrier(2, settings=EAGER_ALL, expected=states_of(acks1)), KEYS)
    assert sum(a.stats.materializations_adopted for a in acks2) == 0
    assert wait_local_materializations(30)
    assert counts_from_storage(states_of(acks2)) == expected_counts(KEYS, KEYS)
