"""The allocators of an executor's Python worker: bounded arenas, freed memory given back.

A state task's worker allocates and frees large buffers from several threads at once: the
task thread's Arrow batches and changelog sections, the uploader's segments, the
materialization pool's snapshot bodies, a background restore's fetched windows. glibc's
defaults suit none of this:

* every thread that meets a locked arena gets one of its own, up to eight per core, and
  memory freed into an arena stays with it;
* the threshold above which a block is mapped on its own (and unmapped when freed)
  rises to the largest block freed so far, up to 32 MiB, so after the first snapshot
  body of a few MiB every later one comes from the arenas' heaps, whose free space is
  rarely at their top and so is never returned.

A worker's anonymous memory then grows with the largest working set any batch or restore
ever had, per arena, instead of with what it holds now. :func:`tune` caps the arenas
(:data:`ARENA_MAX`) and fixes the mapping threshold (:data:`MMAP_THRESHOLD_BYTES`) so
every large buffer is mapped and returned when freed; :func:`release` hands free heap
memory back (the Spark task core calls it after every task,
:func:`~gic_runtime.executor.core.run_task`).

Arrow has an allocator of its own (mimalloc in the wheels the runtime installs): every
Arrow buffer a task builds, its input batches, the grouped and sorted tables of an
aggregate, its output, comes from Arrow's default memory pool, which keeps the pages of
freed buffers for later ones. A worker's anonymous memory then keeps its largest batch's
Arrow working set between tasks (measured at 4 GB of state, 2 KB rows: about 110 MB a
worker, docs/architecture.md §13.3). :func:`release` asks the pool to return them too; it
takes well under a millisecond.

Invariants: nothing here changes what the runtime computes, only where memory comes
from and when it goes back; a variable the user set in the environment (``MALLOC_ARENA_MAX``,
``MALLOC_MMAP_THRESHOLD_``) wins over these values; on a C library without ``mallopt``
(not glibc) both functions leave it alone and say so in their result.

Thread-safety: :func:`tune` runs once per process (a forked child tunes again; glibc
keeps the parent's settings there anyway); :func:`release` may run on any thread.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import os
import threading
from typing import Any, Final

import pyarrow as pa

__all__ = ["ARENA_MAX", "MMAP_THRESHOLD_BYTES", "release", "tune"]

_log = logging.getLogger(__name__)

ARENA_MAX: Final = 2
"""Malloc arenas of a worker process, shared by the task thread and the background
threads (uploads, materialization, restore); glibc's default on a 2-core executor is 16.
The steady batch time at 1 GB of state did not change with two (docs/architecture.md
§13.3)."""

MMAP_THRESHOLD_BYTES: Final = 1024 * 1024
"""Blocks at least this large are mapped on their own and unmapped when freed (and the
threshold no longer rises). A mapping costs a page fault per 4 KiB touched, about a
millisecond per 8 MiB, against blocks that take at least as long to fill."""

_M_MMAP_THRESHOLD: Final = -3
_M_ARENA_MAX: Final = -8
_ENV_ARENA: Final = "MALLOC_ARENA_MAX"
_ENV_THRESHOLD: Final = "MALLOC_MMAP_THRESHOLD_"

_lock = threading.Lock()
_tuned_pid: list[int] = [0]


def _libc() -> Any | None:
    """glibc's handle, or ``None`` when this C library has no ``mallopt``/``malloc_trim``."""
    name = ctypes.util.find_library("c")
    if name is None:
        return None
    try:
        libc = ctypes.CDLL(name)
    except OSError:
        return None
    if not (hasattr(libc, "mallopt") and hasattr(libc, "malloc_trim")):
        return None
    return libc


_LIBC: Final = _libc()


def tune() -> dict[str, int]:
    """Cap the arenas and fix the mapping threshold of this process, once (see the module
    docstring). Returns the options set (empty when none: already tuned here, every
    option set by the environment, or no glibc)."""
    pid = os.getpid()
    with _lock:
        if _tuned_pid[0] == pid:
            return {}
        _tuned_pid[0] = pid
        if _LIBC is None:
            _log.debug("no glibc mallopt here; the C allocator keeps its defaults")
            return {}
        applied: dict[str, int] = {}
        for env, option, value in (
            (_ENV_ARENA, _M_ARENA_MAX, ARENA_MAX),
            (_ENV_THRESHOLD, _M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES),
        ):
            if os.environ.get(env):
                continue  # the user's setting wins
            if _LIBC.mallopt(ctypes.c_int(option), ctypes.c_int(value)) == 1:
                applied[env] = value
            else:
                _log.warning("mallopt(%d, %d) was refused; keeping glibc's default", option, value)
        return applied


def release() -> bool:
    """Give the pages of freed buffers back to the system: Arrow's default memory pool's
    (``release_unused``), then free heap memory of every glibc arena (``malloc_trim(0)``).
    Returns whether glibc released memory (``False`` as well without glibc; Arrow's pool
    does not say)."""
    pa.default_memory_pool().release_unused()
    if _LIBC is None:
        return False
    return bool(_LIBC.malloc_trim(ctypes.c_size_t(0)))
