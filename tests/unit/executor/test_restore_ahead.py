"""restore_ahead: a range rebuilt on an empty executor directory ahead of its batch,
which then reuses it; a failed one leaves nothing the batch would trust."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from executor_helpers import counts_from_storage, expected_counts, run_batch, states_of

from gic_runtime.coordination.barrier import Barrier
from gic_runtime.errors import RestoreError
from gic_runtime.executor.core import restore_ahead
from gic_runtime.storage.local import LocalObjectStore

BATCH1 = [f"k{i}" for i in range(40)]
BATCH2 = [f"k{i}" for i in range(10, 50)]

MakeBarrier = Callable[..., Barrier]


def test_a_range_restored_ahead_is_reused_by_its_batch(
    make_barrier: MakeBarrier, tmp_path: Path
) -> None:
    acks1 = run_batch(make_barrier(1), BATCH1)
    # a new attempt on an empty executor directory (a restart on new executors)
    barrier2 = make_barrier(2, epoch=2, expected=states_of(acks1), local_dir=str(tmp_path / "new"))
    summaries = [restore_ahead(barrier2, i) for i in range(barrier2.num_tasks)]
    non_empty = {b for b, s in states_of(acks1).items() if s.seq > 0}
    restored = {b for s in summaries for b in s.restored}
    assert restored == non_empty
    assert all(not s.local_hits for s in summaries)

    # done twice, the second finds every bucket local
    again = restore_ahead(barrier2, 0)
    own = non_empty & set(barrier2.bucket_range(0))
    assert again.restored == () and set(again.local_hits) == own

    acks2 = run_batch(barrier2, BATCH2)
    assert sum(a.stats.restored for a in acks2) == 0
    assert sum(a.stats.local_hits for a in acks2) == len(non_empty)
    assert counts_from_storage(states_of(acks2)) == expected_counts(BATCH1, BATCH2)


def test_a_failed_restore_ahead_releases_its_range_and_trusts_nothing(
    make_barrier: MakeBarrier, local_store: LocalObjectStore, tmp_path: Path
) -> None:
    acks1 = run_batch(make_barrier(1), BATCH1)
    barrier2 = make_barrier(2, epoch=2, expected=states_of(acks1), local_dir=str(tmp_path / "new"))
    segments = sorted(Path(local_store.root).rglob("*.seg"))
    assert segments
    for segment in segments:
        segment.unlink()
    with pytest.raises(RestoreError):
        restore_ahead(barrier2, 0)
    # the range's locks were released (the batch does not hang) and no bucket was left
    # looking complete: the batch fails on the same missing file instead of using it
    with pytest.raises(RestoreError):
        run_batch(barrier2, BATCH2)
