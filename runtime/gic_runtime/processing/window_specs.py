"""Windows over event time: what a window is, and which windows a row belongs to.

* :func:`tumbling` -- fixed windows ``[k * size, (k + 1) * size)`` (epoch-aligned, as
  Spark's ``window(ts, size)``);
* :func:`sliding` -- windows of ``size`` starting every ``every`` (epoch-aligned, as
  Spark's ``window(ts, size, every)``): a row belongs to ``size / every`` of them;
* :func:`session_window` -- per key, a run of rows with gaps of at most ``gap``: the window is
  ``[first row, last row + gap)`` (as Spark's ``session_window(ts, gap)``).

A window *closes* once the watermark reaches its end plus the allowed lateness; it is
then emitted once and its state freed (:mod:`gic_runtime.processing.windows`).

Times are integers, microseconds since the epoch. Everything here is immutable.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Literal

import numpy as np
import numpy.typing as npt

from gic_runtime.errors import ConfigurationError
from gic_runtime.event_time import parse_duration
from gic_runtime.state.timers import from_micros

__all__ = ["Window", "WindowSpec", "session_window", "sliding", "tumbling"]


@dataclass(frozen=True, order=True)
class Window:
    """One window of one key: ``[start_us, end_us)``."""

    start_us: int
    end_us: int

    @property
    def start(self) -> datetime:
        return from_micros(self.start_us)

    @property
    def end(self) -> datetime:
        return from_micros(self.end_us)


@dataclass(frozen=True)
class WindowSpec:
    """How rows are grouped into windows (build with :func:`tumbling`, :func:`sliding`
    or :func:`session_window`)."""

    kind: Literal["tumbling", "sliding", "session"]
    size_us: int
    """Window length (tumbling, sliding) or the gap that ends a session."""
    every_us: int
    """Distance between window starts (tumbling: the size; session: unused, 0)."""

    def starts(
        self, times: npt.NDArray[np.int64]
    ) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.intp]]:
        """Window starts of rows at ``times`` (tumbling, sliding): ``(starts, rows)``,
        where ``rows[i]`` is the row ``starts[i]`` belongs to (a sliding row repeats)."""
        if self.kind == "session":
            raise ConfigurationError("session windows have no fixed starts")
        last = times - np.mod(times, self.every_us)
        per_row = -(-self.size_us // self.every_us)  # ceil
        rows = np.repeat(np.arange(len(times)), per_row)
        starts = np.repeat(last, per_row) - np.tile(
            np.arange(per_row, dtype=np.int64) * self.every_us, len(times)
        )
        inside = starts > np.repeat(times, per_row) - self.size_us
        return starts[inside], rows[inside]

    def describe(self) -> str:
        if self.kind == "sliding":
            return f"sliding({self.size_us} us, every {self.every_us} us)"
        return f"{self.kind}({self.size_us} us)"


def _positive(value: str | float, what: str) -> int:
    micros = parse_duration(value, what=what)
    if micros <= 0:
        raise ConfigurationError(f"{what} must be longer than 0, got {value!r}")
    return micros


def tumbling(size: str | float) -> WindowSpec:
    """Fixed, non-overlapping windows of ``size`` (``"1 minute"``, or seconds)."""
    micros = _positive(size, "window size")
    return WindowSpec("tumbling", micros, micros)


def sliding(size: str | float, every: str | float) -> WindowSpec:
    """Windows of ``size`` starting every ``every`` (at most ``size``; a row belongs to
    ``size / every`` windows, at most 1000)."""
    micros, step = _positive(size, "window size"), _positive(every, "window slide")
    if step > micros:
        raise ConfigurationError(f"the slide {every!r} is longer than the window {size!r}")
    if -(-micros // step) > 1000:
        raise ConfigurationError(
            f"a window of {size!r} sliding every {every!r} puts each row in more than 1000 "
            "windows; slide by a larger step"
        )
    return WindowSpec("sliding", micros, step)


def session_window(gap: str | float) -> WindowSpec:
    """Per key, rows with gaps of at most ``gap`` form one session window."""
    return WindowSpec("session", _positive(gap, "session gap"), 0)
