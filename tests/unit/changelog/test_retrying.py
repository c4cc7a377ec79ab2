"""Retry decisions and the adaptive hedge delay."""

from __future__ import annotations

import pytest

from gic_runtime.changelog.retrying import Action, AdaptiveHedgeDelay, RetryPolicy
from gic_runtime.errors import (
    ConfigurationError,
    StoragePermissionError,
    StorageTimeoutError,
    TransientStorageError,
    UploadError,
)


class TestRetryDecisions:
    def test_timeout_retries_at_once(self) -> None:
        decision = RetryPolicy().decide(1, StorageTimeoutError("slow"))
        assert decision.action is Action.RETRY_NOW
        assert decision.delay_s == 0

    def test_transient_error_retries_after_a_growing_delay(self) -> None:
        policy = RetryPolicy(max_attempts=5, delay_s=0.1, backoff=3)
        delays = [policy.decide(n, TransientStorageError("503")).delay_s for n in (1, 2, 3)]
        assert policy.decide(1, TransientStorageError("503")).action is Action.RETRY_LATER
        assert delays == pytest.approx([0.1, 0.3, 0.9])

    @pytest.mark.parametrize(
        "error", [StoragePermissionError("denied"), ValueError("bug"), OSError("disk")]
    )
    def test_anything_else_fails_at_once(self, error: Exception) -> None:
        assert RetryPolicy().decide(1, error).action is Action.FAIL

    def test_exhausted_attempts_fail(self) -> None:
        policy = RetryPolicy(max_attempts=2)
        assert policy.decide(1, StorageTimeoutError("t")).action is Action.RETRY_NOW
        assert policy.decide(2, StorageTimeoutError("t")).action is Action.FAIL

    def test_failure_names_the_last_cause(self) -> None:
        error = RetryPolicy().failure("segment x", 3, TransientStorageError("503 SlowDown"))
        assert isinstance(error, UploadError)
        assert "503 SlowDown" in str(error)
        assert "3 attempt" in str(error)
        assert "TransientStorageError" in str(error)

    def test_invalid_policy_is_rejected(self) -> None:
        with pytest.raises(ConfigurationError):
            RetryPolicy(max_attempts=0)


class TestAdaptiveHedgeDelay:
    def _delay(self, **overrides: float) -> AdaptiveHedgeDelay:
        params: dict[str, float] = {
            "quantile": 0.9,
            "floor_s": 0.01,
            "ceiling_s": 1.0,
            "window": 100,
            "min_samples": 10,
        }
        params.update(overrides)
        return AdaptiveHedgeDelay(
            quantile=params["quantile"],
            floor_s=params["floor_s"],
            ceiling_s=params["ceiling_s"],
            window=int(params["window"]),
            min_samples=int(params["min_samples"]),
        )

    def test_uses_the_ceiling_until_enough_samples(self) -> None:
        delay = self._delay()
        for _ in range(9):
            delay.record(0.02)
        assert delay.current() == 1.0
        delay.record(0.02)
        assert delay.current() == pytest.approx(0.02)

    def test_follows_the_quantile(self) -> None:
        delay = self._delay()
        for i in range(100):
            delay.record(i / 1000)  # 0..99 ms
        assert delay.current() == pytest.approx(0.090)

    def test_is_clamped_to_floor_and_ceiling(self) -> None:
        fast, slow = self._delay(), self._delay()
        for _ in range(20):
            fast.record(0.0001)
            slow.record(5.0)
        assert fast.current() == 0.01
        assert slow.current() == 1.0

    def test_forgets_latencies_outside_the_window(self) -> None:
        delay = self._delay(window=10, min_samples=5)
        for _ in range(10):
            delay.record(0.5)
        for _ in range(10):
            delay.record(0.05)
        assert delay.current() == pytest.approx(0.05)
