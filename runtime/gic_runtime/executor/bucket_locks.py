"""Machine-wide exclusive locks on buckets, shared by every process of an executor.

Two attempts of one state task (a Spark retry or a speculative copy, possibly in
another Python worker process of the same executor) must never interleave on one
bucket's executor-local copy. Each bucket has a lock file
``<job_dir>/locks/bucket-NNNNN.lock`` locked with ``fcntl.flock`` (exclusive,
blocking).

Invariants:

* Buckets are locked in ascending order and released in reverse, so two lockers of
  overlapping ranges can never deadlock.
* ``flock`` belongs to the open file description: a second open of the same file in
  the same process conflicts too, so threads of one process are serialized as well.
  The kernel releases the locks of a process that dies, so a crash never leaves a
  bucket locked.

Thread-safety: a :class:`BucketLocks` is used by one thread at a time; the executor
entry hands a task's locks on to its background restore, whose end releases them
(:meth:`~gic_runtime.executor.state_stack.ExecutorEntry.hold_locks`).
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Iterable
from pathlib import Path
from types import TracebackType

from gic_runtime.errors import ConfigurationError


def lock_path(locks_dir: Path, bucket: int) -> Path:
    """Lock file of ``bucket`` in ``locks_dir``."""
    return locks_dir / f"bucket-{bucket:05d}.lock"


class BucketLocks:
    """Exclusive locks on ``buckets`` (context manager; see the module docstring)."""

    def __init__(self, locks_dir: Path, buckets: Iterable[int]) -> None:
        self._dir = locks_dir
        self._buckets = sorted(set(buckets))
        self._fds: list[int] = []

    def acquire(self) -> None:
        """Block until every bucket is locked (in ascending order)."""
        try:
            self._dir.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise ConfigurationError(
                f"cannot create the bucket lock directory {self._dir}: {exc.strerror}; "
                "Barrier.local_dir must be a writable local directory"
            ) from exc
        try:
            for bucket in self._buckets:
                fd = os.open(lock_path(self._dir, bucket), os.O_RDWR | os.O_CREAT, 0o644)
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX)
                except BaseException:
                    os.close(fd)
                    raise
                self._fds.append(fd)
        except OSError as exc:
            self.release()
            raise ConfigurationError(
                f"cannot lock buckets in {self._dir}: {exc.strerror}; Barrier.local_dir "
                "must be on a local filesystem that supports flock"
            ) from exc
        except BaseException:
            self.release()
            raise

    def release(self) -> None:
        """Unlock every bucket locked so far (in reverse order); idempotent."""
        while self._fds:
            fd = self._fds.pop()
            try:
                fcntl.flock(fd, fcntl.LOCK_UN)
            finally:
                os.close(fd)

    def __enter__(self) -> BucketLocks:
        self.acquire()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.release()
