"""GIC's batch records: what each checkpoint cost, from the runtime's reports and manifests.

:func:`records` turns, for every micro-batch of a run, the runtime's ``BatchReport``, what
:class:`ManifestTracker` took from the manifest it committed, Spark's progress of the
batch and (optionally) the stateful stage's task statistics into
:class:`~bench.streaming.records.BatchRecord` values; the ``*_DEFINITION`` constants say
what each field means and go into the result notes.

The tracker keeps the latest manifest only: a run's driver memory is part of what the
benchmarks measure, and holding every batch's manifest (a few hundred KB of objects each
at 256 buckets) made GIC's driver grow with the run's length.
:func:`capture_task_stats` collects the task statistics by wrapping
``Driver._run_stage`` in this process.

Runs inside the system's own process (see :mod:`bench.streaming.runner`).
:func:`capture_task_stats` patches a class attribute: one run per process at a time.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from bench.streaming.records import BatchRecord, BenchmarkError

if TYPE_CHECKING:
    from gic_runtime.checkpoint.manifest import StoredManifest
    from gic_runtime.coordination.barrier import TaskStats
    from gic_runtime.spark import BatchReport

SPARK_DURATIONS = {
    "addBatch": "add_batch_ms",
    "walCommit": "wal_commit_ms",
    "commitOffsets": "commit_offsets_ms",
    "queryPlanning": "query_planning_ms",
    "getBatch": "get_batch_ms",
    "latestOffset": "latest_offset_ms",
}
"""Spark's progress durations recorded in ``parts`` (Spark name -> part name)."""

BATCH_MS_DEFINITION = (
    "durationMs.triggerExecution of the GIC streaming query (the whole micro-batch, wall "
    "time, as for the Spark baselines): Spark's offset log, planning, the foreachBatch hook "
    "(stateful stage, manifest, publish, status record) and Spark's commit log. "
    "parts.gic_batch_ms is the runtime's BatchReport.batch_ms (the foreachBatch hook only)"
)
COMMIT_MS_DEFINITION = (
    "BatchReport.commit_ms, the runtime's definition: the slowest state task's changelog "
    "flush (end of processing until every change is durable; with full_snapshots this "
    "includes uploading every bucket's snapshot) + the manifest write. Spark's own offset "
    "and commit log writes (parts.wal_commit_ms, parts.commit_offsets_ms) are not included: "
    "the manifest is the checkpoint's source of truth"
)
BYTES_DEFINITION = (
    "bytes written to checkpoint storage for checkpoint N: the changelog segments its tasks "
    "uploaded (BatchReport.changelog_bytes, referenced by the manifest or not: with "
    "full_snapshots they are uploaded but not referenced), the snapshots manifest N "
    "references that manifest N-1 did not (synchronous full snapshots and adopted background "
    "materializations), and manifest N itself (parts.manifest_bytes: "
    "BatchReport.manifest_bytes, the bytes the driver wrote). Not "
    "counted: the status record rewritten every batch, Spark's offsets and commits logs "
    "(local disk), background snapshots no manifest of the run adopted"
)
LOCAL_HIT_DEFINITION = (
    "per batch local_hits / (local_hits + restored) from BatchReport (buckets served from "
    "the executor-local copy vs. restored from storage; empty buckets count for neither; "
    "1.0 when no bucket had state)"
)


@dataclass
class StageTimes:
    """The stateful stage of one batch: its wall time and every task's statistics."""

    stage_ms: float
    stats: list[TaskStats]


@contextlib.contextmanager
def capture_task_stats() -> Iterator[dict[int, StageTimes]]:
    """Per batch id: the stateful stage's wall time and every task's stats, taken from
    the acks the driver collects. Wraps ``Driver._run_stage`` in this process only; when
    the runtime has no such method the mapping simply stays empty."""
    from gic_runtime.spark.driver import Driver

    seen: dict[int, StageTimes] = {}
    original: Callable[..., Any] | None = getattr(Driver, "_run_stage", None)
    if original is None:
        yield seen
        return
    wrapped_original = original

    def wrapped(self: Any, df: Any, barrier: Any) -> Any:
        began = time.perf_counter()
        acks = wrapped_original(self, df, barrier)
        elapsed = (time.perf_counter() - began) * 1000
        seen[int(barrier.checkpoint_id)] = StageTimes(elapsed, [a.stats for a in acks])
        return acks

    setattr(Driver, "_run_stage", wrapped)  # noqa: B010 - a method, assigned on purpose
    try:
        yield seen
    finally:
        setattr(Driver, "_run_stage", wrapped_original)  # noqa: B010


def snapshots(stored: StoredManifest | None) -> dict[str, int]:
    """Snapshot URIs a manifest references, with their sizes."""
    if stored is None:
        return {}
    states = stored.manifest.buckets.values()
    return {st.snapshot.uri: st.snapshot.size for st in states if st.snapshot is not None}


def buckets_with_state(stored: StoredManifest | None) -> int:
    """Buckets the manifest records with any change (seq > 0)."""
    if stored is None:
        return 0
    return sum(1 for state in stored.manifest.buckets.values() if state.seq > 0)


def local_hit_ratio(parts: Mapping[str, float]) -> float | None:
    """The batch's local-hit ratio from its parts (see :data:`LOCAL_HIT_DEFINITION`)."""
    if "local_hits" not in parts or "restored" not in parts:
        return None
    used = parts["local_hits"] + parts["restored"]
    return parts["local_hits"] / used if used > 0 else 1.0


def _task_parts(stage: StageTimes, commit_ms: float) -> dict[str, float]:
    """The stage's wall time and the slowest task's phases (ms), plus task counters."""
    stats = stage.stats
    slowest_flush = max(s.checkpoint_s for s in stats) * 1000
    return {
        "stage_ms": stage.stage_ms,
        "manifest_ms": max(0.0, commit_ms - slowest_flush),
        "task_process_ms_max": max(s.process_s for s in stats) * 1000,
        "task_checkpoint_ms_max": slowest_flush,
        "task_total_ms_max": max(s.total_s for s in stats) * 1000,
        "task_other_ms_max": max(s.total_s - s.process_s - s.checkpoint_s for s in stats) * 1000,
        "changes": float(sum(s.changes for s in stats)),
        "materializations_started": float(sum(s.materializations_started for s in stats)),
        "worker_pids": float(len({s.pid for s in stats})),
    }


@dataclass(frozen=True)
class ManifestFacts:
    """What a batch's record needs of the manifest the batch committed."""

    new_snapshot_bytes: int
    """Bytes of the snapshots it references that the previous batch's manifest did not."""
    state_snapshot_bytes: int
    """Bytes of every snapshot it references."""
    manifest_bytes: int
    """Bytes of the manifest itself (``BatchReport.manifest_bytes``)."""


@dataclass
class ManifestTracker:
    """Takes each batch's :class:`ManifestFacts` as the batch lands, in commit order.

    Invariant: holds one manifest, the latest (:attr:`latest`), and one snapshot map,
    whatever the run's length. A run that resumes a checkpoint starts from it
    (:meth:`resume_from`), so its first batch counts as new only the snapshots that
    checkpoint did not reference, as every later batch does."""

    facts: dict[int, ManifestFacts] = field(default_factory=dict)
    latest: StoredManifest | None = None
    _previous: dict[str, int] = field(default_factory=dict)

    def resume_from(self, stored: StoredManifest) -> None:
        """Take ``stored``, the checkpoint a restarted run resumed, as the previous batch's
        manifest (before any batch was added)."""
        if self.latest is not None:
            raise BenchmarkError(
                f"cannot resume from checkpoint {stored.checkpoint_id}: the tracker already "
                f"took batch {self.latest.checkpoint_id}"
            )
        self._previous = snapshots(stored)
        self.latest = stored

    def add(self, report: BatchReport, stored: StoredManifest) -> None:
        """Record batch ``report.batch_id``, which committed ``stored``."""
        if report.manifest_bytes <= 0:
            raise BenchmarkError(f"batch {report.batch_id}: the runtime reported no manifest bytes")
        current = snapshots(stored)
        new = sum(n for uri, n in current.items() if uri not in self._previous)
        self.facts[report.batch_id] = ManifestFacts(
            new_snapshot_bytes=new,
            state_snapshot_bytes=sum(current.values()),
            manifest_bytes=report.manifest_bytes,
        )
        self._previous = current
        self.latest = stored


def record(
    report: BatchReport,
    facts: ManifestFacts,
    progress: Mapping[str, Any],
    stage: StageTimes | None,
) -> BatchRecord:
    """The record of one batch (see the module's definitions)."""
    new_snapshots = facts.new_snapshot_bytes
    manifest_bytes = facts.manifest_bytes
    durations = progress["durationMs"]
    parts: dict[str, float] = {
        "gic_batch_ms": report.batch_ms,
        **{part: float(durations.get(name, 0)) for name, part in SPARK_DURATIONS.items()},
        "changelog_bytes": float(report.changelog_bytes),
        "snapshot_bytes": float(report.snapshot_bytes),
        "adopted_snapshot_bytes": float(max(0, new_snapshots - report.snapshot_bytes)),
        "manifest_bytes": float(manifest_bytes),
        "local_hits": float(report.local_hits),
        "restored": float(report.restored),
        "selected": float(report.selected),
        "empty": float(report.empty),
        "materializations_adopted": float(report.materializations_adopted),
        "rows_out": float(report.rows_out),
        "timers_fired": float(report.timers_fired),
        "expired": float(report.expired),
        "late_rows": float(report.late_rows),
        "state_snapshot_bytes": float(facts.state_snapshot_bytes),
    }
    parts["local_hit_ratio"] = local_hit_ratio(parts) or 0.0
    if stage is not None and stage.stats:
        parts.update(_task_parts(stage, report.commit_ms))
    return BatchRecord(
        batch_id=report.batch_id,
        rows=report.rows_in,
        batch_ms=float(durations["triggerExecution"]),
        commit_ms=report.commit_ms,
        bytes=report.changelog_bytes + new_snapshots + manifest_bytes,
        parts=parts,
    )


def records(
    total: int,
    reports: Sequence[BatchReport],
    manifests: ManifestTracker,
    progress: Mapping[int, Mapping[str, Any]],
    *,
    stages: Mapping[int, StageTimes],
    stop_reason: str | None,
) -> list[BatchRecord]:
    """Records of ``total`` consecutive batches from the first one the run checkpointed."""
    by_id = {r.batch_id: r for r in reports if r.batch_id in manifests.facts}
    first = min(by_id, default=0)
    wanted = range(first, first + total)
    missing = [b for b in wanted if b not in by_id or b not in progress]
    if missing:
        raise BenchmarkError(
            f"GIC reported no checkpoint or Spark no progress for micro-batches {missing[:10]} "
            f"of {first}..{first + total - 1}; the query stopped early "
            f"({stop_reason or 'no stop reason'}; see the system's log)"
        )
    return [record(by_id[b], manifests.facts[b], progress[b], stages.get(b)) for b in wanted]
