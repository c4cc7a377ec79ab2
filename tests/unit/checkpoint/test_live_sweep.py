"""Live orphan sweep: while a job runs, what failed task attempts left is deleted --
segments at once, snapshots only after they could no longer be adopted -- and nothing a
retained checkpoint, a savepoint or another job owns (checkpoint.live_sweep)."""

from __future__ import annotations

from typing import Any

import pytest

from gic_runtime.checkpoint import OwnershipPolicy
from gic_runtime.checkpoint.live_sweep import SNAPSHOT_GRACE_S, LiveSweeper
from gic_runtime.materialization.snapshot_record import ADOPTION_MAX_AGE_S


class TestingClock:
    """A monotonic clock the test moves by hand."""

    __test__ = False

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _sweeper(files: Any, clock: TestingClock, interval_s: float = 60.0) -> LiveSweeper:
    return LiveSweeper(files.resolver, files.root, files.job_id, interval_s=interval_s, clock=clock)


def test_segments_go_at_once_snapshots_after_the_grace(files: Any) -> None:
    clock = TestingClock()
    kept_seg, kept_snap = files.job_file(), files.job_file("snapshot")
    stored = files.complete(1, [kept_seg, kept_snap])
    lost_seg, lost_snap = files.job_file(), files.job_file("snapshot")
    bystanders = {
        files.put("jobs/job-b/changelog/1/x"),
        files.put("savepoints/sp-1/files/changelog/1/z"),
        files.put(f"jobs/{files.job_id}/control/request"),
    }
    policy = OwnershipPolicy.for_job(files.root, files.job_id)
    sweeper = _sweeper(files, clock)

    first = sweeper.sweep([stored], policy)
    assert (first.deleted, first.deferred) == (1, 1)
    assert lost_seg not in files.all_uris() and lost_snap in files.all_uris()

    clock.now += SNAPSHOT_GRACE_S - 1
    assert sweeper.sweep([stored], policy).deleted == 0
    assert lost_snap in files.all_uris()

    clock.now += 1
    assert sweeper.sweep([stored], policy).deleted == 1
    assert files.all_uris() >= {kept_seg, kept_snap, stored.uri} | bystanders
    assert lost_snap not in files.all_uris()


def test_a_snapshot_that_was_adopted_meanwhile_starts_its_grace_again(files: Any) -> None:
    clock = TestingClock()
    snap = files.job_file("snapshot")
    policy = OwnershipPolicy.for_job(files.root, files.job_id)
    sweeper = _sweeper(files, clock)
    assert sweeper.sweep([], policy).deferred == 1
    clock.now += SNAPSHOT_GRACE_S / 2
    adopted = files.complete(1, [snap])  # a later task adopted it
    assert sweeper.sweep([adopted], policy).deleted == 0
    clock.now += SNAPSHOT_GRACE_S / 2
    # subsumed again: unreferenced from now on, so a full grace again
    assert sweeper.sweep([], policy).deleted == 0
    assert snap in files.all_uris()


def test_it_is_due_once_per_interval(files: Any) -> None:
    clock = TestingClock()
    sweeper = _sweeper(files, clock, interval_s=60)
    assert not sweeper.due()  # the first call starts the interval
    clock.now += 59
    assert not sweeper.due()
    clock.now += 1
    assert sweeper.due()
    sweeper.sweep([], OwnershipPolicy.for_job(files.root, files.job_id))
    assert not sweeper.due()


def test_the_grace_is_never_shorter_than_the_adoption_limit(files: Any) -> None:
    with pytest.raises(ValueError, match="snapshot_grace_s"):
        LiveSweeper(
            files.resolver,
            files.root,
            files.job_id,
            interval_s=1,
            snapshot_grace_s=ADOPTION_MAX_AGE_S - 1,
        )
