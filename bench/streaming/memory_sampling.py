"""Memory of a benchmark run's process tree, sampled from a process of its own.

A run's tree is its Python driver process, the Spark JVM it starts and the Python workers
that JVM forks. :func:`tree_memory_by_kind` reads each process's VmRSS (``statm``) and
proportional set sizes (``smaps_rollup``) and sums them per :data:`PROCESS_KINDS`;
:func:`memory_summary` turns a run's samples into peak and steady figures.

:class:`MemorySampler` takes the samples from a separate Python process
(``python -m bench.streaming.memory_sampling ROOT INTERVAL``), which leaves itself out of
the tree it measures. In the driver process, a sampling thread would compete for that
interpreter's lock with GIC's driver (its batch loop runs in Python), but not with a
Spark baseline's (its work runs in the JVM), and reading ``smaps_rollup`` of a tree of
several GB takes milliseconds of kernel time: measured at 1 GB of state, a 0.5 s sampler
in GIC's driver took a tenth of a core of the two. The sampler's cost is now the same
kind for every system: a process of its own, at :data:`INTERVAL_S`.

That process still costs CPU on a machine the runs keep busy, and more for a system that
maps more: ``smaps_rollup`` walks the page tables of every mapping, and GIC's workers map
their LMDB files (at 4 GB of state, about 16 GB of resident file pages between the two).
Measured at 4 GB once a second: 0.1-0.27 of a core, all of it kernel time, where the
Spark baselines' trees map a few GB. Every 5 s it is a fifth of that; a run still gets
dozens of samples (a 4 GB run measures for minutes, a restart for about a minute).

Invariants: a sample always holds every kind (zeros when none ran); a process that
ends between listing and reading counts as zeros; the sampler process never counts
itself.
"""

from __future__ import annotations

import json
import os
import signal
import statistics
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from typing import IO

from bench.streaming.records import BenchmarkError

INTERVAL_S = 5.0
"""Seconds between samples (see the module docstring for why not fewer)."""

RSS_DEFINITION = (
    "resident memory (VmRSS, /proc) summed over the system run's whole process tree, "
    f"sampled every {INTERVAL_S} s by a separate process (which leaves itself out): the "
    "run's Python process (the driver; GIC's driver too), "
    "the Spark JVM it starts (driver and executor in local mode) and the Python workers "
    "that JVM forks (GIC's state tasks, Spark's pyspark daemon). The same for every "
    "system. rss_peak_bytes: the largest sample; rss_steady_bytes: the median of the "
    "samples of the last half of the run (after the load phase in every size run here). "
    "VmRSS counts a page shared by several processes (a file two Python workers map, "
    "pages a fork shares) once per process, and counts file pages a process maps (GIC's "
    "LMDB stores, the JVM's jars) beside its own heap; pss_anon_* and pss_file_* split "
    "the proportional set size (Pss_Anon, Pss_File of /proc/<pid>/smaps_rollup: a shared "
    "page split between its processes) summed over the same tree, sampled with it: "
    "anonymous memory is what settings must bound, file pages are the page cache the "
    "kernel takes back under pressure. <field>_steady_bytes_<kind> is the same per part of "
    "the tree: driver (the run's Python process), jvm (the Spark JVM), workers (the "
    "Python processes the JVM forks: GIC's state tasks with their stores and caches, "
    "pyspark's daemon and workers), each the median of its own samples of the last half"
)
MEMORY_FIELDS = ("rss", "pss_anon", "pss_file")
"""What :func:`tree_memory` sums, in this order."""
PROCESS_KINDS = ("driver", "jvm", "workers")
"""The parts of a run's process tree (:func:`process_kind`): its Python driver process
(and any helper that is not one of the others), the Spark JVM, and the Python workers
the JVM forks (GIC's state tasks, pyspark's daemon and workers)."""

Memory = tuple[int, int, int]


def _children_map() -> dict[int, list[int]]:
    tree: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", encoding="ascii", errors="replace") as f:
                stat = f.read()
        except OSError:
            continue
        fields = stat[stat.rfind(")") + 2 :].split()
        tree.setdefault(int(fields[1]), []).append(int(entry))
    return tree


def tree_rss(root: int) -> int:
    """Bytes resident in ``root`` and every process below it."""
    return tree_memory(root)[0]


def _tree(root: int, exclude: frozenset[int] = frozenset()) -> list[int]:
    tree = _children_map()
    out, todo = [], [root]
    while todo:
        pid = todo.pop()
        if pid in exclude:
            continue
        out.append(pid)
        todo.extend(tree.get(pid, []))
    return out


def process_memory(pid: int) -> tuple[int, int, int]:
    """``(rss, pss_anon, pss_file)`` of one process in bytes (zeros when it is gone):
    VmRSS from ``statm``, the proportional set sizes from ``smaps_rollup``."""
    page = os.sysconf("SC_PAGE_SIZE")
    try:
        with open(f"/proc/{pid}/statm", encoding="ascii") as f:
            rss = int(f.read().split()[1]) * page
        anon = file = 0
        with open(f"/proc/{pid}/smaps_rollup", encoding="ascii") as f:
            for line in f:
                if line.startswith("Pss_Anon:"):
                    anon = int(line.split()[1]) * 1024
                elif line.startswith("Pss_File:"):
                    file = int(line.split()[1]) * 1024
    except (OSError, IndexError, ValueError):
        return 0, 0, 0
    return rss, anon, file


def process_kind(cmdline: Sequence[str]) -> str:
    """Which of :data:`PROCESS_KINDS` a process with arguments ``cmdline`` is."""
    if cmdline and os.path.basename(cmdline[0]) == "java":
        return "jvm"
    if any(arg.startswith("pyspark.") for arg in cmdline):
        return "workers"
    return "driver"


def _cmdline(pid: int) -> list[str]:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            raw = f.read()
    except OSError:
        return []
    return [part.decode(errors="replace") for part in raw.split(b"\0") if part]


def tree_memory_by_kind(root: int, exclude: frozenset[int] = frozenset()) -> dict[str, Memory]:
    """:data:`MEMORY_FIELDS` of ``root`` and every process below it, summed per
    :data:`PROCESS_KINDS` (every kind present, zeros when none ran); the processes in
    ``exclude`` and their children are left out."""
    sums = {kind: [0, 0, 0] for kind in PROCESS_KINDS}
    for pid in _tree(root, exclude):
        kind = sums[process_kind(_cmdline(pid))]
        for i, value in enumerate(process_memory(pid)):
            kind[i] += value
    return {kind: (v[0], v[1], v[2]) for kind, v in sums.items()}


def tree_memory(root: int) -> Memory:
    """:data:`MEMORY_FIELDS` of ``root`` and every process below it, summed."""
    return _total(tree_memory_by_kind(root))


def _total(by_kind: Mapping[str, Memory]) -> Memory:
    parts = list(by_kind.values())
    return (sum(p[0] for p in parts), sum(p[1] for p in parts), sum(p[2] for p in parts))


def memory_summary(samples: Sequence[Mapping[str, Memory]]) -> dict[str, float | None]:
    """:func:`rss_summary` of each of :data:`MEMORY_FIELDS` over ``samples`` (each one
    :func:`tree_memory_by_kind`): ``<field>_peak_bytes`` and ``<field>_steady_bytes`` of
    the whole tree, ``<field>_steady_bytes_<kind>`` of each kind, and ``rss_samples``."""
    out: dict[str, float | None] = {}
    totals = [_total(sample) for sample in samples]
    for i, name in enumerate(MEMORY_FIELDS):
        one = rss_summary([total[i] for total in totals])
        out[f"{name}_peak_bytes"] = one["rss_peak_bytes"]
        out[f"{name}_steady_bytes"] = one["rss_steady_bytes"]
        for kind in PROCESS_KINDS:
            part = rss_summary([sample[kind][i] for sample in samples if kind in sample])
            out[f"{name}_steady_bytes_{kind}"] = part["rss_steady_bytes"]
    out["rss_samples"] = len(samples)
    return out


def rss_summary(samples: Sequence[int]) -> dict[str, float | None]:
    """Peak and steady (median of the last half) of ``samples``."""
    if not samples:
        return {"rss_peak_bytes": None, "rss_steady_bytes": None, "rss_samples": 0}
    tail = samples[len(samples) // 2 :]
    return {
        "rss_peak_bytes": float(max(samples)),
        "rss_steady_bytes": float(statistics.median(tail)),
        "rss_samples": len(samples),
    }


class MemorySampler:
    """Samples :func:`tree_memory_by_kind` of ``root`` every ``interval_s`` from a child
    process (see the module docstring); :attr:`samples` holds them once the ``with``
    block ended. A sampler that failed (exited other than by the SIGTERM that ends it),
    or wrote a line that is not a sample, raises on exit."""

    def __init__(self, root: int, interval_s: float = INTERVAL_S) -> None:
        self.root = root
        self.interval_s = interval_s
        self.samples: list[dict[str, Memory]] = []
        self._proc: subprocess.Popen[str] | None = None

    def __enter__(self) -> MemorySampler:
        self._proc = subprocess.Popen(
            [sys.executable, "-m", __name__, str(self.root), str(self.interval_s)],
            stdout=subprocess.PIPE,
            text=True,
        )
        return self

    @property
    def pid(self) -> int | None:
        """The sampler process's pid, while it runs."""
        return self._proc.pid if self._proc is not None else None

    def __exit__(self, *exc: object) -> None:
        proc = self._proc
        if proc is None:
            return
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=60)
        # 0: it stopped on the signal; -SIGTERM: the signal came before its handler was set
        if proc.returncode not in (0, -signal.SIGTERM):
            raise BenchmarkError(f"the memory sampler exited with code {proc.returncode}")
        self.samples = parse_samples(out)


def parse_samples(text: str) -> list[dict[str, Memory]]:
    """The samples :func:`sample_forever` wrote, one JSON object a line."""
    samples: list[dict[str, Memory]] = []
    for line in text.splitlines():
        raw = json.loads(line)
        if set(raw) != set(PROCESS_KINDS):
            raise ValueError(f"not a memory sample: {line[:200]}")
        samples.append({kind: (int(v[0]), int(v[1]), int(v[2])) for kind, v in raw.items()})
    return samples


def sample_forever(root: int, interval_s: float, out: IO[str]) -> None:
    """Write a sample of ``root``'s tree (without this process) to ``out`` every
    ``interval_s`` until SIGTERM, or until ``root`` is gone."""
    stopping: list[bool] = []
    signal.signal(signal.SIGTERM, lambda *_: stopping.append(True))
    me = frozenset({os.getpid()})
    while not stopping and os.path.exists(f"/proc/{root}"):
        out.write(json.dumps(tree_memory_by_kind(root, me)) + "\n")
        out.flush()
        deadline = time.monotonic() + interval_s
        while not stopping and time.monotonic() < deadline:
            time.sleep(min(0.05, interval_s))


if __name__ == "__main__":
    sample_forever(int(sys.argv[1]), float(sys.argv[2]), sys.stdout)
