"""GIC's jobs for the event-time workloads, their output fingerprints and restore samples.

Processors (option ``processor`` of :func:`bench.streaming.gic_runner.run_gic`):

``per_key`` (W3)
    ``process(track, ..., on_timer=close)``: the logic of ``examples/sessions.py`` with a
    long key: each key's rows extend its session (or close it after more than the gap),
    its event-time timer moves to ``end + gap``; the timer emits the session.
``batches`` (W3)
    the same sessions vectorized: ``process_batches(track, ..., on_timers=close)``, one
    call per task and batch, min/max/count per key from Arrow's ``group_by``, state and
    timers through ``get_many`` / ``set_many`` / ``register_many``. Equivalent because a
    batch spans less than the gap (see :mod:`bench.streaming.timed_workloads`).
``window`` (W4)
    ``window(tumbling("1 minute"), n=count())``.
``ttl`` / ``no_ttl`` (W5)
    ``process_batches``: a count per key in a value state, with the workload's TTL or
    without; the output is one row per key whose entry this batch created (so the live
    entries after batch ``b`` are the rows written so far minus the entries expired).

Runs in the system's own process (see :mod:`bench.streaming.runner`).
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc

from bench.streaming import outputs, timed_workloads
from bench.streaming.records import BenchmarkError
from bench.streaming.workloads import SESSIONS, TTL_CHURN, WINDOWED_COUNT, WorkloadSpec

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from gic_runtime.checkpoint.manifest import StoredManifest
    from gic_runtime.processing import KeyState, StateAccess, Timer
    from gic_runtime.spark import GICJob, StatefulStream

PROCESSORS = {
    SESSIONS: ("per_key", "batches"),
    WINDOWED_COUNT: ("window",),
    TTL_CHURN: ("ttl", "no_ttl"),
}
TIMESTAMP = pa.timestamp("us", tz="UTC")
SESSION_SCHEMA = pa.schema(
    [("key", pa.int64()), ("start", TIMESTAMP), ("end", TIMESTAMP), ("events", pa.int64())]
)
NEW_KEYS_OUTPUT = "key long"


def _session_table(rows: list[tuple[int, int, int, int]]) -> pa.Table:
    cols: list[Sequence[int]] = list(zip(*rows, strict=True)) if rows else [[], [], [], []]
    return pa.table(
        {
            "key": pa.array(cols[0], pa.int64()),
            "start": pa.array(cols[1], pa.int64()).cast(TIMESTAMP),
            "end": pa.array(cols[2], pa.int64()).cast(TIMESTAMP),
            "events": pa.array(cols[3], pa.int64()),
        }
    )


def per_key_sessions(gap_us: int) -> tuple[Callable[..., Any], Callable[..., Any]]:
    """The per-key function and timer handler (``examples/sessions.py``'s logic)."""
    from gic_runtime.spark import from_micros, to_micros

    def row(key: int, s: list[int]) -> dict[str, Any]:
        return {"key": key, "start": from_micros(s[0]), "end": from_micros(s[1]), "events": s[2]}

    def track(key: int, rows: pa.Table, state: KeyState) -> Iterator[dict[str, Any]]:
        session, timers = state.value("session"), state.timers
        current: list[int] | None = session.get()
        if current is not None:
            timers.delete(current[1] + gap_us)
        for t in sorted(to_micros(ts) for ts in rows.column("ts").to_pylist()):
            if current is not None and t > current[1] + gap_us:
                yield row(key, current)
                current = None
            if current is None:
                current = [t, t, 0]
            current = [min(current[0], t), max(current[1], t), current[2] + 1]
        assert current is not None  # a key comes with at least one row
        session.set(current)
        timers.register(current[1] + gap_us)

    def close(key: int, timer: Timer, state: KeyState) -> list[dict[str, Any]]:
        session = state.value("session")
        current = session.get()
        session.clear()
        return [] if current is None else [row(key, current)]

    return track, close


def batch_sessions(gap_us: int) -> tuple[Callable[..., Any], Callable[..., Any]]:
    """The vectorized function and timer handler of the same sessions."""

    def track(table: pa.Table, states: StateAccess) -> pa.Table:
        ts = pc.cast(table.column("ts"), TIMESTAMP).cast(pa.int64())
        grouped = (
            pa.table({"key": table.column("key"), "t": ts})
            .group_by("key", use_threads=False)
            .aggregate([("t", "min"), ("t", "max"), ("t", "count")])
        )
        keys = grouped.column("key").to_pylist()
        session, timers = states.value("session"), states.timers
        closed: list[tuple[int, int, int, int]] = []
        updated: list[tuple[int, list[int]]] = []
        ats: list[int] = []
        for key, lo, hi, n, before in zip(
            keys,
            grouped.column("t_min").to_pylist(),
            grouped.column("t_max").to_pylist(),
            grouped.column("t_count").to_pylist(),
            session.get_many(keys),
            strict=True,
        ):
            current = [lo, hi, n]
            if before is not None:
                timers.delete(key, before[1] + gap_us, "event")
                if lo > before[1] + gap_us:
                    closed.append((key, *before))
                else:
                    current = [min(before[0], lo), max(before[1], hi), before[2] + n]
            updated.append((key, current))
            ats.append(current[1] + gap_us)
        session.set_many(updated)
        timers.register_many(keys, ats, "event")
        return _session_table(closed)

    def close(fired: pa.Table, states: StateAccess) -> pa.Table:
        keys = fired.column("key").to_pylist()
        session = states.value("session")
        rows = []
        for key, current in zip(keys, session.get_many(keys), strict=True):
            session.clear(key)
            if current is not None:
                rows.append((key, *current))
        return _session_table(rows)

    return track, close


def count_new_keys(ttl: str | None) -> Callable[[pa.Table, StateAccess], pa.Table]:
    """W5's batch function: a count per key (with ``ttl`` in event time, or none); returns
    the keys whose entry it created."""

    def count(table: pa.Table, states: StateAccess) -> pa.Table:
        grouped = table.group_by("key", use_threads=False).aggregate([("key", "count")])
        keys = grouped.column("key").to_pylist()
        state = (
            states.value("count", ttl=ttl, ttl_by=timed_workloads.TTL_BY)
            if ttl
            else states.value("count")
        )
        before = state.get_many(keys)
        counts = grouped.column("key_count").to_pylist()
        state.set_many((k, (b or 0) + n) for k, b, n in zip(keys, before, counts, strict=True))
        new = [k for k, b in zip(keys, before, strict=True) if b is None]
        return pa.table({"key": pa.array(new, pa.int64())})

    return count


def stateful(
    job: GICJob, spark: SparkSession, workload: WorkloadSpec, processor: str
) -> StatefulStream:
    """The GIC query of an event-time workload with ``processor``."""
    from gic_runtime.spark import count, tumbling

    if processor not in PROCESSORS.get(workload.kind, ()):
        raise BenchmarkError(
            f"processor {processor!r} does not fit workload {workload.kind!r}; choose from "
            f"{PROCESSORS.get(workload.kind, ())}"
        )
    src = timed_workloads.source(spark, workload).select("key", "ts")
    if workload.kind == SESSIONS:
        keyed = job.keyed(
            src, key="key", event_time="ts", watermark=timed_workloads.SESSION_WATERMARK
        )
        gap_us = timed_workloads.SESSION_GAP_MS * 1000
        if processor == "per_key":
            track, close = per_key_sessions(gap_us)
            return keyed.process(track, timed_workloads.SESSION_OUTPUT, on_timer=close)
        fn, fire = batch_sessions(gap_us)
        return keyed.process_batches(fn, timed_workloads.SESSION_OUTPUT, on_timers=fire)
    if workload.kind == WINDOWED_COUNT:
        keyed = job.keyed(
            src, key="key", event_time="ts", watermark=timed_workloads.WINDOW_WATERMARK
        )
        return keyed.window(tumbling(timed_workloads.WINDOW), n=count())
    keyed = job.keyed(src, key="key", event_time="ts", watermark="0 seconds")
    ttl = timed_workloads.TTL if processor == "ttl" else None
    return keyed.process_batches(count_new_keys(ttl), NEW_KEYS_OUTPUT)


def output_fingerprint(path: Path, batches: int) -> dict[str, Any]:
    """The fingerprint of what the Parquet sink at ``path`` committed for batches < N."""
    from gic_runtime.sinks.files import read_file_sink

    table = read_file_sink(str(path))
    if table is None:
        return outputs.fingerprint([], [], batches)
    return outputs.table_fingerprint(table, batches)


STATE_KINDS = frozenset((b"v", b"m", b"l", b"V", b"M", b"L"))
"""Store key kinds of state entries (values, map entries, lists, with or without TTL);
the others are timers, their time index and the TTL expiry index
(:mod:`gic_runtime.state.keys`)."""


class RestoreSampler:
    """Every ``every`` batches, the time to rebuild the whole latest checkpoint from
    storage into an empty in-memory store, in this (the driver's) process, single
    threaded, right after the batch (inside its ``on_batch`` callback); and the entries
    the rebuilt state holds (``state_entries``: :data:`STATE_KINDS`; ``other_entries``:
    timers and indexes)."""

    def __init__(self, storage: str, every: int) -> None:
        self.storage = storage
        self.every = every
        self.samples: dict[int, dict[str, float]] = {}

    def batch_done(self, batch_id: int, stored: StoredManifest) -> None:
        if self.every <= 0 or (batch_id + 1) % self.every:
            return
        from gic_runtime.cli.common import make_resolver
        from gic_runtime.state.memory_store import InMemoryStore
        from gic_runtime.state.restore import restore_range

        store = InMemoryStore()
        began = time.perf_counter()
        summary = restore_range(
            store, list(stored.manifest.buckets.values()), make_resolver(self.storage)
        )
        elapsed = (time.perf_counter() - began) * 1000
        kinds = Counter(k[:1] for b in store.buckets() for k, _ in store.snapshot_items(b))
        self.samples[batch_id] = {
            "restore_ms": elapsed,
            "restore_snapshot_entries": float(summary.snapshot_entries),
            "restore_replayed": float(summary.replayed),
            "state_entries": float(sum(n for k, n in kinds.items() if k in STATE_KINDS)),
            "other_entries": float(sum(n for k, n in kinds.items() if k not in STATE_KINDS)),
        }
        store.close()
