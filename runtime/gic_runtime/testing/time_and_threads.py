"""Fakes at the runtime's seams, for tests of this project and of jobs built on it.

Names start with ``Testing`` so a reader always knows a fake is in play.
"""

from __future__ import annotations

import functools
import threading
from collections import deque
from collections.abc import Callable
from concurrent.futures import Executor, Future
from typing import Any, ParamSpec, TypeVar

_P = ParamSpec("_P")
_T = TypeVar("_T")


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


class TestingManualExecutor(Executor):
    """An :class:`~concurrent.futures.Executor` that runs submitted calls only when told
    (:meth:`run_next`, :meth:`run_all`), on the calling thread, in submission order. Like
    a thread pool, it refuses new calls after :meth:`shutdown`, which cancels the calls
    that never ran when asked to (their futures' callbacks run then). Thread-safe."""

    __test__ = False  # not a pytest test class

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._queue: deque[tuple[Future[Any], Callable[[], Any]]] = deque()
        self._shut_down = False

    def submit(self, fn: Callable[_P, _T], /, *args: _P.args, **kwargs: _P.kwargs) -> Future[_T]:
        future: Future[_T] = Future()
        with self._lock:
            if self._shut_down:
                raise RuntimeError("cannot schedule new futures after shutdown")
            self._queue.append((future, functools.partial(fn, *args, **kwargs)))
        return future

    @property
    def pending(self) -> int:
        """Calls submitted and not yet run (nor cancelled)."""
        with self._lock:
            return sum(1 for future, _ in self._queue if not future.cancelled())

    def run_next(self) -> bool:
        """Run the oldest pending call; False when there is none."""
        while True:
            with self._lock:
                if not self._queue:
                    return False
                future, call = self._queue.popleft()
            if not future.set_running_or_notify_cancel():
                continue  # cancelled while queued
            try:
                result = call()
            except BaseException as exc:
                future.set_exception(exc)
            else:
                future.set_result(result)
            return True

    def run_all(self) -> int:
        """Run pending calls (also those they submit) until none is left; returns how many."""
        ran = 0
        while self.run_next():
            ran += 1
        return ran

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        with self._lock:
            self._shut_down = True
            queued = list(self._queue) if cancel_futures else []
            if cancel_futures:
                self._queue.clear()
        for future, _ in queued:
            future.cancel()
        if wait:
            self.run_all()
