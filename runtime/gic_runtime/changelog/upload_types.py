"""Values of the changelog uploader: its settings, one upload's result, its counters.

Kept apart from :mod:`gic_runtime.changelog.uploader` (which re-exports them) so the
uploader module holds only the upload machinery. All are frozen dataclasses: immutable
and safe to share between threads.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from gic_runtime.changelog.retrying import RetryPolicy
from gic_runtime.errors import ConfigurationError


@dataclass(frozen=True, slots=True)
class UploaderSettings:
    """Tuning of :class:`HedgingUploader`. Immutable."""

    max_workers: int = 8
    """Threads running attempts. Each upload needs one, plus one per hedge or stuck
    attempt; eight keeps a task's few uploads and their hedges from queueing."""

    max_in_flight_bytes: int = 64 * 1024 * 1024
    """Soft cap on bytes of unfinished uploads: ``submit`` blocks while the total is at or
    above it (one upload may overshoot). 64 MiB bounds an executor's buffered changelog
    memory yet holds many pre-emptive segments (4 MiB each by default)."""

    max_hedges: int = 1
    """Extra attempts per upload started because earlier ones were slow (0 disables
    hedging). One already removes nearly all of a rare-straggler tail; more multiplies
    load exactly when the store is struggling."""

    hedge_after_s: float | None = None
    """Fixed hedge delay in seconds, or ``None`` for the adaptive delay below."""

    hedge_quantile: float = 0.97
    """Adaptive delay: this quantile of recent successful attempt latencies. Hedging at
    the q-th percentile costs about ``1 - q`` (here 3%) extra requests on a steady
    store, below the 5% budget."""

    hedge_floor_s: float = 0.05
    """Adaptive delay never goes below this (seconds). A PUT to S3 takes tens of
    milliseconds; hedging faster than that doubles requests for nothing."""

    hedge_ceiling_s: float = 1.0
    """Adaptive delay never goes above this (seconds), so hedging stays useful when the
    slow tail grows so large that the quantile itself falls into it; also the delay used
    until ``hedge_min_samples`` latencies are known."""

    hedge_window: int = 512
    """Number of recent latencies the adaptive delay looks at: enough for a stable 97th
    percentile, short enough to follow a store that changes speed within minutes."""

    hedge_min_samples: int = 32
    """Latencies needed before the quantile is trusted (about one tail sample at q=0.97)."""

    hedge_budget_ratio: float = 0.05
    """Hedges may be at most this fraction of uploads (token bucket): a hard bound on
    the extra load hedging adds, whatever the latencies do."""

    hedge_budget_burst: float = 10.0
    """Token bucket size: hedges allowed back to back after a quiet period."""

    retry: RetryPolicy = field(default_factory=RetryPolicy)
    """What to do when an attempt fails or times out."""

    tick_s: float = 0.05
    """Longest real time (seconds) the scheduler sleeps between looks at its clock, so a
    fake clock moved by a test is noticed promptly; real deadlines are met exactly."""

    def __post_init__(self) -> None:
        if self.max_workers < 1 or self.max_in_flight_bytes < 1 or self.max_hedges < 0:
            raise ConfigurationError(
                f"invalid uploader settings {self}: max_workers and max_in_flight_bytes must "
                "be positive and max_hedges not negative"
            )
        if self.hedge_after_s is not None and self.hedge_after_s <= 0:
            raise ConfigurationError(f"hedge_after_s must be positive, got {self.hedge_after_s}")


@dataclass(frozen=True, slots=True)
class UploadResult:
    """A finished upload: the winning object ``uri`` and how it got there."""

    uri: str
    size: int
    attempts: int
    """Attempts started, hedges included."""
    hedges: int
    failed_attempts: int
    duration_s: float


@dataclass(frozen=True, slots=True)
class UploaderStats:
    """Counters since the uploader was created (a consistent snapshot)."""

    submitted: int
    succeeded: int
    failed: int
    attempts: int
    attempt_failures: int
    """Attempts that failed or timed out (timeouts included)."""
    hedges: int
    timeouts: int
    losers_deleted: int
    backpressure_waits: int
    """How many ``submit`` calls had to wait for in-flight bytes to drop."""
    backpressure_wait_s: float
    in_flight_bytes: int

    own_writes_confirmed: int = 0
    """Attempts whose create-if-absent PUT reported the object as existing and whose
    object was then read back and found to be exactly the uploaded bytes (a retry inside
    the store client whose first request had landed): counted as successes."""
