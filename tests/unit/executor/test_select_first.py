"""The task core on a start with empty local directories, when the task names the state
keys its batch reads (run_task ``select``, docs/architecture.md §6.3): the batch runs on
those keys read from storage, its buckets are restored behind it, and every count is
exact, also when the attempt fails halfway and is retried."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path

import pytest
from executor_helpers import (
    OUTPUT_SCHEMA,
    QUIET,
    STATE,
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
from gic_runtime.errors import StateError
from gic_runtime.executor.core import close_local_executor, run_task
from gic_runtime.handles import BucketState
from gic_runtime.state.backend import KeyedStateBackend
from gic_runtime.state.background_restore import BackgroundRestoreSettings

MakeBarrier = Callable[..., Barrier]
SELECTING = replace(QUIET, restore=BackgroundRestoreSettings(select_keys=True))

BATCH1 = [f"k{i}" for i in range(60)]
BATCH2 = [f"k{i}" for i in range(0, 60, 4)] + ["new-1", "new-2"]
BATCH3 = [f"k{i}" for i in range(30)]


def _names(keys: Sequence[str]) -> Callable[[KeyedStateBackend], Mapping[int, list[bytes]]]:
    """The store keys ``counting(keys)`` reads, per bucket."""

    def names(backend: KeyedStateBackend) -> Mapping[int, list[bytes]]:
        located = backend.value_state(STATE).locate_many(list(keys))
        out: dict[int, list[bytes]] = {}
        for bucket, key in located:
            out.setdefault(bucket, []).append(key)
        return out

    return names


def _selecting_batch(
    barrier: Barrier,
    keys: Sequence[str],
    *,
    fail_task: int | None = None,
    name_too_few: bool = False,
) -> list[TaskAck]:
    acks = []
    for i in range(barrier.num_tasks):
        mine = keys_of_task(barrier, i, keys)
        named = mine[: len(mine) // 2] if name_too_few else mine
        process = counting(mine, fail_after=3 if i == fail_task else None)
        acks.append(
            run_task(barrier, i, process, output_schema=OUTPUT_SCHEMA, select=_names(named))
        )
    return acks


def _restart(
    make_barrier: MakeBarrier, tmp_path: Path, checkpoint_id: int, expected: dict[int, BucketState]
) -> Barrier:
    """A barrier on new, empty executor directories (a start on other executors), with
    the selection on."""
    close_local_executor(wait=True, timeout=30)
    return make_barrier(
        checkpoint_id,
        expected=expected,
        local_dir=str(tmp_path / f"new-{checkpoint_id}"),
        settings=SELECTING,
    )


def _restart_after_batch1(make_barrier: MakeBarrier, tmp_path: Path) -> Barrier:
    """Batch 1 on the first executor directory, then batch 2's barrier on a new one."""
    acks1 = run_batch(make_barrier(1), BATCH1)
    return _restart(make_barrier, tmp_path, 2, states_of(acks1))


def _assert_exact(acks: list[TaskAck], *batches: Sequence[str]) -> None:
    """The last batch's output and the checkpointed counts are those of ``batches``."""
    want = expected_counts(*batches)
    assert staged_rows(acks) == {k: want[k] for k in batches[-1]}
    assert counts_from_storage(states_of(acks)) == want


def test_a_start_runs_on_the_named_keys_and_restores_behind_the_batch(
    make_barrier: MakeBarrier, tmp_path: Path
) -> None:
    barrier2 = _restart_after_batch1(make_barrier, tmp_path)
    acks2 = _selecting_batch(barrier2, BATCH2)
    touched = sum(1 for s in barrier2.expected.values() if s.seq)
    assert sum(a.stats.selected for a in acks2) == touched
    assert sum(a.stats.restored for a in acks2) == touched
    assert sum(a.stats.local_hits for a in acks2) == 0
    _assert_exact(acks2, BATCH1, BATCH2)

    # the next batch finds the buckets restored to batch 2's lineage (or waits for them)
    acks3 = run_batch(
        make_barrier(
            3, expected=states_of(acks2), local_dir=barrier2.local_dir, settings=SELECTING
        ),
        BATCH3,
    )
    assert sum(a.stats.selected for a in acks3) == 0
    assert sum(a.stats.restored for a in acks3) == 0  # nothing rebuilt from the start again
    _assert_exact(acks3, BATCH1, BATCH2, BATCH3)


def test_a_failed_attempt_on_named_keys_is_retried_exactly(
    make_barrier: MakeBarrier, tmp_path: Path
) -> None:
    barrier2 = _restart_after_batch1(make_barrier, tmp_path)
    with pytest.raises(InjectedFailureError):
        _selecting_batch(barrier2, BATCH2, fail_task=0)
    retry = _selecting_batch(barrier2, BATCH2)
    assert retry[0].stats.selected > 0  # nothing of the failed attempt was kept as state
    _assert_exact(retry, BATCH1, BATCH2)


def test_a_batch_that_reads_a_key_it_did_not_name_fails_and_nothing_is_lost(
    make_barrier: MakeBarrier, tmp_path: Path
) -> None:
    barrier2 = _restart_after_batch1(make_barrier, tmp_path)
    with pytest.raises(StateError, match="reads a state key it did not name"):
        _selecting_batch(barrier2, BATCH2, name_too_few=True)
    retry = run_batch(barrier2, BATCH2)  # a task that names nothing restores as before
    assert sum(a.stats.selected for a in retry) == 0
    _assert_exact(retry, BATCH1, BATCH2)
