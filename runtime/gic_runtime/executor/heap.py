"""The Python object heap of an executor's worker: the collection after each task kept short.

PySpark's daemon runs a full ``gc.collect()`` in a reused worker after every task. A
full collection visits every container object the process tracks, and a state task's
worker holds a great many long-lived ones: the modules of pyarrow, pandas and boto3
(botocore's service models alone are tens of thousands of dicts), the runtime's
settings, clients and caches. About 150,000 after the imports alone, a collection of
70 ms on this machine, 130 ms in a running job (docs/architecture.md §13.3). It runs
on the worker's thread after the task answered: the slot's next task waits for it, and
its CPU is the executor's.

:func:`settle`, called by the Spark task core after each task
(:func:`~gic_runtime.executor.core.run_task`), collects the objects created since the
last call and moves every survivor into the permanent generation (``gc.freeze()``),
which collections skip, so the daemon's collection that follows, and the interpreter's
own, visit only what later tasks create. Every :data:`FULL_EVERY` calls (the first
included) it first thaws the heap and collects all of it, so cycles among long-lived
objects that have become garbage since are freed too.

Invariants: nothing here changes what the runtime computes. Reference counting frees
frozen objects as usual; only an unreachable cycle among frozen objects waits, at most
until the next full pass. Outside a reused PySpark worker (``SPARK_REUSE_WORKER`` unset:
the process ends after its task, and nothing collects after it) :func:`settle` does
nothing.

Thread-safety: call it from the task thread between tasks; a collection is safe while
background threads run (they only allocate).
"""

from __future__ import annotations

import gc
import os
import threading
from dataclasses import dataclass
from typing import Final

__all__ = ["FULL_EVERY", "SettleResult", "reused_worker", "settle"]

FULL_EVERY: Final = 64
"""Calls between two collections of the whole heap: at two tasks per worker and batch,
one full pass per 32 batches instead of one per task."""

REUSE_ENV: Final = "SPARK_REUSE_WORKER"
"""Set by Spark in the environment of Python workers it reuses across tasks."""

_lock = threading.Lock()
_calls: list[int] = [0, 0]
"""``[pid, calls in that process]``: a forked child starts counting again."""


@dataclass(frozen=True, slots=True)
class SettleResult:
    """What one :func:`settle` call did."""

    full: bool
    """Whether the whole heap was thawed and collected first."""
    collected: int
    """Unreachable objects the collection found."""

    @property
    def frozen(self) -> int:
        """Objects in the permanent generation now. Counted when asked, not by
        :func:`settle`: CPython walks the whole generation to count it (about 10 ms for
        a worker's heap), which a task must not pay for a figure nobody reads."""
        return gc.get_freeze_count()


def reused_worker() -> bool:
    """Whether this process is a PySpark worker that Spark reuses across tasks."""
    return os.environ.get(REUSE_ENV, "") not in ("", "0")


def settle(*, force: bool = False) -> SettleResult | None:
    """Collect and freeze the heap after a task (see the module docstring); ``None``
    outside a reused worker unless ``force``."""
    if not (force or reused_worker()):
        return None
    pid = os.getpid()
    with _lock:
        if _calls[0] != pid:
            _calls[0], _calls[1] = pid, 0
        full = _calls[1] % FULL_EVERY == 0
        _calls[1] += 1
        if full:
            gc.unfreeze()
        collected = gc.collect()
        gc.freeze()
        return SettleResult(full=full, collected=collected)
