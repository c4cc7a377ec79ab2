"""Event time and watermarks: how far a job's event time has progressed.

A keyed stream may name an event-time column and a lateness bound (``delay``). The
*watermark* is the job's statement "no more rows older than this are expected": after
each batch it becomes ``max(previous watermark, max event time seen so far - delay)``.
Batch ``n`` runs with the watermark the batches before it established (as Spark's own
watermark does), and its rows older than that watermark are *late*: dropped and counted,
or kept when the job asks (:class:`EventTimeSpec`).

The progress (:class:`EventTimeProgress`) is part of every checkpoint (the manifest's
``event_time`` section; beside a canonical savepoint's index), so a restart, a restore
from a savepoint of either format, an upgrade or a rescale continue from it, never
from zero (docs/architecture.md §13.11).

Times are integers: microseconds since the Unix epoch, UTC (Spark's timestamp
resolution). Invariants: the watermark never decreases; it is never above the largest
event time seen minus the delay, except where an earlier watermark already was; an
absent value (``None``) means "no row with an event time seen yet".

Everything here is immutable and thread-safe.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from gic_runtime.errors import ConfigurationError, FormatError

__all__ = [
    "MAX_DELAY_US",
    "NO_PROGRESS",
    "BatchTime",
    "EventTimeProgress",
    "EventTimeSpec",
    "parse_duration",
]

US_PER_S: Final = 1_000_000
MAX_DELAY_US: Final = 366 * 24 * 3600 * US_PER_S
"""The largest lateness bound accepted (a year): beyond it a watermark means nothing."""

_UNITS: Final[Mapping[str, int]] = {
    **dict.fromkeys(("us", "microsecond", "microseconds"), 1),
    **dict.fromkeys(("ms", "millisecond", "milliseconds"), 1_000),
    **dict.fromkeys(("s", "sec", "secs", "second", "seconds"), US_PER_S),
    **dict.fromkeys(("m", "min", "mins", "minute", "minutes"), 60 * US_PER_S),
    **dict.fromkeys(("h", "hour", "hours"), 3600 * US_PER_S),
    **dict.fromkeys(("d", "day", "days"), 86400 * US_PER_S),
}
_DURATION: Final = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]+)\s*$")
_TIME_BOUND: Final = 1 << 62
"""Event times and watermarks must lie in ``(-2**62, 2**62)`` microseconds."""


def parse_duration(value: str | float, *, what: str = "watermark") -> int:
    """Microseconds in ``value``: seconds as a number, or text such as ``"10 seconds"``,
    ``"500 ms"``, ``"2 hours"``, ``"1.5 min"`` (units us, ms, s, min, h, d and their
    long names). Raises :class:`ConfigurationError` naming ``what`` and the accepted
    forms for anything else, a negative duration, or one over a year."""
    if isinstance(value, bool):
        raise ConfigurationError(f"{what} must be a duration, not a boolean")
    if isinstance(value, int | float):
        if not math.isfinite(value) or value < 0:
            raise ConfigurationError(f"{what} must be a finite duration >= 0 seconds, got {value}")
        micros = round(value * US_PER_S)
    else:
        found = _DURATION.match(str(value))
        unit = _UNITS.get(found.group(2).lower()) if found else None
        if found is None or unit is None:
            raise ConfigurationError(
                f"{what} {value!r} is not a duration: give seconds as a number, or text "
                "like '10 seconds', '500 ms', '5 minutes', '2 hours' (units: us, ms, s, "
                "min, h, d)"
            )
        micros = round(float(found.group(1)) * unit)
    if micros > MAX_DELAY_US:
        raise ConfigurationError(f"{what} {value!r} is longer than a year; give a shorter one")
    return micros


@dataclass(frozen=True)
class EventTimeSpec:
    """What a keyed stream says about its event time: the timestamp ``column``, the
    lateness bound ``delay_us`` (>= 0), and whether late rows are kept (default:
    dropped and counted)."""

    column: str
    delay_us: int = 0
    keep_late: bool = False

    def __post_init__(self) -> None:
        if not self.column:
            raise ConfigurationError("event_time must name a column of the stream")
        if not 0 <= self.delay_us <= MAX_DELAY_US:
            raise ConfigurationError(
                f"the watermark delay must be between 0 and a year, got {self.delay_us} us"
            )


@dataclass(frozen=True)
class EventTimeProgress:
    """How far event time has come: the largest event time seen and the watermark
    (both ``None`` until a row with an event time was seen)."""

    max_event_time_us: int | None = None
    watermark_us: int | None = None

    def __post_init__(self) -> None:
        for name in ("max_event_time_us", "watermark_us"):
            value = getattr(self, name)
            if value is not None and not -_TIME_BOUND < value < _TIME_BOUND:
                raise FormatError(f"event time {name} {value} is out of range")
        if (self.max_event_time_us is None) != (self.watermark_us is None):
            raise FormatError("event time progress needs both a max event time and a watermark")

    @property
    def empty(self) -> bool:
        """Whether no event time was seen yet."""
        return self.max_event_time_us is None

    def advance(self, batch_max_us: int | None, delay_us: int) -> EventTimeProgress:
        """The progress after a batch whose largest event time was ``batch_max_us``
        (``None``: the batch had none): the watermark never goes back."""
        if batch_max_us is None:
            return self
        seen = batch_max_us if self.empty else max(self.max_event_time_us or 0, batch_max_us)
        candidate = seen - delay_us
        watermark = candidate if self.watermark_us is None else max(self.watermark_us, candidate)
        return EventTimeProgress(seen, watermark)

    def to_json(self) -> dict[str, Any]:
        """The manifest's ``event_time`` section (empty progress: an empty object)."""
        if self.empty:
            return {}
        return {"max_event_time_us": self.max_event_time_us, "watermark_us": self.watermark_us}

    @classmethod
    def from_json(cls, data: Mapping[str, Any] | None) -> EventTimeProgress:
        """The progress a manifest section (or canonical record) holds; ``None`` or an
        empty section is no progress. Raises :class:`FormatError` on anything else than
        two integers in range."""
        if not data:
            return NO_PROGRESS
        values = []
        for name in ("max_event_time_us", "watermark_us"):
            value = data.get(name)
            if isinstance(value, bool) or not isinstance(value, int):
                raise FormatError(f"event time section: {name} must be an integer, got {value!r}")
            values.append(value)
        return cls(values[0], values[1])


NO_PROGRESS: Final = EventTimeProgress()
"""No event time seen yet (a job without event time keeps this forever)."""


@dataclass(frozen=True)
class BatchTime:
    """Where time stands for one batch: its ``processing_time_us`` (the driver's clock
    when it built the batch) and the ``watermark_us`` it runs with (``None``: no event
    time seen yet, or none declared). Event-time timers due at the watermark and
    processing-time timers due at the processing time fire in this batch."""

    batch_id: int
    processing_time_us: int
    watermark_us: int | None = None
