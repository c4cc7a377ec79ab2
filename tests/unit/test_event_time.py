"""Event time: durations, the watermark's progress, its stored form."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gic_runtime.errors import ConfigurationError, FormatError
from gic_runtime.event_time import (
    MAX_DELAY_US,
    NO_PROGRESS,
    EventTimeProgress,
    EventTimeSpec,
    parse_duration,
)

S = 1_000_000


@pytest.mark.parametrize(
    ("text", "micros"),
    [
        ("10 seconds", 10 * S),
        ("10s", 10 * S),
        ("500 ms", 500_000),
        ("1.5 min", 90 * S),
        ("2 hours", 7200 * S),
        ("1 day", 86400 * S),
        ("0 s", 0),
        (3, 3 * S),
        (0.25, 250_000),
        ("  7 Minutes ", 420 * S),
    ],
)
def test_durations_parse(text: str | float, micros: int) -> None:
    assert parse_duration(text) == micros


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("ten seconds", "not a duration"),
        ("10 fortnights", "not a duration"),
        ("-5 s", "not a duration"),
        (-1, ">= 0"),
        (float("nan"), "finite"),
        (True, "boolean"),
        ("400 days", "longer than a year"),
    ],
)
def test_bad_durations_are_refused_with_the_accepted_forms(value: object, message: str) -> None:
    with pytest.raises(ConfigurationError, match=message):
        parse_duration(value)  # type: ignore[arg-type]


def test_a_spec_needs_a_column_and_a_sane_delay() -> None:
    with pytest.raises(ConfigurationError, match="name a column"):
        EventTimeSpec("")
    with pytest.raises(ConfigurationError, match="between 0 and a year"):
        EventTimeSpec("ts", MAX_DELAY_US + 1)


def test_progress_starts_empty_and_follows_the_largest_event_time() -> None:
    assert NO_PROGRESS.empty and NO_PROGRESS.advance(None, 5) == NO_PROGRESS
    p = NO_PROGRESS.advance(100, 10)
    assert (p.max_event_time_us, p.watermark_us) == (100, 90)
    p = p.advance(50, 10)  # older events do not move it back
    assert (p.max_event_time_us, p.watermark_us) == (100, 90)
    p = p.advance(200, 30)  # a new delay applies from the largest event time
    assert (p.max_event_time_us, p.watermark_us) == (200, 170)
    p = p.advance(205, 60)  # a larger delay never moves the watermark back
    assert (p.max_event_time_us, p.watermark_us) == (205, 170)


TIMES = st.integers(min_value=-(10**15), max_value=10**15)


@given(st.lists(st.tuples(st.one_of(st.none(), TIMES), st.integers(0, MAX_DELAY_US))))
def test_the_watermark_never_goes_back_and_never_passes_the_events(
    batches: list[tuple[int | None, int]],
) -> None:
    progress = NO_PROGRESS
    seen: int | None = None
    for batch_max, delay in batches:
        before = progress
        progress = progress.advance(batch_max, delay)
        if batch_max is not None:
            seen = batch_max if seen is None else max(seen, batch_max)
        assert progress.max_event_time_us == seen
        if before.watermark_us is not None:
            assert progress.watermark_us is not None
            assert progress.watermark_us >= before.watermark_us
        if seen is not None and progress.watermark_us is not None:
            assert progress.watermark_us <= seen  # never ahead of what was seen
        assert EventTimeProgress.from_json(progress.to_json()) == progress


@pytest.mark.parametrize(
    "section",
    [
        {"max_event_time_us": "1", "watermark_us": 0},
        {"max_event_time_us": 1},
        {"max_event_time_us": 1, "watermark_us": True},
        {"max_event_time_us": 1, "watermark_us": 2**63},
        {"max_event_time_us": 1.5, "watermark_us": 0},
    ],
)
def test_a_bad_stored_progress_is_a_format_error(section: dict[str, object]) -> None:
    with pytest.raises(FormatError):
        EventTimeProgress.from_json(section)


def test_no_section_is_no_progress() -> None:
    assert EventTimeProgress.from_json(None) == NO_PROGRESS
    assert EventTimeProgress.from_json({}) == NO_PROGRESS
    assert NO_PROGRESS.to_json() == {}
