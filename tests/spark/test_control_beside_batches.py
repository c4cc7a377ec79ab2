"""The control loop reads storage beside a running batch (docs/architecture.md §13.7).

``Driver.serve_control`` checks the fence and looks for pending requests without the
driver's lock, so a batch never waits for those requests; it takes the lock only to
serve a request. Here a test thread holds the lock as a running batch does.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import TypeVar

import pytest
from pyspark.sql import SparkSession

from gic_runtime.control import ControlChannel
from gic_runtime.errors import FencedError
from gic_runtime.fencing import claim_epoch
from gic_runtime.spark import Driver, GICJob, count, start_driver

from .test_word_count import run_wc, settings, words_of
from .words import write_text_batches

T = TypeVar("T")


class CountingLock:
    """A lock that counts how often anyone tried to take it."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.tries = 0

    def acquire(self, blocking: bool = True, timeout: float = -1) -> bool:
        self.tries += 1
        return self._lock.acquire(blocking, timeout)

    def release(self) -> None:
        self._lock.release()

    def __enter__(self) -> bool:
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()

    @contextmanager
    def held_by_a_batch(self) -> Iterator[None]:
        self._lock.acquire()
        try:
            yield
        finally:
            self._lock.release()


def on_another_thread(call: Callable[[], T]) -> T:
    with ThreadPoolExecutor(1) as pool:
        return pool.submit(call).result(timeout=60)


def driver_of(spark: SparkSession, tmp_path: Path, src: Path) -> tuple[Driver, CountingLock]:
    """A started driver of the word count over ``src`` whose lock counts its takers."""
    s = settings(tmp_path, control_poll_s=0.2)
    job = GICJob(spark, s)
    stream = job.keyed(words_of(spark, src), key="word").aggregate(count=count())
    query = stream.to_parquet(str(tmp_path / "out"))
    driver = start_driver(spark, s, "word", query.processor, query.sink, resolver=job.resolver)
    lock = CountingLock()
    driver._lock = lock  # type: ignore[assignment]
    return driver, lock


def test_the_control_loop_never_makes_a_batch_wait_for_its_reads(
    spark: SparkSession, tmp_path: Path
) -> None:
    src = tmp_path / "in"
    write_text_batches(src, 1)
    s = settings(tmp_path, control_poll_s=0.2)
    run_wc(spark, s, src, tmp_path / "out")  # a checkpoint to serve requests from
    driver, lock = driver_of(spark, tmp_path, src)
    channel = ControlChannel(driver.resolver, s.storage, s.job_id)
    try:
        with lock.held_by_a_batch():
            # Nothing pending: the fence and the requests were read, the lock never tried.
            assert on_another_thread(driver.serve_control) is None
            assert lock.tries == 0
            # A pending stop waits for the batch (control_poll_s at most) ...
            stop = channel.request_stop()
            assert on_another_thread(driver.serve_control) is None
            assert lock.tries == 1
        # ... and is served between batches.
        assert driver.serve_control() == f"stopped by request {stop.request_id}"
        assert channel.poll().empty
    finally:
        driver.close()


def test_a_superseded_driver_learns_it_while_a_batch_runs(
    spark: SparkSession, tmp_path: Path
) -> None:
    src = tmp_path / "in"
    write_text_batches(src, 1)
    driver, lock = driver_of(spark, tmp_path, src)
    try:
        claim_epoch(driver.resolver, driver.root, driver.job_id, claimed_by="a newer launch")
        with lock.held_by_a_batch(), pytest.raises(FencedError, match="superseded by epoch"):
            on_another_thread(driver.serve_control)
        assert lock.tries == 0
    finally:
        driver.close(error=FencedError("superseded"))
