"""Checkpoint cost: changelog checkpoints (GIC) versus full snapshots, same state, same updates.

Workload: a count per key (value state, ints) over ``KEYS`` keys in ``BUCKETS`` buckets,
loaded with the bulk ``set_many`` path. Between two checkpoints ``UPDATES`` distinct keys
(drawn with a seeded RNG) are incremented; both systems receive exactly the same updates.
After ``WARMUP`` checkpoints, ``MEASURED`` checkpoints of each system are timed.

Systems (both on an :class:`~gic_runtime.state.memory_store.InMemoryStore`, both writing
to a :class:`~gic_runtime.storage.local.LocalObjectStore` under ``bench/scratch/``, which
fsyncs every object, so only the checkpoint strategy differs):

``changelog``
    GIC as built: :class:`~gic_runtime.executor.state_task.StateTask` (the task core of
    Spark's executors: keyed state backend, ``BatchingChangelogWriter``,
    ``HedgingUploader``). The load is one batch whose self-contained checkpoint
    materializes every bucket once (the base); background materialization is configured
    with an interval far longer than the run and a section limit above what the run adds,
    so each measured checkpoint persists only the changelog written since the previous
    one. In real use materialization runs in the background, off the checkpoint path.
``full_snapshot``
    The "no changelog" baseline: every checkpoint takes a consistent view of every bucket
    and uploads its full content in the ``.snap`` format
    (:func:`~gic_runtime.state.snapshot.upload_snapshot`), on the same number of threads
    the task uses for self-contained checkpoints, with the same compression setting as
    materialization.

Bytes are measured from storage: the sizes of the objects that appeared in the system's
directory since its previous checkpoint (for ``changelog`` this includes any pre-emptive
segment uploads between checkpoints). Times are wall-clock until every object the
checkpoint needs is durable: for ``changelog`` from the end of the batch's changes
(``TaskStats.checkpoint_s``), for ``full_snapshot`` from the start of its checkpoint
call. At the end the latest
``changelog`` checkpoint is restored into a fresh backend and every key is compared with
the reference counts; a mismatch raises.

Run: ``.venv/bin/python -m bench.checkpoint_cost``. Writes
``bench/results/checkpoint_cost.json`` and ``.png``.
"""

from __future__ import annotations

import gc
import os
import random
import shutil
import statistics
import time
import uuid
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.common import RESULTS, SCRATCH, SeqOnlyWriter, percentile, write_result
from gic_runtime.coordination.barrier import TaskAck
from gic_runtime.coordination.task_settings import TaskSettings
from gic_runtime.executor.core import TaskContext
from gic_runtime.executor.state_task import StateTask
from gic_runtime.handles import BucketState, SnapshotHandle
from gic_runtime.layout import new_snapshot_uri
from gic_runtime.materialization.scheduler import MaterializationSettings
from gic_runtime.state.backend import KeyedStateBackend
from gic_runtime.state.memory_store import InMemoryStore
from gic_runtime.state.snapshot import parse_snapshot, upload_snapshot
from gic_runtime.storage.local import LocalObjectStore
from gic_runtime.storage.uri import StoreResolver

KEYS = 1_000_000
BUCKETS = 128
UPDATES = 10_000
WARMUP = 3
MEASURED = 30
SEED = 20_240_601
STATE = "count"
MATERIALIZATION_INTERVAL_S = 1e9
"""Far beyond the run: no periodic materialization starts during the measurement."""
MATERIALIZATION_MAX_SECTIONS = 1_000
MATERIALIZATION_CHANGELOG_RATIO = 1_000.0
"""Far more changelog sections and bytes than the run adds: no growth-triggered
materialization either."""
SNAPSHOT_THREADS = 8
"""Upload threads of the full-snapshot baseline (as ``StateTask`` uses for full snapshots)."""
JOB = "bench-checkpoint-cost"
GOAL_BYTES_REDUCTION = 0.95
GOAL_P99_SPEEDUP = 10.0


class DirMeter:
    """Bytes and count of objects that appeared under a directory since the last look."""

    def __init__(self, root: Path) -> None:
        self._root = root
        self._known = self._listing()

    def _listing(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for dirpath, _dirs, files in os.walk(self._root):
            for name in files:
                if not name.startswith(".gic-tmp-"):
                    path = os.path.join(dirpath, name)
                    out[path] = os.path.getsize(path)
        return out

    def new_objects(self) -> tuple[int, int]:
        """``(bytes, objects)`` created since the previous call (deleted ones forgotten)."""
        now = self._listing()
        fresh = [size for path, size in now.items() if path not in self._known]
        self._known = now
        return sum(fresh), len(fresh)


@dataclass
class Series:
    """Measurements of one system (measured checkpoints only)."""

    bytes: list[int] = field(default_factory=list)
    objects: list[int] = field(default_factory=list)
    millis: list[float] = field(default_factory=list)

    def add(self, nbytes: int, objects: int, millis: float) -> None:
        self.bytes.append(nbytes)
        self.objects.append(objects)
        self.millis.append(millis)

    def summary(self) -> dict[str, Any]:
        return {
            "checkpoints": len(self.millis),
            "bytes_uploaded_per_checkpoint": round(statistics.fmean(self.bytes)),
            "bytes_uploaded_per_checkpoint_max": max(self.bytes),
            "objects_per_checkpoint": round(statistics.fmean(self.objects), 2),
            "checkpoint_ms_p50": round(percentile(self.millis, 50), 3),
            "checkpoint_ms_p99": round(percentile(self.millis, 99), 3),
            "checkpoint_ms_mean": round(statistics.fmean(self.millis), 3),
            "checkpoint_ms_max": round(max(self.millis), 3),
        }


def _resolver_for(objects: LocalObjectStore) -> StoreResolver:
    resolver = StoreResolver()
    resolver.register(objects)
    return resolver


class FullSnapshotSystem:
    """Baseline: keyed state without changelog; each checkpoint uploads every bucket."""

    def __init__(self, objects: LocalObjectStore) -> None:
        self.objects = objects
        self.resolver = _resolver_for(objects)
        self.backend = KeyedStateBackend(range(BUCKETS), BUCKETS, InMemoryStore(), SeqOnlyWriter())
        self.counts = self.backend.value_state(STATE)
        self.compress = MaterializationSettings().compress
        self._pool = ThreadPoolExecutor(SNAPSHOT_THREADS, thread_name_prefix="bench-full")
        self.latest: list[SnapshotHandle] = []

    def checkpoint(self) -> list[SnapshotHandle]:
        """Consistent views of every bucket (task thread), then parallel uploads; returns
        when every snapshot is durable. The previous checkpoint's files are then deleted
        (a newer full checkpoint subsumes them)."""
        backend = self.backend
        views = [(b, backend.seq(b), backend.store.snapshot_items(b)) for b in backend.bucket_range]
        root = self.objects.root_uri

        def upload(item: tuple[int, int, Any]) -> SnapshotHandle:
            bucket, seq, view = item
            with view as entries:
                return upload_snapshot(
                    self.resolver,
                    new_snapshot_uri(root, JOB, bucket, epoch=1),
                    entries,
                    bucket=bucket,
                    seq=seq,
                    compress=self.compress,
                )

        handles = list(self._pool.map(upload, views))
        previous, self.latest = self.latest, handles
        return previous

    def forget(self, handles: list[SnapshotHandle]) -> None:
        keys = [self.resolver.resolve(h.uri)[1] for h in handles]
        self.objects.delete_many(keys)

    def close(self) -> None:
        self._pool.shutdown(wait=True)


def _changelog_task(objects: LocalObjectStore) -> StateTask:
    resolver = _resolver_for(objects)
    settings = TaskSettings(
        materialization=MaterializationSettings(
            interval_s=MATERIALIZATION_INTERVAL_S,
            max_sections=MATERIALIZATION_MAX_SECTIONS,
            changelog_ratio=MATERIALIZATION_CHANGELOG_RATIO,
        )
    )
    return StateTask(
        root=objects.root_uri,
        job_id=JOB,
        epoch=1,
        num_buckets=BUCKETS,
        store=InMemoryStore(),
        resolver=resolver,
        settings=settings,
    )


def _timed(fn: Any) -> tuple[Any, float]:
    gc.collect()
    started = time.perf_counter()
    result = fn()
    return result, (time.perf_counter() - started) * 1000.0


def _changelog_batch(task: StateTask, items: list[tuple[int, int]], **kw: Any) -> TaskAck:
    """One batch of the changelog system setting ``items``; the ack's ``checkpoint_s`` is
    the time from the end of the changes until they are durable."""

    def apply(ctx: TaskContext) -> None:
        ctx.backend.value_state(STATE).set_many(items)

    gc.collect()
    ack = task.checkpoint(apply, **kw)
    task.notify_checkpoint_complete(ack.states)
    return ack


def _referenced_bytes(states: Mapping[int, BucketState]) -> dict[str, int]:
    """What a restore of these states reads: snapshot bytes and changelog section bytes."""
    snap = sum(s.snapshot.size for s in states.values() if s.snapshot is not None)
    log = sum(h.length for s in states.values() for h in s.changelog)
    return {"snapshot_bytes": snap, "changelog_bytes": log}


def _verify_changelog_restore(
    states: Mapping[int, BucketState], resolver: StoreResolver, reference: list[int]
) -> dict[str, Any]:
    """Restore ``states`` into a fresh backend and compare every key; raise on mismatch."""
    fresh = KeyedStateBackend(range(BUCKETS), BUCKETS, InMemoryStore(), SeqOnlyWriter())
    started = time.perf_counter()
    summary = fresh.restore(states, resolver)
    restore_s = time.perf_counter() - started
    values = fresh.value_state(STATE).get_many(range(KEYS))
    wrong = [k for k in range(KEYS) if values[k] != reference[k]]
    if wrong or len(summary.restored) != BUCKETS:
        first = wrong[0] if wrong else None
        raise AssertionError(
            f"restore of the latest changelog checkpoint is wrong: {len(wrong)} of {KEYS} keys "
            f"differ (first: key {first}, got "
            f"{values[first] if first is not None else None}, expected "
            f"{reference[first] if first is not None else None}); buckets restored from "
            f"storage: {len(summary.restored)} of {BUCKETS}"
        )
    return {
        "keys_compared": KEYS,
        "mismatches": 0,
        "restore_s": round(restore_s, 3),
        "snapshot_entries_read": summary.snapshot_entries,
        "changes_replayed": summary.replayed,
    }


def _verify_full_snapshot(system: FullSnapshotSystem) -> int:
    """Entries in the latest full checkpoint (checks headers and checksums)."""
    total = 0
    for handle in system.latest:
        store, key = system.resolver.resolve(handle.uri)
        info, _ = parse_snapshot(store.get(key), uri=handle.uri)
        total += info.entries
    if total != KEYS:
        raise AssertionError(f"latest full checkpoint holds {total} entries, expected {KEYS}")
    return total


def _human_bytes(value: float) -> str:
    for unit, scale in (("MB", 1e6), ("kB", 1e3)):
        if value >= scale:
            return f"{value / scale:.2f} {unit}"
    return f"{value:.0f} B"


def _plot(changelog: Mapping[str, Any], full: Mapping[str, Any]) -> Path:
    """Two panels, log scale: bytes per checkpoint and p99 checkpoint time."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = [
        ("bytes_uploaded_per_checkpoint", "Bytes uploaded per checkpoint (mean)", "bytes"),
        ("checkpoint_ms_p99", "Checkpoint time p99 (start to durable)", "ms"),
    ]
    names = ["changelog", "full_snapshot"]
    colors = ["tab:blue", "tab:orange"]
    fig, axes = plt.subplots(1, 2, figsize=(10, 4.2))
    for ax, (metric, title, unit) in zip(axes, panels, strict=True):
        values = [float(changelog[metric]), float(full[metric])]
        bars = ax.bar(names, values, color=colors)
        ax.set_yscale("log")
        ax.set_title(title)
        ax.set_ylabel(f"{unit} (log scale)")
        for bar, value in zip(bars, values, strict=True):
            label = _human_bytes(value) if unit == "bytes" else f"{value:.1f} ms"
            ax.annotate(
                label,
                (bar.get_x() + bar.get_width() / 2, value),
                ha="center",
                va="bottom",
                fontsize=9,
            )
        ax.set_ylim(min(values) / 3, max(values) * 3)
    fig.suptitle(
        f"Checkpoint cost: {KEYS:,} keys, {BUCKETS} buckets, {UPDATES:,} updates per checkpoint"
    )
    fig.tight_layout()
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / "checkpoint_cost.png"
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


@dataclass
class Run:
    """What the measurement loop leaves behind for the report."""

    series: dict[str, Series]
    states: dict[int, BucketState]
    load_s: dict[str, float]
    base_bytes: int
    base_ms: float


def _measure(task: StateTask, cl_root: Path, full: FullSnapshotSystem, reference: list[int]) -> Run:
    """Load both systems, take the base, then run every warm-up and measured round."""
    rng = random.Random(SEED + 1)
    load_s: dict[str, float] = {}
    started = time.perf_counter()
    full.counts.set_many(enumerate(reference))
    load_s["full_snapshot"] = round(time.perf_counter() - started, 2)
    base = _changelog_batch(task, list(enumerate(reference)), self_contained=True)
    load_s["changelog"] = round(base.stats.process_s, 2)
    print(f"loaded {KEYS} keys in {load_s} s", flush=True)

    states, base_ms = base.states, base.stats.checkpoint_s * 1000.0
    base_bytes = _referenced_bytes(states)["snapshot_bytes"]
    print(f"base materialization of {BUCKETS} buckets: {base_ms:.0f} ms, {base_bytes} B")

    cl_meter = DirMeter(cl_root)
    full_meter = DirMeter(full.objects.root)
    series = {"changelog": Series(), "full_snapshot": Series()}
    for round_no in range(WARMUP + MEASURED):
        picked = rng.sample(range(KEYS), UPDATES)
        for k in picked:
            reference[k] += 1
        items = [(k, reference[k]) for k in picked]
        full.counts.set_many(items)
        # Alternate which system goes first so neither always follows the other's garbage.
        for name in ("changelog", "full_snapshot")[:: -1 if round_no % 2 else 1]:
            if name == "changelog":
                ack = _changelog_batch(task, items)
                states, ms = ack.states, ack.stats.checkpoint_s * 1000.0
                nbytes, nobj = cl_meter.new_objects()
            else:
                previous, ms = _timed(full.checkpoint)
                nbytes, nobj = full_meter.new_objects()
                full.forget(previous)
                full_meter.new_objects()
            if round_no >= WARMUP:
                series[name].add(nbytes, nobj, ms)
        if round_no >= WARMUP:
            cl, fs = series["changelog"], series["full_snapshot"]
            print(
                f"checkpoint {round_no - WARMUP + 1:2d}: changelog {cl.bytes[-1]:>9} B "
                f"{cl.millis[-1]:8.1f} ms | full {fs.bytes[-1]:>9} B {fs.millis[-1]:8.1f} ms",
                flush=True,
            )
    mat = task.materialization_stats()
    if mat.started:
        raise AssertionError(
            f"background materialization ran during the measurement ({mat}); raise "
            "MATERIALIZATION_INTERVAL_S or the growth limits"
        )
    return Run(series, dict(states), load_s, base_bytes, base_ms)


def _report(run: Run, task: StateTask, full: FullSnapshotSystem) -> dict[str, Any]:
    uploads = task.uploader.stats()
    cl = run.series["changelog"].summary()
    cl.update(
        {
            "materialization": (
                f"one self-contained checkpoint after loading materialized every bucket "
                f"({run.base_bytes} bytes, {run.base_ms:.0f} ms, not measured); periodic "
                f"materialization interval {MATERIALIZATION_INTERVAL_S:g} s, so none ran "
                "during the measurement (in real use it runs in the background, off the "
                "checkpoint path)"
            ),
            "checkpoint_call": (
                "StateTask.checkpoint() through the task core, timed from the end of the "
                "batch's changes until they are durable (persist changelog + wait)"
            ),
            "load_s": run.load_s["changelog"],
            "segment_uploads": uploads.succeeded,
            "upload_attempts": uploads.attempts,
            "hedges": uploads.hedges,
            "latest_checkpoint_references": _referenced_bytes(run.states),
        }
    )
    fs = run.series["full_snapshot"].summary()
    fs.update(
        {
            "checkpoint_call": (
                f"consistent view of every bucket, then upload_snapshot of each on "
                f"{SNAPSHOT_THREADS} threads, wait for all"
            ),
            "snapshot_compression": "zlib" if full.compress else "none",
            "load_s": run.load_s["full_snapshot"],
        }
    )
    reduction = 1 - cl["bytes_uploaded_per_checkpoint"] / fs["bytes_uploaded_per_checkpoint"]
    speedup = fs["checkpoint_ms_p99"] / cl["checkpoint_ms_p99"]
    return {
        "workload": {
            "keys": KEYS,
            "buckets": BUCKETS,
            "state": "value state, one int count per key (msgpack)",
            "updates_per_checkpoint": UPDATES,
            "update": "increment the count of distinct keys drawn with a seeded RNG",
            "seed": f"{SEED} (initial counts), {SEED + 1} (updated keys)",
            "warmup_checkpoints": WARMUP,
            "measured_checkpoints": MEASURED,
            "kv_store": "InMemoryStore (both systems)",
            "object_store": "LocalObjectStore on local disk (fsync per object)",
            "bytes_measured_as": (
                "sizes of objects that appeared in the system's storage directory since its "
                "previous checkpoint"
            ),
            "time_measured_as": (
                "wall time until every object is durable: changelog from the end of the "
                "batch's changes (TaskStats.checkpoint_s), full_snapshot from the start of "
                "its checkpoint call; gc.collect() before each batch, outside the timing"
            ),
            "percentiles": (
                f"nearest rank over {MEASURED} checkpoints (so p99 is the slowest one)"
            ),
        },
        "systems": {"changelog": cl, "full_snapshot": fs},
        "bytes_reduction": round(reduction, 5),
        "p99_speedup": round(speedup, 2),
        "goals": {
            "bytes_reduction_at_least": GOAL_BYTES_REDUCTION,
            "bytes_reduction_met": reduction >= GOAL_BYTES_REDUCTION,
            "p99_speedup_at_least": GOAL_P99_SPEEDUP,
            "p99_speedup_met": speedup >= GOAL_P99_SPEEDUP,
        },
    }


def main() -> None:
    started = time.perf_counter()
    scratch = SCRATCH / f"checkpoint_cost-{uuid.uuid4().hex[:12]}"
    rng = random.Random(SEED)
    reference = [rng.randrange(1_000_000) for _ in range(KEYS)]
    task: StateTask | None = None
    full: FullSnapshotSystem | None = None
    try:
        cl_objects = LocalObjectStore(scratch / "changelog")
        task = _changelog_task(cl_objects)
        full = FullSnapshotSystem(LocalObjectStore(scratch / "full_snapshot"))
        run = _measure(task, cl_objects.root, full, reference)
        result = _report(run, task, full)
        result["restore_check"] = _verify_changelog_restore(
            run.states, _resolver_for(cl_objects), reference
        )
        result["systems"]["full_snapshot"]["latest_checkpoint_entries"] = _verify_full_snapshot(
            full
        )
        print(f"restore check: {result['restore_check']}")
    finally:
        if task is not None:
            task.close()
        if full is not None:
            full.close()
        shutil.rmtree(scratch, ignore_errors=True)
    result["run_s"] = round(time.perf_counter() - started, 1)
    print(f"wrote {write_result('checkpoint_cost', result)}")
    systems = result["systems"]
    print(f"wrote {_plot(systems['changelog'], systems['full_snapshot'])}")
    print(
        f"bytes_reduction {result['bytes_reduction']}, p99_speedup {result['p99_speedup']}, "
        f"goals {result['goals']}"
    )


if __name__ == "__main__":
    main()
