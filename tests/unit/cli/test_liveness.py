"""``driver_looks_alive``: the one rule ``gic gc`` and ``gic savepoint`` use to decide
whether a driver may still be running a job."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from gic_runtime.cli.common import FRESH_S, LIVE_STATES, driver_looks_alive
from gic_runtime.status import JobState, JobStatus

NOW = 1_800_000_000.0


def status(state: JobState, age_s: float) -> JobStatus:
    return JobStatus(job_id="j", epoch=1, state=state, updated_at=NOW - age_s, started_at=0.0)


def test_no_status_record_means_no_driver() -> None:
    assert not driver_looks_alive(None, NOW)


@given(st.sampled_from(list(JobState)), st.floats(min_value=-5.0, max_value=3 * FRESH_S))
def test_alive_exactly_when_live_and_fresh(state: JobState, age_s: float) -> None:
    expected = state in LIVE_STATES and age_s < FRESH_S
    assert driver_looks_alive(status(state, age_s), NOW) is expected


def test_the_boundary_is_stale() -> None:
    assert driver_looks_alive(status(JobState.RUNNING, FRESH_S - 0.001), NOW)
    assert not driver_looks_alive(status(JobState.RUNNING, FRESH_S), NOW)
    assert not driver_looks_alive(status(JobState.STOPPED, 0.0), NOW)
