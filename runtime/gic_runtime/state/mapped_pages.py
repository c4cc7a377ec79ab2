"""Unmapping the pages of shared file mappings a process touched, keeping their data.

The executor-local state lives in memory-mapped files (:mod:`gic_runtime.state.lmdb_store`).
Every page a worker reads or writes stays mapped into that worker until the process ends
or the kernel reclaims it: after enough batches each worker maps most of the local
copy, and its resident size (VmRSS, what a pod's monitoring shows) follows the state's
size, twice over with two workers, instead of what a task touches.

:func:`release` drops this process's page-table entries for every mapping of the given
files (``madvise(MADV_DONTNEED)``). For a shared file mapping that discards nothing: the
pages stay in the page cache, dirty ones stay dirty there and are written back as
usual, and the next access maps the same page again (a minor fault, no disk read while
the page is cached). The kernel can then reclaim those pages like any unmapped file
cache, without first unmapping them from every worker.

:class:`GrowthGate` decides when to: it reads the process's resident file-backed memory
(one short read of ``/proc/self/statm``, unlike :func:`resident_bytes`, which makes the
kernel write out every mapping's page counts) and opens once that has grown by more than
a limit since the gate last opened. What a worker maps besides the local state (its
libraries' code) is mapped once and counted in the level the gate resets to.

Invariants: only ``MAP_SHARED`` mappings of the named files are touched (a private
mapping's changes would be lost, so those are skipped); the mappings are found in
``/proc/self/maps`` at each call, so a file mapped, grown or remapped since is handled;
where ``/proc/self/maps`` or ``madvise`` is missing (not Linux), nothing happens and the
result says so.

Thread-safety: any thread may call it, also while other threads read or write the
mappings (their next access faults the page back in).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import os
from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

__all__ = [
    "MADV_DONTNEED",
    "GrowthGate",
    "Released",
    "file_resident_bytes",
    "release",
    "resident_bytes",
    "shared_mappings",
]

MADV_DONTNEED: Final = 4
_MAPS: Final = Path("/proc/self/maps")
_SMAPS: Final = Path("/proc/self/smaps")
_STATM: Final = Path("/proc/self/statm")


@dataclass(frozen=True)
class Released:
    """What one :func:`release` call did."""

    supported: bool
    """False: this platform has no ``/proc/self/maps`` or no ``madvise``."""
    mappings: int = 0
    """Shared mappings of the named files released."""
    bytes: int = 0
    """Their total length (address space, not resident pages)."""
    failed: int = 0
    """Mappings ``madvise`` refused (it may have unmapped or changed since read)."""


@functools.cache
def _madvise() -> Any:
    """libc's ``madvise`` (None without one), looked up once per process."""
    try:
        fn: Any = ctypes.CDLL(ctypes.util.find_library("c") or None).madvise
    except (OSError, AttributeError):
        return None
    fn.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    fn.restype = ctypes.c_int
    return fn


def shared_mappings(paths: Collection[str], maps: str) -> list[tuple[int, int]]:
    """The ``(start, end)`` of every shared mapping of a file in ``paths`` (absolute,
    resolved) listed in ``maps`` (the text of ``/proc/<pid>/maps``)."""
    found: list[tuple[int, int]] = []
    for line in maps.splitlines():
        fields = line.split(maxsplit=5)
        if len(fields) < 6 or fields[5] not in paths:
            continue
        if not fields[1].endswith("s"):  # private (copy-on-write): never drop its pages
            continue
        start, end = fields[0].split("-")
        found.append((int(start, 16), int(end, 16)))
    return found


def release(paths: Collection[str]) -> Released:
    """Unmap this process's pages of every shared mapping of the files ``paths``
    (absolute, resolved), keeping their data (module docstring)."""
    madvise = _madvise()
    if madvise is None or not paths:
        return Released(supported=madvise is not None)
    try:
        maps = _MAPS.read_text()
    except OSError:
        return Released(supported=False)
    ranges = shared_mappings(paths, maps)
    failed = sum(1 for start, end in ranges if madvise(start, end - start, MADV_DONTNEED))
    return Released(
        supported=True,
        mappings=len(ranges) - failed,
        bytes=sum(end - start for start, end in ranges),
        failed=failed,
    )


def resident_bytes(paths: Collection[str]) -> int | None:
    """Bytes of the files ``paths`` (absolute, resolved) resident in this process's
    mappings of them (the ``Rss`` of ``/proc/self/smaps``); None where that file is
    missing (not Linux)."""
    try:
        smaps = _SMAPS.read_text()
    except OSError:
        return None
    total, counting = 0, False
    for line in smaps.splitlines():
        fields = line.split(maxsplit=5)
        if fields and "-" in fields[0] and not fields[0].endswith(":"):  # a mapping's header
            counting = len(fields) == 6 and fields[5] in paths
        elif counting and fields[:1] == ["Rss:"]:
            total += int(fields[1]) * 1024
    return total


def file_resident_bytes() -> int | None:
    """This process's resident file-backed and shared memory (``RssFile + RssShmem``: the
    third field of ``/proc/self/statm``, in pages); None where that file is missing."""
    try:
        fields = _STATM.read_text().split()
        return int(fields[2]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return None


class GrowthGate:
    """Opens when this process's resident file-backed memory has grown by more than
    ``limit`` bytes since the gate last opened (or, the first time, since zero).

    The caller releases its mappings when :meth:`should_release` says so and then calls
    :meth:`released`, which sets the level growth is counted from to what stays
    resident. Not thread-safe: one caller (the task thread after each task).
    """

    def __init__(self, limit: int) -> None:
        if limit < 1:
            raise ValueError(f"limit must be at least 1 byte, got {limit}")
        self.limit = limit
        self._level = 0

    def should_release(self) -> bool:
        """True when resident file-backed memory exceeds the level by more than the
        limit (False where it cannot be read)."""
        now = file_resident_bytes()
        return now is not None and now - self._level > self.limit

    def released(self) -> None:
        """Count growth from what is resident now."""
        self._level = file_resident_bytes() or 0
