"""Machine-wide paging counters over a benchmark run, from ``/proc/vmstat``.

A run's rows/s at gigabytes of state depends on how much of the state's page cache the
kernel takes away while it runs: a page a batch needs that was paged out is read back
from disk. The benchmark machine's kernel pages out file cache that no
process maps on its own schedule (a DAMON ``pageout`` scheme, docs/architecture.md
§13.3), so two runs of the same system can differ by far more than two systems do.
:class:`PagingCounters` records, around one run, the counters that show it, so a
result carries the conditions it was measured under.

The counters are the machine's, not the run's: anything else running at the same time
adds to them. Counted over the whole run (load, warm-up and measured batches).

Invariants: a counter missing from ``/proc/vmstat`` (not Linux) is left out, never
reported as 0; deltas are never negative.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Final

VMSTAT: Final = Path("/proc/vmstat")
FIELDS: Final = ("pgmajfault", "pgpgin", "pgpgout")
"""Faults the kernel counts as major, and KiB read from and written to block devices. Only
the KiB read show pages read back: ``pgmajfault`` also counts faults that read nothing
(over a 4 GB run it stays in the millions with no disk read at all)."""
DEFINITION: Final = (
    "machine-wide /proc/vmstat counters over the whole run (load, warm-up, measured "
    "batches; anything else running on the machine counts too): pgmajfault, faults the "
    "kernel counts as major (also ones that read nothing); pgpgin / pgpgout, KiB read "
    "from / written to block devices (pgpgin is what shows pages read back from disk)"
)


def parse_vmstat(text: str) -> dict[str, int]:
    """The :data:`FIELDS` found in ``text`` (the contents of ``/proc/vmstat``)."""
    found: dict[str, int] = {}
    for line in text.splitlines():
        name, _, value = line.partition(" ")
        if name in FIELDS and value.strip().isdigit():
            found[name] = int(value)
    return found


def read_vmstat(path: Path = VMSTAT) -> dict[str, int]:
    """:func:`parse_vmstat` of ``path``; empty where it cannot be read."""
    try:
        return parse_vmstat(path.read_text())
    except OSError:
        return {}


def deltas(before: Mapping[str, int], after: Mapping[str, int]) -> dict[str, int]:
    """``after - before`` for each counter in both (a counter that went down, as after a
    reset, counts from 0)."""
    return {
        name: after[name] - before[name] if after[name] >= before[name] else after[name]
        for name in FIELDS
        if name in before and name in after
    }


class PagingCounters:
    """``with PagingCounters() as c: ...``; then ``c.deltas`` holds the counters' growth
    over the block (empty until it ends)."""

    def __init__(self, path: Path = VMSTAT) -> None:
        self._path = path
        self._before: dict[str, int] = {}
        self.deltas: dict[str, int] = {}

    def __enter__(self) -> PagingCounters:
        self._before = read_vmstat(self._path)
        return self

    def __exit__(self, *exc: object) -> None:
        self.deltas = deltas(self._before, read_vmstat(self._path))
