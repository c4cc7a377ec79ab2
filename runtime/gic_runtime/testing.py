"""Fakes at the runtime's seams, for tests of this project and of jobs built on it.

Names start with ``Testing`` so a reader always knows a fake is in play.
"""

from __future__ import annotations

import threading


class TestingClock:
    """A :class:`~gic_runtime.clock.Clock` that moves only when told to. Thread-safe."""

    __test__ = False  # not a pytest test class

    def __init__(self, start: float = 1_000.0, wall_offset: float = 1_700_000_000.0) -> None:
        self._now = start
        self._wall_offset = wall_offset
        self._lock = threading.Lock()

    def monotonic(self) -> float:
        with self._lock:
            return self._now

    def wall(self) -> float:
        with self._lock:
            return self._now + self._wall_offset

    def advance(self, seconds: float) -> None:
        """Move time forward by ``seconds``."""
        if seconds < 0:
            raise ValueError("a clock never goes backwards")
        with self._lock:
            self._now += seconds
