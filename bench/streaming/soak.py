"""Soak: GIC and Spark's best state store on W1 for hundreds of micro-batches.

Does a long-running job stay as fast as a young one, do its checkpoints stay small, and
how does it compare with Spark's store through the same run? Two runs, one after the
other, each in its own process and JVM, on the W1 keyed count for :data:`BATCHES`
micro-batches (``GIC_BENCH_SOAK_BATCHES``), in ``local[2]`` or the mode named by
``GIC_BENCH_SOAK_MODE`` (see :mod:`bench.streaming.modes`):

``gic``
    every materialization setting at the runtime's default (nothing overridden);
``spark_hdfs`` (``GIC_BENCH_SOAK_SPARK``; ``none`` skips it)
    Spark's fastest store in W1, with Spark's default retention
    (``minBatchesToRetain``), as a user runs it.

Per batch each records rows/s, batch time and the commit time with the offset and commit
logs (:func:`bench.streaming.repeats.commit_with_logs`, the same for both), GIC the
manifest file's size, and both the bytes under their storage (GIC's storage root, Spark's
checkpoint directory) after **every** batch (a background walk, off the batch's
critical path; when a walk takes longer than a batch, it is filed under the latest batch
that ended). At the end GIC's state snapshot size is the sum of the snapshots the last
manifest references (with how many buckets have one).

Windows are steady ones: :data:`STEADY` (batches 100-149, after warm-up and once the
key space is full: 500,000 keys, 100,000 rows per batch) against the last
:data:`LATE` batches. Goals (:func:`soak_goals`, GIC; each met / not met / null):

* commit p99 (with logs) of the last 100 batches <= 1.5x that of batches 100-149;
* rows/s of the last 100 batches >= 0.9x that of batches 100-149;
* every manifest <= 256 KiB;
* stored bytes (largest per-batch sample) <= 3x the state's snapshot size.

Beside them, GIC against Spark in the last 100 batches (rows/s, commit p99, stored
bytes: median and largest sample).

Quick mode (``GIC_BENCH_QUICK=1``): 40 batches, windows 10-19 and the last 10; the
state's snapshots may not exist yet then (default interval 120 s), so that goal is null.

Writes ``soak.json`` (per-batch columns per system, windows, goals) and ``soak.png``.
"""

from __future__ import annotations

import json
import os
import statistics
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench import common
from bench.streaming import gic_records, harness, modes, repeats, runner, spark_stores
from bench.streaming.records import BatchRecord, BenchmarkError, BenchParams, RunResult
from bench.streaming.workloads import keyed_count

NAME = "soak"
BATCHES = 400
STEADY = (100, 150)
LATE = 100
STORED_EVERY = 1
SPARK_ENV = "GIC_BENCH_SOAK_SPARK"
SPARK_DEFAULT = "spark_hdfs"
GOAL_COMMIT_P99_GROWTH = 1.5
GOAL_THROUGHPUT_KEPT = 0.9
GOAL_MANIFEST_BYTES = 256 * 1024
GOAL_STORED_VS_SNAPSHOT = 3.0
STORED_KINDS = ("snapshots", "changelog", "checkpoints")
"""The kinds of GIC's stored bytes shown apart (``jobs/<job>/<kind>/``); the rest is summed."""
SPARK_KINDS = ("state", "offsets", "commits")
"""The kinds of Spark's stored bytes shown apart (top-level directories)."""


@dataclass(frozen=True)
class SoakPlan:
    """How many batches, and which ones are compared."""

    batches: int
    steady: tuple[int, int]
    """Batch ids ``[start, end)`` of the steady young job's window."""
    late: int
    """The last ``late`` batches are the old job's window."""
    stored_every: int

    def __post_init__(self) -> None:
        start, end = self.steady
        if not 0 <= start < end <= self.batches - self.late or self.late < 1:
            raise BenchmarkError(
                f"soak windows do not fit: {self.batches} batches, steady {self.steady}, late "
                f"{self.late}; raise GIC_BENCH_SOAK_BATCHES"
            )


def plan_from_env(environ: Mapping[str, str] = os.environ, quick: bool = False) -> SoakPlan:
    """The plan: 400 batches, windows 100-149 and the last 100, storage sampled every
    batch (quick: 40, 10-19 and the last 10)."""
    raw = environ.get("GIC_BENCH_SOAK_BATCHES", "")
    if quick:
        return SoakPlan(int(raw or 40), (10, 20), 10, STORED_EVERY)
    return SoakPlan(int(raw or BATCHES), STEADY, LATE, STORED_EVERY)


def spark_from_env(environ: Mapping[str, str] = os.environ) -> str | None:
    """The Spark store that runs beside GIC (None: ``GIC_BENCH_SOAK_SPARK=none``)."""
    name = environ.get(SPARK_ENV, "").strip() or SPARK_DEFAULT
    if name == "none":
        return None
    if name not in spark_stores.PROVIDERS:
        raise BenchmarkError(
            f"{SPARK_ENV}={name!r}: choose one of {sorted(spark_stores.PROVIDERS)} or none"
        )
    return name


def _commit(record: BatchRecord, kind: str) -> float:
    return repeats.commit_with_logs(record, kind)


def window(records: Sequence[BatchRecord], kind: str = "gic") -> dict[str, Any]:
    """Throughput, commit time with logs and batch time of a window of batches, and the
    bytes stored in it (median and largest sample)."""
    commit = [_commit(r, kind) for r in records]
    batch = [r.batch_ms for r in records]
    stored = [r.parts["stored_bytes"] for r in records if "stored_bytes" in r.parts]
    total_s = sum(batch) / 1000
    return {
        "batches": [records[0].batch_id, records[-1].batch_id] if records else [],
        "rows_per_s": round(sum(r.rows for r in records) / total_s, 1) if total_s else 0.0,
        "commit_with_logs_ms_p50": common.percentile(commit, 50),
        "commit_with_logs_ms_p99": common.percentile(commit, 99),
        "batch_ms_p50": common.percentile(batch, 50),
        "stored_bytes_p50": common.percentile(stored, 50) if stored else None,
        "stored_bytes_max": max(stored, default=None),
    }


def columns(
    records: Sequence[BatchRecord], kind: str = "gic", kinds: Sequence[str] = STORED_KINDS
) -> dict[str, list[Any]]:
    """Per-batch figures as columns (``None`` where a batch has no sample)."""

    def part(r: BatchRecord, name: str) -> float | None:
        return r.parts.get(name)

    return {
        "batch_id": [r.batch_id for r in records],
        "batch_ms": [r.batch_ms for r in records],
        "commit_ms": [r.commit_ms for r in records],
        "commit_with_logs_ms": [_commit(r, kind) for r in records],
        "rows_per_s": [round(r.rows / r.batch_ms * 1000, 1) if r.batch_ms else 0 for r in records],
        "bytes": [r.bytes for r in records],
        "manifest_bytes": [part(r, "manifest_bytes") for r in records],
        "stored_bytes": [part(r, "stored_bytes") for r in records],
        **{f"stored_{k}_bytes": [part(r, f"stored_{k}_bytes") for r in records] for k in kinds},
        "local_hit_ratio": [gic_records.local_hit_ratio(r.parts) for r in records],
    }


def split(records: Sequence[BatchRecord], plan: SoakPlan) -> tuple[list[BatchRecord], ...]:
    """The steady and the late window's records."""
    by_id = {r.batch_id: r for r in records}
    steady = [by_id[b] for b in range(*plan.steady) if b in by_id]
    return steady, list(records[-plan.late :])


def summarize_soak(
    records: Sequence[BatchRecord], plan: SoakPlan, state_snapshot_bytes: int
) -> dict[str, Any]:
    """GIC's windows, manifest and storage figures of a soak run."""
    steady, late = split(records, plan)
    manifests = [r.parts["manifest_bytes"] for r in records if "manifest_bytes" in r.parts]
    stored = [r.parts["stored_bytes"] for r in records if "stored_bytes" in r.parts]
    peak = max(
        (r for r in records if "stored_bytes" in r.parts),
        key=lambda r: r.parts["stored_bytes"],
        default=None,
    )
    hits = [h for r in records if (h := gic_records.local_hit_ratio(r.parts)) is not None]
    return {
        "steady": window(steady),
        "late": window(late),
        "manifest_bytes_max": max(manifests, default=None),
        "manifest_bytes_last": manifests[-1] if manifests else None,
        "stored_bytes_max": max(stored, default=None),
        "stored_bytes_last": stored[-1] if stored else None,
        "stored_samples": len(stored),
        "stored_at_peak": None if peak is None else stored_kinds(peak, state_snapshot_bytes),
        "state_snapshot_bytes": state_snapshot_bytes,
        "local_hit_ratio_mean": round(statistics.fmean(hits), 4) if hits else None,
    }


def summarize_spark(records: Sequence[BatchRecord], plan: SoakPlan) -> dict[str, Any]:
    """The Spark store's windows and storage figures."""
    steady, late = split(records, plan)
    stored = [r.parts["stored_bytes"] for r in records if "stored_bytes" in r.parts]
    return {
        "steady": window(steady, "spark_baseline"),
        "late": window(late, "spark_baseline"),
        "stored_bytes_max": max(stored, default=None),
        "stored_bytes_last": stored[-1] if stored else None,
        "stored_samples": len(stored),
    }


def stored_kinds(record: BatchRecord, state_snapshot_bytes: int) -> dict[str, Any]:
    """What the stored bytes of one sample are made of: bytes per kind and each as a
    multiple of the state's snapshot size."""
    kinds = {k: r for k in STORED_KINDS if (r := record.parts.get(f"stored_{k}_bytes"))}
    known = sum(kinds.values())
    other = record.parts["stored_bytes"] - known
    if other:
        kinds["rest"] = other
    return {
        "batch_id": record.batch_id,
        "bytes": kinds,
        "vs_state_snapshot": {
            k: common.ratio(v, state_snapshot_bytes or None) for k, v in kinds.items()
        },
    }


def soak_goals(summary: Mapping[str, Any]) -> dict[str, Any]:
    """The soak goals, each with its ratio and met (True / False / None: not measurable)."""
    steady, late = summary["steady"], summary["late"]
    growth = common.ratio(late["commit_with_logs_ms_p99"], steady["commit_with_logs_ms_p99"])
    kept = common.ratio(late["rows_per_s"], steady["rows_per_s"])
    manifest = summary["manifest_bytes_max"]
    stored = common.ratio(summary["stored_bytes_max"], summary["state_snapshot_bytes"] or None)
    return {
        **common.goal(
            "commit_p99_late_vs_steady",
            growth,
            at_most=GOAL_COMMIT_P99_GROWTH,
            met="commit_p99_met",
        ),
        **common.goal(
            "throughput_late_vs_steady", kept, at_least=GOAL_THROUGHPUT_KEPT, met="throughput_met"
        ),
        "manifest_bytes_at_most": GOAL_MANIFEST_BYTES,
        "manifest_bytes_max": manifest,
        "manifest_met": None if manifest is None else manifest <= GOAL_MANIFEST_BYTES,
        **common.goal(
            "stored_vs_state_snapshot", stored, at_most=GOAL_STORED_VS_SNAPSHOT, met="stored_met"
        ),
        "how": (
            "steady = the plan's steady window (after warm-up, key space full), late = the "
            "last batches of the plan; commit: late p99 / steady p99 of the commit time with "
            "the offset and commit logs; throughput: late rows/s / steady rows/s (rows / sum "
            "of batch_ms); manifest: largest manifest file of the run; stored: largest "
            "per-batch sample of the bytes under the storage root / the snapshot bytes the "
            "last manifest references (null when no snapshot exists yet)"
        ),
    }


def versus_spark(gic: Mapping[str, Any], spark: Mapping[str, Any] | None) -> dict[str, Any]:
    """GIC over Spark in the late window (informational; null without Spark)."""
    if spark is None:
        return {"spark": None}
    g, s = gic["late"], spark["late"]
    return {
        "rows_per_s": common.ratio(g["rows_per_s"], s["rows_per_s"]),
        "commit_with_logs_ms_p99": common.ratio(
            g["commit_with_logs_ms_p99"], s["commit_with_logs_ms_p99"]
        ),
        "stored_bytes_p50": common.ratio(g["stored_bytes_p50"], s["stored_bytes_p50"]),
        "stored_bytes_max": common.ratio(g["stored_bytes_max"], s["stored_bytes_max"]),
        "how": "gic / the Spark store, each over the last batches of its own run",
    }


def plot(
    path: Path,
    title: str,
    cols: Mapping[str, Mapping[str, Sequence[Any]]],
    state_bytes: int,
    plan: SoakPlan,
) -> Path:
    """Commit time with logs, throughput, manifest bytes and stored bytes over the
    batches for each system (``cols``: system -> columns), the compared windows shaded."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, 2, figsize=(13, 7.5), sharex=True)
    panels = [
        (axes[0][0], "commit_with_logs_ms", "Commit ms per batch (logs included)", 1.0),
        (axes[0][1], "rows_per_s", "Rows/s per batch", 1.0),
        (axes[1][0], "manifest_bytes", "GIC manifest file (KiB)", 1 / 1024),
        (axes[1][1], "stored_bytes", "Bytes in storage after each batch (MB, log scale)", 1e-6),
    ]
    ids: list[int] = []
    for n, (system, columns_) in enumerate(cols.items()):
        ids = ids or list(columns_["batch_id"])
        for ax, key, _, scale in panels:
            xs_ys = [
                (i, v * scale)
                for i, v in zip(columns_["batch_id"], columns_[key], strict=True)
                if v is not None
            ]
            if xs_ys:
                xs, ys = zip(*xs_ys, strict=True)
                ax.plot(xs, ys, "-", color=f"C{n}", linewidth=0.8, label=system)
        if system == "gic":
            ax = axes[1][1]
            for k, kind in enumerate(STORED_KINDS):
                points = [
                    (i, v * 1e-6)
                    for i, v in zip(
                        columns_["batch_id"], columns_.get(f"stored_{kind}_bytes", ()), strict=False
                    )
                    if v is not None
                ]
                if points:
                    xs, ys = zip(*points, strict=True)
                    ax.plot(xs, ys, ":", color=f"C{k + 3}", linewidth=0.6, label=f"gic {kind}")
    for ax, _, label, _ in panels:
        ax.set_title(label)
        ax.grid(alpha=0.3)
    # Spark's stores keep two orders of magnitude more than GIC's: a log scale shows both
    axes[1][1].set_yscale("log")
    for ax in (axes[0][0], axes[0][1]):
        if ids:
            ax.axvspan(plan.steady[0], plan.steady[1] - 1, color="C2", alpha=0.12, label="steady")
            ax.axvspan(ids[-plan.late], ids[-1], color="C1", alpha=0.12, label="late")
    axes[1][0].axhline(GOAL_MANIFEST_BYTES / 1024, color="red", linestyle="--", label="goal")
    if state_bytes > 0:
        ax = axes[1][1]
        ax.axhline(state_bytes * 1e-6, color="grey", linestyle=":", label="gic state snapshots")
        limit = GOAL_STORED_VS_SNAPSHOT * state_bytes * 1e-6
        ax.axhline(limit, color="red", linestyle="--", label="goal (3x)")
    for row in axes:
        for ax in row:
            ax.legend(fontsize=7)
    for ax in axes[1]:
        ax.set_xlabel("batch id")
    fig.suptitle(title)
    return common.save_figure(fig, path)


def _run_gic(workload: Any, params: BenchParams, plan: SoakPlan) -> RunResult:
    return runner.run_in_subprocess(
        harness.GIC_TARGET,
        "gic",
        workload,
        params,
        options={"default_materialization": True, "stored_bytes_every": plan.stored_every},
        tag=NAME,
    )


def _run_spark(variant: str, workload: Any, params: BenchParams, plan: SoakPlan) -> RunResult:
    return runner.run_in_subprocess(
        harness.SPARK_TARGET,
        variant,
        workload,
        params,
        options={"spark_retention": True, "stored_bytes_every": plan.stored_every},
        tag=NAME,
    )


def main() -> None:
    base = harness.params_from_env()
    plan = plan_from_env(quick=base.quick)
    spark_name = spark_from_env()
    mode = modes.mode_from_env(os.environ, "GIC_BENCH_SOAK_MODE")
    workload = keyed_count(base.quick)
    started = time.monotonic()
    params = BenchParams(
        warmup=0, measured=plan.batches, timeout_s=base.timeout_s, quick=base.quick
    )
    with modes.params_for(mode, params) as run_params:
        print(f"-- {NAME}: gic, {plan.batches} batches, {run_params.master}", flush=True)
        result = _run_gic(workload, run_params, plan)
        spark_result = None
        if spark_name is not None:
            print(f"-- {NAME}: {spark_name}, {plan.batches} batches", flush=True)
            spark_result = _run_spark(spark_name, workload, run_params, plan)
    records = list(result.measured)
    snapshot = int(result.notes.get("state_snapshot_bytes", 0))
    summary = summarize_soak(records, plan, snapshot)
    goals = soak_goals(summary)
    cols = {"gic": columns(records)}
    spark_summary = None
    if spark_result is not None and spark_name is not None:
        spark_records = list(spark_result.measured)
        spark_summary = summarize_spark(spark_records, plan)
        cols[spark_name] = columns(spark_records, "spark_baseline", SPARK_KINDS)
    data = {
        "workload": workload.describe(),
        "setup": {
            "systems": ["gic", *([spark_name] if spark_name else [])],
            "master": run_params.master,
            "cluster_mode": mode.describe(),
            "batches": plan.batches,
            "steady_window": list(plan.steady),
            "late_window": plan.late,
            "stored_bytes_every": plan.stored_every,
            "materialization": "GIC: runtime defaults (nothing overridden)",
            "spark": (
                f"{spark_name}: Spark's default retention (minBatchesToRetain), noop sink"
                if spark_name
                else None
            ),
            "isolation": "each system in its own process and JVM, one after the other",
            "commit": repeats.DEFINITIONS["commit_with_logs_ms"],
            "quick": base.quick,
        },
        "summary": summary,
        "spark": spark_summary,
        "goals": goals,
        "versus_spark": versus_spark(summary, spark_summary),
        "notes": {
            "gic": dict(result.notes),
            **({spark_name: dict(spark_result.notes)} if spark_result and spark_name else {}),
        },
        "batches": cols,
        "run_s": round(time.monotonic() - started, 1),
    }
    out_dir = harness.QUICK_RESULTS if base.quick else None
    path = harness.write(NAME, data, out_dir)
    print(f"wrote {path}", flush=True)
    title = (
        f"{NAME}: {' vs '.join(cols)} on {workload.name}, {plan.batches} batches, "
        f"{run_params.master}"
    )
    print(f"wrote {plot(path.with_suffix('.png'), title, cols, snapshot, plan)}", flush=True)
    print(f"goals: {json.dumps(goals)}", flush=True)
    print(f"versus spark: {json.dumps(data['versus_spark'])}", flush=True)


if __name__ == "__main__":
    main()
