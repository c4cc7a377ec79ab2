"""run_task in one process: local reuse, restore from storage, retries, output, fencing."""

from __future__ import annotations

import gc
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from executor_helpers import (
    OUTPUT_SCHEMA,
    QUIET,
    InjectedFailureError,
    counting,
    counts_from_storage,
    expected_counts,
    keys_of_task,
    run_batch,
    staged_rows,
    states_of,
)

from gic_runtime.coordination.barrier import Barrier, TaskAck
from gic_runtime.errors import FencedError, StateError
from gic_runtime.executor import heap
from gic_runtime.executor.core import TaskContext, expected_states, run_task
from gic_runtime.state import mapped_pages

BATCH1 = [f"k{i}" for i in range(40)]
BATCH2 = [f"k{i}" for i in range(20, 60)] + ["k0", "k0"]
BATCH3 = [f"k{i}" for i in range(0, 60, 3)]

MakeBarrier = Callable[..., Barrier]


def _total(acks: list[TaskAck], field: str) -> int:
    return sum(getattr(a.stats, field) for a in acks)


def test_chained_batches_reuse_the_local_copy(make_barrier: MakeBarrier) -> None:
    acks1 = run_batch(make_barrier(1), BATCH1)
    assert _total(acks1, "empty") == 8
    assert _total(acks1, "changes") == len(BATCH1)
    assert _total(acks1, "rows_in") == len(BATCH1)

    acks2 = run_batch(make_barrier(2, expected=states_of(acks1)), BATCH2)
    assert _total(acks2, "local_hits") + _total(acks2, "empty") == 8
    assert _total(acks2, "restored") == 0
    assert _total(acks2, "replayed") == 0

    want = expected_counts(BATCH1, BATCH2)
    assert counts_from_storage(states_of(acks2)) == want
    assert staged_rows(acks2) == {k: want[k] for k in BATCH2}
    for ack in acks2:
        for state in ack.states.values():
            assert state.seq == sum(1 for k in [*BATCH1, *BATCH2] if _bucket(k) == state.bucket)


def _bucket(key: str) -> int:
    from gic_runtime.state.keys import bucket_for

    return bucket_for(key, 8)


def test_rerun_from_an_older_lineage_restores_without_doubling(make_barrier: MakeBarrier) -> None:
    acks1 = run_batch(make_barrier(1), BATCH1)
    run_batch(make_barrier(2, expected=states_of(acks1)), BATCH2)
    # driver crashed before manifest 2: batch 2 runs again from checkpoint 1
    rerun = run_batch(make_barrier(2, expected=states_of(acks1)), BATCH2)
    touched = {_bucket(k) for k in BATCH2}
    assert _total(rerun, "restored") == len(touched)
    assert _total(rerun, "replayed") > 0
    want = expected_counts(BATCH1, BATCH2)
    assert counts_from_storage(states_of(rerun)) == want
    assert staged_rows(rerun) == {k: want[k] for k in BATCH2}

    acks3 = run_batch(make_barrier(3, expected=states_of(rerun)), BATCH3)
    assert _total(acks3, "restored") == 0
    assert counts_from_storage(states_of(acks3)) == expected_counts(BATCH1, BATCH2, BATCH3)


def test_a_failed_attempt_is_retried_exactly(make_barrier: MakeBarrier) -> None:
    acks1 = run_batch(make_barrier(1), BATCH1)
    barrier2 = make_barrier(2, expected=states_of(acks1))
    with pytest.raises(InjectedFailureError):
        run_batch(barrier2, BATCH2, fail_task=0, fail_after=10)
    retry = run_batch(barrier2, BATCH2)
    touched0 = {_bucket(k) for k in keys_of_task(barrier2, 0, BATCH2)[:10]}
    assert retry[0].stats.restored >= len(touched0)
    assert retry[0].stats.local_hits <= 4 - len(touched0)
    want = expected_counts(BATCH1, BATCH2)
    assert counts_from_storage(states_of(retry)) == want
    assert staged_rows(retry) == {k: want[k] for k in BATCH2}


def test_a_checkpoint_not_acked_is_not_reused(make_barrier: MakeBarrier) -> None:
    """Batch 2 finished but its ack was lost; the retry must not start from batch 2's
    local state (its lineage metadata names batch 2, not batch 1)."""
    acks1 = run_batch(make_barrier(1), BATCH1)
    barrier2 = make_barrier(2, expected=states_of(acks1))
    run_task(barrier2, 1, counting(keys_of_task(barrier2, 1, BATCH2)))
    retry = run_batch(barrier2, BATCH2)
    assert counts_from_storage(states_of(retry)) == expected_counts(BATCH1, BATCH2)
    assert retry[1].stats.restored > 0


def test_staged_output_holds_exactly_the_yielded_rows(make_barrier: MakeBarrier) -> None:
    barrier = make_barrier(1)

    def process(ctx: TaskContext) -> list[pa.Table]:
        return [
            pa.table({"key": ["a", "b"], "count": [1, 2]}, schema=OUTPUT_SCHEMA),
            pa.table({"key": [], "count": []}, schema=OUTPUT_SCHEMA),
            pa.table({"count": [3], "key": ["c"]}),  # same columns, other order and types
        ]

    ack = run_task(barrier, 1, process, output_schema=OUTPUT_SCHEMA)
    assert len(ack.outputs) == 1
    staged = ack.outputs[0]
    path = Path(staged.uri.removeprefix("file://"))
    assert path.name.startswith("part-00001-") and path.suffix == ".parquet"
    assert staged.uri.startswith(barrier.staging_uri or "?")
    assert staged.size == path.stat().st_size
    table = pq.read_table(path)
    assert table.schema.equals(OUTPUT_SCHEMA)
    assert table.to_pylist() == [
        {"key": "a", "count": 1},
        {"key": "b", "count": 2},
        {"key": "c", "count": 3},
    ]
    assert staged.rows == 3 == ack.stats.rows_out


def test_no_rows_no_file_and_rows_without_staging_fail(make_barrier: MakeBarrier) -> None:
    ack = run_task(make_barrier(1), 0, lambda ctx: iter(()))
    assert ack.outputs == ()
    assert set(ack.states) == set(range(4))
    with pytest.raises(StateError, match="staging_uri"):
        run_task(make_barrier(2, staging_uri=None), 0, counting(["x"]))


def test_output_of_another_schema_fails_clearly(make_barrier: MakeBarrier) -> None:
    def process(ctx: TaskContext) -> list[pa.Table]:
        return [pa.table({"other": [1]})]

    with pytest.raises(StateError, match="does not match the output schema"):
        run_task(make_barrier(1), 0, process, output_schema=OUTPUT_SCHEMA)


def test_stats_count_changelog_bytes_and_nothing_when_idle(make_barrier: MakeBarrier) -> None:
    acks1 = run_batch(make_barrier(1), BATCH1)
    assert all(a.stats.changelog_bytes > 0 for a in acks1)
    idle = [run_task(make_barrier(2, expected=states_of(acks1)), i, lambda c: ()) for i in (0, 1)]
    assert [a.stats.changelog_bytes for a in idle] == [0, 0]
    assert [a.stats.changes for a in idle] == [0, 0]
    assert expected_states(idle) == states_of(acks1)


def test_an_older_attempt_is_fenced(make_barrier: MakeBarrier) -> None:
    run_batch(make_barrier(1, epoch=2), BATCH1)
    with pytest.raises(FencedError, match="epoch 1"):
        run_task(make_barrier(2, epoch=1), 0, counting([]))


def test_a_newer_attempt_restores_the_old_attempts_state(make_barrier: MakeBarrier) -> None:
    acks1 = run_batch(make_barrier(1, epoch=1), BATCH1)
    acks2 = run_batch(make_barrier(2, epoch=2, expected=states_of(acks1)), BATCH2)
    assert _total(acks2, "restored") == 0  # the local copy carries the same lineage
    assert all(a.epoch == 2 for a in acks2)
    fresh = {h.uri for a in acks2 for s in a.states.values() for h in s.changelog}
    assert any("/changelog/2/" in uri for uri in fresh)
    assert counts_from_storage(states_of(acks2)) == expected_counts(BATCH1, BATCH2)


def test_a_task_in_a_reused_worker_leaves_its_survivors_frozen(
    make_barrier: MakeBarrier, monkeypatch: pytest.MonkeyPatch
) -> None:
    """PySpark collects the whole heap after each task of a reused worker; the task core
    freezes the survivors first, so that collection visits only newer objects
    (gic_runtime.executor.heap)."""
    monkeypatch.setenv(heap.REUSE_ENV, "1")
    gc.unfreeze()
    try:
        run_task(make_barrier(1), 0, counting(["x"]))
        assert gc.get_freeze_count() > 10_000
        assert len(gc.get_objects()) < gc.get_freeze_count() // 10
    finally:
        gc.unfreeze()  # give the test process's objects back to the collector


def _mapped(barrier: Barrier) -> int | None:
    """Bytes of the local copy's data files resident in this process's mappings."""
    files = {str(p.resolve()) for p in Path(barrier.local_dir).rglob("data.mdb")}
    assert len(files) == barrier.num_buckets
    return mapped_pages.resident_bytes(files)


@pytest.mark.parametrize(
    ("limit", "unmapped"),
    [(1, True), (0, False), (1 << 40, False)],
    ids=["every-task", "never", "not-reached"],
)
def test_local_state_mapped_limit_bounds_the_pages_of_the_local_copy_a_worker_maps(
    make_barrier: MakeBarrier, limit: int, unmapped: bool
) -> None:
    """Past ``local_state_mapped_limit`` of growth a worker unmaps its pages of the local
    copy after the task (the data stays cached, the next batch still reuses it); below
    it, or with 0, they stay mapped."""
    settings = replace(QUIET, local_state_mapped_limit=limit)
    acks = run_batch(make_barrier(1, settings=settings), BATCH1)
    assert (_mapped(make_barrier(1)) == 0) is unmapped
    acks2 = run_batch(make_barrier(2, expected=states_of(acks), settings=settings), BATCH2)
    assert (_mapped(make_barrier(2)) == 0) is unmapped
    assert _total(acks2, "restored") == 0  # the next batch reuses the copy all the same
    assert counts_from_storage(states_of(acks2)) == expected_counts(BATCH1, BATCH2)
