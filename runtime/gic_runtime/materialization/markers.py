"""In-flight markers of background materializations, shared by the processes of an
executor.

A bucket's snapshot is being taken while its marker file exists *and* is locked: the
process that took the marker holds an exclusive ``fcntl.flock`` on it until it releases
it. The kernel drops the lock of a process that dies, so a marker a killed process left
behind is recognised as stale at once, whatever its age; no clock decides.

Invariants:

* A marker appears under its name already locked: it is created under a temporary name,
  locked, and only then linked to its name (``link`` fails when the name exists), so no
  other process ever sees an unlocked marker of a live holder.
* At most one holder per marker: taking a marker succeeds only by creating the name, and
  a stale marker is removed only by a process that holds its lock and has checked that
  the name still refers to the file it locked.
* Releasing removes the name before the lock goes, so a released marker is never seen
  as stale by a waiter that could race a new holder.

The directory must be on a local file system that supports ``flock`` (the executor's
local directory, as for the bucket locks). Thread-safety: a :class:`HeldMarker` is
released by the thread that ends the work; the functions here are safe to call from any
thread or process.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import time
import uuid
from pathlib import Path

__all__ = ["HeldMarker", "in_flight", "take_marker"]


class HeldMarker:
    """A marker this process holds (locked) until :meth:`release`."""

    def __init__(self, path: Path, fd: int) -> None:
        self.path = path
        self._fd: int | None = fd

    @property
    def held(self) -> bool:
        """Whether the marker is still held (not yet released)."""
        return self._fd is not None

    def release(self) -> None:
        """Remove the marker and drop its lock (idempotent). A marker that cannot be
        removed still stops counting as in flight once its lock is gone."""
        fd, self._fd = self._fd, None
        if fd is None:
            return
        try:
            if _same_file(self.path, fd):
                self.path.unlink(missing_ok=True)
        except OSError:
            pass  # the unlocked file is stale for everyone else
        finally:
            os.close(fd)


def take_marker(path: Path) -> HeldMarker | None:
    """Take the marker at ``path``; ``None`` when a live process holds it. A stale
    marker (its holder died) is replaced. Raises :class:`OSError` when the directory
    cannot be written."""
    path.parent.mkdir(parents=True, exist_ok=True)
    for _ in range(2):
        held = _create_locked(path)
        if held is not None:
            return held
        if in_flight(path):
            return None
        _remove_stale(path)
    return None


def in_flight(path: Path) -> bool:
    """Whether a live process holds the marker at ``path``."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return False
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        return False
    finally:
        os.close(fd)


def _create_locked(path: Path) -> HeldMarker | None:
    """Create ``path`` locked (see the invariants); ``None`` when the name exists."""
    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        os.write(fd, f"{os.getpid()} {time.time()}\n".encode())
        try:
            os.link(tmp, path)
        except FileExistsError:
            os.close(fd)
            return None
        return HeldMarker(path, fd)
    except BaseException:
        with contextlib.suppress(OSError):
            os.close(fd)
        raise
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)


def _remove_stale(path: Path) -> None:
    """Remove the marker at ``path`` if nobody holds it (its holder died)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return  # taken over by a live process meanwhile
        if _same_file(path, fd):
            path.unlink(missing_ok=True)
    finally:
        os.close(fd)


def _same_file(path: Path, fd: int) -> bool:
    """Whether ``path`` still names the file open as ``fd``."""
    try:
        st = path.stat()
    except FileNotFoundError:
        return False
    own = os.fstat(fd)
    return (st.st_dev, st.st_ino) == (own.st_dev, own.st_ino)
