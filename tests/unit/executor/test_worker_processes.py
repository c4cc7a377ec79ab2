"""Tasks moving between worker processes of one executor (spawn-ed, long-lived)."""

from __future__ import annotations

import fcntl
import os
from collections.abc import Callable
from concurrent.futures import Future, ProcessPoolExecutor
from pathlib import Path

import executor_helpers as h
import pytest
from executor_helpers import EAGER

from gic_runtime.coordination.barrier import Barrier, TaskAck
from gic_runtime.executor.bucket_locks import BucketLocks, lock_path

MakeBarrier = Callable[..., Barrier]
Workers = tuple[ProcessPoolExecutor, ProcessPoolExecutor]
KEYS = [f"key-{i}" for i in range(80)]
MORE = [f"key-{i}" for i in range(40, 120)]
LAST = [f"key-{i}" for i in range(0, 120, 7)]


def _run(pool: ProcessPoolExecutor, barrier: Barrier, keys: list[str], **kw: object) -> TaskAck:
    """Run every task of ``barrier`` in ``pool``'s process (the tasks of one batch)."""
    futures = [
        pool.submit(h.worker_run_task, barrier, i, h.keys_of_task(barrier, i, keys), **kw)
        for i in range(barrier.num_tasks)
    ]
    return _collect(futures)


def _collect(futures: list[Future[tuple[bytes | None, str | None]]]) -> TaskAck:
    acks = []
    for future in futures:
        data, error = future.result(60)
        assert error is None and data is not None, error
        acks.append(TaskAck.from_bytes(data))
    return _merge(acks)


def _merge(acks: list[TaskAck]) -> TaskAck:
    """One pseudo-ack holding every bucket state and summed stats (for assertions)."""
    from dataclasses import fields, replace

    from gic_runtime.coordination.barrier import TaskStats

    totals = {
        f.name: sum(getattr(a.stats, f.name) for a in acks)
        for f in fields(TaskStats)
        if f.name not in ("pid", "executor", "max_event_time_us")
    }
    merged = replace(acks[0], states=h.states_of(acks), outputs=sum((a.outputs for a in acks), ()))
    pids = {a.stats.pid for a in acks}
    assert len(pids) == 1
    return replace(merged, stats=TaskStats(**totals, pid=pids.pop()))


def test_the_next_batch_in_another_process_reuses_the_local_copy(
    workers: Workers, make_barrier: MakeBarrier
) -> None:
    a, b = workers
    ack1 = _run(a, make_barrier(1), KEYS)
    ack2 = _run(b, make_barrier(2, expected=ack1.states), MORE)
    ack3 = _run(a, make_barrier(3, expected=ack2.states), LAST)
    assert len({ack1.stats.pid, ack2.stats.pid, ack3.stats.pid, os.getpid()}) == 3
    assert ack1.stats.empty == 8
    assert ack2.stats.local_hits == 8 and ack2.stats.restored == 0
    assert ack3.stats.local_hits == 8 and ack3.stats.restored == 0
    want = h.expected_counts(KEYS, MORE, LAST)
    assert h.counts_from_storage(ack3.states) == want
    assert h.staged_rows([ack3]) == {k: want[k] for k in LAST}


def test_a_task_that_failed_in_one_process_is_retried_exactly_in_another(
    workers: Workers, make_barrier: MakeBarrier
) -> None:
    a, b = workers
    ack1 = _run(a, make_barrier(1), KEYS)
    barrier2 = make_barrier(2, expected=ack1.states)
    mine = h.keys_of_task(barrier2, 0, MORE)
    data, error = a.submit(h.worker_run_task, barrier2, 0, mine, 15).result(60)
    assert data is None and error is not None and "injected" in error

    ack2 = _run(b, barrier2, MORE)
    touched = {h.bucket_for(k, 8) for k in mine[:15]}
    assert ack2.stats.restored >= len(touched)
    want = h.expected_counts(KEYS, MORE)
    assert h.counts_from_storage(ack2.states) == want
    assert h.staged_rows([ack2]) == {k: want[k] for k in MORE}

    ack3 = _run(a, make_barrier(3, expected=ack2.states), LAST)
    assert ack3.stats.local_hits == 8
    assert h.counts_from_storage(ack3.states) == h.expected_counts(KEYS, MORE, LAST)


def test_a_background_snapshot_of_one_process_is_adopted_by_another(
    workers: Workers, make_barrier: MakeBarrier
) -> None:
    a, b = workers
    ack1 = _run(a, make_barrier(1, settings=EAGER), KEYS)
    assert ack1.stats.materializations_started >= 1
    done, completed = a.submit(h.worker_wait_materializations, 30.0).result(60)
    assert done and completed >= ack1.stats.materializations_started
    ack2 = _run(b, make_barrier(2, settings=EAGER, expected=ack1.states), MORE)
    assert ack2.stats.materializations_adopted == ack1.stats.materializations_started
    assert ack2.stats.local_hits == 8
    assert h.counts_from_storage(ack2.states) == h.expected_counts(KEYS, MORE)
    assert b.submit(h.worker_wait_materializations, 30.0).result(60)[0]


def test_concurrent_attempts_of_one_task_both_give_exact_results(
    workers: Workers, make_barrier: MakeBarrier
) -> None:
    """Speculation: both processes run every task of batch 2 at once. The bucket locks
    serialize them; the later attempt finds the earlier one's lineage in the local copy,
    restores from storage, and both acks describe exactly batch 1 + batch 2."""
    a, b = workers
    ack1 = _run(a, make_barrier(1), KEYS)
    barrier2 = make_barrier(2, expected=ack1.states)
    first = [
        a.submit(h.worker_run_task, barrier2, i, h.keys_of_task(barrier2, i, MORE)) for i in (0, 1)
    ]
    second = [
        b.submit(h.worker_run_task, barrier2, i, h.keys_of_task(barrier2, i, MORE)) for i in (0, 1)
    ]
    ack_a, ack_b = _collect(first), _collect(second)
    want = h.expected_counts(KEYS, MORE)
    assert h.counts_from_storage(ack_a.states) == want
    assert h.counts_from_storage(ack_b.states) == want
    assert h.staged_rows([ack_a]) == h.staged_rows([ack_b]) == {k: want[k] for k in MORE}
    touched = len({h.bucket_for(k, 8) for k in MORE})
    assert ack_a.stats.restored + ack_b.stats.restored >= touched  # the later attempt rebuilt

    ack3 = _run(b, make_barrier(3, expected=ack_a.states), LAST)  # the driver kept A's acks
    assert h.counts_from_storage(ack3.states) == h.expected_counts(KEYS, MORE, LAST)


def test_bucket_locks_exclude_other_holders(tmp_path: Path) -> None:
    with BucketLocks(tmp_path, [3, 1, 2]):
        fd = os.open(lock_path(tmp_path, 2), os.O_RDWR)
        try:
            with pytest.raises(BlockingIOError):
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        finally:
            os.close(fd)
    fd = os.open(lock_path(tmp_path, 2), os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # released on exit
    finally:
        os.close(fd)
