"""When to make another upload attempt: the retry policy and the hedge delay.

Retry rules (docs/architecture.md §8): a timed-out attempt gets a new attempt at once; a transient
I/O error gets a new attempt after a growing delay; anything else fails the upload.
Hedging is separate: :class:`AdaptiveHedgeDelay` says how long an attempt may run
before one more attempt is started beside it (the slow one keeps running).
"""

from __future__ import annotations

import bisect
import enum
import threading
from collections import deque
from dataclasses import dataclass

from gic_runtime.errors import (
    ConfigurationError,
    StorageTimeoutError,
    TransientStorageError,
    UploadError,
)


class Action(enum.Enum):
    """What to do after a failed attempt."""

    RETRY_NOW = "retry-now"
    RETRY_LATER = "retry-later"
    FAIL = "fail"


@dataclass(frozen=True, slots=True)
class Decision:
    """Outcome of :meth:`RetryPolicy.decide`: ``action``, the ``delay_s`` before the next
    attempt (0 unless ``RETRY_LATER``) and a human-readable ``reason``."""

    action: Action
    delay_s: float
    reason: str


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """How often and when a failed upload is attempted again. Immutable, thread-safe."""

    max_attempts: int = 3
    """Attempts that may fail (including timed-out ones) before the upload fails. Three
    rides out a single 503 burst without holding a checkpoint for long."""

    delay_s: float = 0.2
    """Seconds before the first retry of a transient error: S3 asks clients that get
    ``503 SlowDown`` to back off for a few hundred milliseconds."""

    backoff: float = 2.0
    """Factor the delay grows by with every further transient failure."""

    timeout_s: float = 5.0
    """Seconds one attempt may take before it counts as failed with a timeout (and a new
    attempt starts at once). Hedging already races merely slow attempts; this only
    catches stuck ones, so it is generous: a multi-MiB PUT finishes far below it."""

    def __post_init__(self) -> None:
        if self.max_attempts < 1 or self.delay_s < 0 or self.backoff < 1 or self.timeout_s <= 0:
            raise ConfigurationError(
                f"invalid retry policy {self}: need max_attempts >= 1, delay_s >= 0, "
                "backoff >= 1 and timeout_s > 0"
            )

    def decide(self, failed_attempts: int, error: BaseException) -> Decision:
        """Decision after ``failed_attempts`` attempts (counting this one) have failed,
        the latest with ``error``."""
        if not isinstance(error, TransientStorageError):
            return Decision(Action.FAIL, 0.0, f"permanent error: {error}")
        if failed_attempts >= self.max_attempts:
            return Decision(
                Action.FAIL, 0.0, f"gave up after {failed_attempts} attempts; last: {error}"
            )
        if isinstance(error, StorageTimeoutError):
            return Decision(Action.RETRY_NOW, 0.0, f"attempt timed out: {error}")
        delay = self.delay_s * self.backoff ** (failed_attempts - 1)
        return Decision(Action.RETRY_LATER, delay, f"transient error: {error}")

    def failure(self, what: str, failed_attempts: int, error: BaseException) -> UploadError:
        """The :class:`UploadError` to raise when the policy gives up on ``what``."""
        kind = "transient" if isinstance(error, TransientStorageError) else "permanent"
        return UploadError(
            f"upload of {what} failed after {failed_attempts} attempt(s); last cause "
            f"({kind}): {type(error).__name__}: {error}. Check the storage endpoint and "
            "credentials, or raise the retry policy's max_attempts/timeout_s"
        )


class AdaptiveHedgeDelay:
    """Hedge delay = the ``quantile`` of recent successful attempt latencies, clamped to
    ``[floor_s, ceiling_s]``; ``ceiling_s`` until ``min_samples`` latencies are known.

    The quantile adapts to the store (S3 in one region, a slow on-premise endpoint):
    hedging at the q-th percentile costs about ``1 - q`` extra requests while the
    distribution is stable. The floor keeps a fast store from being hedged on noise;
    the ceiling keeps hedging alive when the tail gets so fat that the quantile itself
    lands in it. Thread-safe.
    """

    def __init__(
        self,
        *,
        quantile: float,
        floor_s: float,
        ceiling_s: float,
        window: int,
        min_samples: int,
    ) -> None:
        if not 0 < quantile < 1 or not 0 <= floor_s <= ceiling_s or window < 1:
            raise ConfigurationError(
                "hedge delay needs 0 < quantile < 1, 0 <= floor_s <= ceiling_s, window >= 1"
            )
        self._q = quantile
        self._floor = floor_s
        self._ceiling = ceiling_s
        self._min_samples = max(1, min(min_samples, window))
        self._recent: deque[float] = deque(maxlen=window)
        self._sorted: list[float] = []
        self._lock = threading.Lock()

    def record(self, latency_s: float) -> None:
        """Add the latency of one successful attempt."""
        with self._lock:
            if len(self._recent) == self._recent.maxlen:
                old = self._recent[0]
                del self._sorted[bisect.bisect_left(self._sorted, old)]
            self._recent.append(latency_s)
            bisect.insort(self._sorted, latency_s)

    def current(self) -> float:
        """Seconds an attempt may run before a hedge is started."""
        with self._lock:
            n = len(self._sorted)
            if n < self._min_samples:
                return self._ceiling
            value = self._sorted[min(n - 1, int(self._q * n))]
        return min(self._ceiling, max(self._floor, value))
