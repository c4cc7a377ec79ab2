"""SIGTERM as a stop: how a driver ends cleanly when its process is told to terminate.

Kubernetes stops every pod with SIGTERM (deletion, eviction, node drain, rollout) and
kills it with SIGKILL when the grace period is over; ``kill PID`` does the same to a
``gic run``. :class:`TerminationSignal` turns the signal into a flag that
:meth:`GICQuery.run <gic_runtime.spark.job.GICQuery.run>` reads on each turn of its
control loop, and :func:`stop_for_signal` then stops the query through the same path as
a stop request (docs/architecture.md §13.10):

* **between batches** -- when the running batch (if any) ends within ``stop_timeout_s``
  of the signal, the driver's stop reason is set under the driver lock, so no further
  batch touches state; the query stops and :meth:`Driver.close
  <gic_runtime.spark.driver.Driver.close>` runs the clean-up with what is left of the
  budget and records ``stopped``;
* **abandoning the batch** -- when the batch still runs at the deadline, the query is
  stopped under it (Spark cancels the batch's job). Its manifest either landed before
  (a complete checkpoint) or never lands: the next launch replays the batch from the
  last checkpoint, exactly as after a crash, so exactly-once holds. The clean-up is
  skipped (the next start's or ``gic gc``'s sweep removes what the batch wrote) and
  ``stopped`` is recorded. Stopping the query waits :data:`QUERY_STOP_TIMEOUT_S` at
  most for Spark's stream thread.

Invariants: the signal handler only records when the signal came (nothing in it blocks,
takes a lock or writes); the handler is installed only on the main thread and the
previous one is restored afterwards. When ``GIC_DRIVER_PID_FILE`` names a file, the
process writes its pid there once the handler is installed and removes it when the
handler is removed: the driver pod's entry process
(:mod:`gic_runtime.cli.driver_process`) forwards SIGTERM to that pid.

Thread-safety: :class:`TerminationSignal` is owned by the thread that runs the query;
its flag is written by the signal handler (on that thread) and read by it.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import threading
import time
from pathlib import Path
from types import FrameType, TracebackType
from typing import Any, Protocol

from pyspark.sql import SparkSession

from gic_runtime.config import DRIVER_PID_FILE_ENV
from gic_runtime.spark.driver import Driver

__all__ = [
    "SIGTERM_REASON",
    "TerminationSignal",
    "control_loop",
    "stop_for_signal",
]

_log = logging.getLogger(__name__)

SIGTERM_REASON = "stopped by SIGTERM"
QUERY_STOP_TIMEOUT_S = 5.0
"""How long stopping the query may wait for Spark's stream thread (for a batch Spark
cannot cancel at once), as ``spark.sql.streaming.stopTimeout`` unless the session sets
it; Spark's default, 0, waits for ever."""
_STOP_TIMEOUT_CONF = "spark.sql.streaming.stopTimeout"


class _Query(Protocol):
    """What the control loop needs of a streaming query."""

    def stop(self) -> None: ...

    def awaitTermination(self, timeout: int | None = None) -> bool | None: ...  # noqa: N802


class TerminationSignal:
    """Records the arrival of SIGTERM while installed (a context manager).

    ``received_at`` is the :func:`time.monotonic` time of the first SIGTERM, else
    ``None``. Outside the main thread nothing is installed (Python delivers signals to
    the main thread only) and ``received_at`` stays ``None``.
    """

    def __init__(self) -> None:
        self.received_at: float | None = None
        self._previous: Any = None
        self._installed = False
        self._pid_file: Path | None = None

    def __enter__(self) -> TerminationSignal:
        if threading.current_thread() is not threading.main_thread():
            return self
        self._previous = signal.signal(signal.SIGTERM, self._on_signal)
        self._installed = True
        name = os.environ.get(DRIVER_PID_FILE_ENV)
        if name:
            self._pid_file = Path(name)
            _announce(self._pid_file)
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        value: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        if self._pid_file is not None:
            with contextlib.suppress(OSError):
                self._pid_file.unlink()
            self._pid_file = None
        if self._installed:
            signal.signal(signal.SIGTERM, self._previous)
            self._installed = False

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        if self.received_at is None:
            self.received_at = time.monotonic()


def _announce(path: Path) -> None:
    """Write this process's pid to ``path`` (replaced whole: a reader never sees a
    partial pid). A failure is logged: SIGTERM then ends the process as before."""
    temporary = path.with_name(f".{path.name}.{os.getpid()}")
    try:
        temporary.write_text(f"{os.getpid()}\n")
        os.replace(temporary, path)
    except OSError as exc:
        _log.warning("could not write the driver's pid to %s: %s", path, exc)


def stop_for_signal(driver: Driver, query: _Query, received_at: float) -> bool:
    """Stop ``query`` after SIGTERM came at ``received_at`` (monotonic); see the module
    docstring. Returns whether it stopped between batches (``False``: the running batch
    was abandoned). Waits at most ``stop_timeout_s`` from ``received_at`` for the
    batch, then for Spark to stop the query."""
    deadline = received_at + driver.settings.stop_timeout_s
    between = driver.stop_between_batches(SIGTERM_REASON, deadline)
    if between:
        _log.info("SIGTERM: stopping job %s between batches", driver.job_id)
        driver.telemetry.stopping()
    else:
        _log.warning(
            "SIGTERM: job %s's batch still runs after %.0f s; abandoning it (the next "
            "launch replays it from the last checkpoint)",
            driver.job_id,
            driver.settings.stop_timeout_s,
        )
    try:
        query.stop()
    except Exception as exc:  # the stream thread outlived QUERY_STOP_TIMEOUT_S
        _log.warning("SIGTERM: the query of job %s did not stop cleanly: %s", driver.job_id, exc)
    return between


def bound_query_stop(spark: SparkSession) -> None:
    """Bound how long stopping a query waits (:data:`QUERY_STOP_TIMEOUT_S`) unless the
    session sets ``spark.sql.streaming.stopTimeout`` itself; call before the query
    starts (the query runs in a copy of the session)."""
    if spark.conf.get(_STOP_TIMEOUT_CONF, "0") in ("0", "0ms", "0s"):
        spark.conf.set(_STOP_TIMEOUT_CONF, f"{int(QUERY_STOP_TIMEOUT_S * 1000)}ms")


def control_loop(driver: Driver, query: _Query, term: TerminationSignal) -> str:
    """Run ``query`` until it should stop; returns why. Each turn: after SIGTERM, stop
    (:func:`stop_for_signal`); when the query ended by itself (its trigger, or the
    driver's ``max_batches``), say so; else serve control requests between batches and
    stop the query once one ends the job. Errors of the query propagate."""
    poll = driver.settings.control_poll_s
    while True:
        if term.received_at is not None:
            stop_for_signal(driver, query, term.received_at)
            return driver.stop_reason or SIGTERM_REASON
        # pyspark types the timeout as int but takes float seconds (x 1000 ms)
        if query.awaitTermination(poll):  # type: ignore[arg-type]
            return driver.stop_reason or "the query's trigger ended"
        if term.received_at is not None:
            continue
        reason = driver.serve_control()
        if reason is not None:
            driver.telemetry.stopping()
            query.stop()
            return reason
