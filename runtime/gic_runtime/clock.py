"""Time as a seam: schedulers take a :class:`Clock` so tests can drive them with a fake."""

from __future__ import annotations

import time
from typing import Protocol


class Clock(Protocol):
    """Monotonic seconds for scheduling and wall-clock seconds for timestamps."""

    def monotonic(self) -> float:
        """Seconds from an arbitrary origin; never goes backwards."""
        ...

    def wall(self) -> float:
        """Seconds since the Unix epoch (for timestamps written to manifests)."""
        ...


class SystemClock:
    """The real clock."""

    def monotonic(self) -> float:
        return time.monotonic()

    def wall(self) -> float:
        return time.time()
