"""Soak: GIC on W1 for hundreds of micro-batches at the runtime's default settings.

Does a long-running job stay as fast as a young one, and do its checkpoints stay small?
One GIC run (``gic``, its own process and JVM) on the W1 keyed count for
:data:`BATCHES` micro-batches (``GIC_BENCH_SOAK_BATCHES``), with every materialization
setting at the runtime's default (nothing overridden), in ``local[2]`` or the mode named
by ``GIC_BENCH_SOAK_MODE`` (see :mod:`bench.streaming.modes`). Per batch it records
commit and batch time, rows/s, the manifest file's size and, every
:data:`STORED_EVERY` batches, the bytes under the job's storage root (a background walk,
off the batch's critical path). At the end the state's own snapshot size is the sum of
the snapshots the last manifest references (with how many buckets have one).

Goals (:func:`soak_goals`, each met / not met / null when not measurable):

* commit p99 of the last 100 batches <= 1.5x that of batches 5-55;
* rows/s of the last 100 batches >= 0.9x that of batches 5-55;
* every manifest <= 256 KiB;
* stored bytes (largest sample) <= 3x the state's snapshot size.

Quick mode (``GIC_BENCH_QUICK=1``): 40 batches, windows 3-13 and the last 10; the state's
snapshots may not exist yet then (default interval 120 s), so that goal is null.

Writes ``soak.json`` (per-batch columns, windows, goals) and ``soak.png``.
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
from bench.streaming import gic_records, harness, modes, runner
from bench.streaming.records import BatchRecord, BenchmarkError, BenchParams
from bench.streaming.workloads import keyed_count

NAME = "soak"
BATCHES = 400
STORED_EVERY = 10
GOAL_COMMIT_P99_GROWTH = 1.5
GOAL_THROUGHPUT_KEPT = 0.9
GOAL_MANIFEST_BYTES = 256 * 1024
GOAL_STORED_VS_SNAPSHOT = 3.0
STORED_KINDS = ("snapshots", "changelog", "checkpoints")
"""The kinds of stored bytes shown apart (``jobs/<job>/<kind>/``); the rest is summed."""


@dataclass(frozen=True)
class SoakPlan:
    """How many batches, and which ones are compared."""

    batches: int
    early: tuple[int, int]
    """Batch ids ``[start, end)`` of the young job's window."""
    late: int
    """The last ``late`` batches are the old job's window."""
    stored_every: int

    def __post_init__(self) -> None:
        start, end = self.early
        if not 0 <= start < end <= self.batches - self.late or self.late < 1:
            raise BenchmarkError(
                f"soak windows do not fit: {self.batches} batches, early {self.early}, late "
                f"{self.late}; raise GIC_BENCH_SOAK_BATCHES"
            )


def plan_from_env(environ: Mapping[str, str] = os.environ, quick: bool = False) -> SoakPlan:
    """The plan: 400 batches, windows 5-55 and the last 100 (quick: 40, 3-13, last 10)."""
    raw = environ.get("GIC_BENCH_SOAK_BATCHES", "")
    if quick:
        return SoakPlan(int(raw or 40), (3, 13), 10, 5)
    return SoakPlan(int(raw or BATCHES), (5, 55), 100, STORED_EVERY)


def window(records: Sequence[BatchRecord]) -> dict[str, Any]:
    """Throughput and commit/batch percentiles of a window of batches."""
    commit = [r.commit_ms for r in records]
    batch = [r.batch_ms for r in records]
    total_s = sum(batch) / 1000
    return {
        "batches": [records[0].batch_id, records[-1].batch_id] if records else [],
        "rows_per_s": round(sum(r.rows for r in records) / total_s, 1) if total_s else 0.0,
        "commit_ms_p50": common.percentile(commit, 50),
        "commit_ms_p99": common.percentile(commit, 99),
        "batch_ms_p50": common.percentile(batch, 50),
    }


def columns(records: Sequence[BatchRecord]) -> dict[str, list[Any]]:
    """Per-batch figures as columns (``None`` where a batch has no sample)."""

    def part(r: BatchRecord, name: str) -> float | None:
        return r.parts.get(name)

    return {
        "batch_id": [r.batch_id for r in records],
        "batch_ms": [r.batch_ms for r in records],
        "commit_ms": [r.commit_ms for r in records],
        "rows_per_s": [round(r.rows / r.batch_ms * 1000, 1) if r.batch_ms else 0 for r in records],
        "bytes": [r.bytes for r in records],
        "manifest_bytes": [part(r, "manifest_bytes") for r in records],
        "stored_bytes": [part(r, "stored_bytes") for r in records],
        **{
            f"stored_{kind}_bytes": [part(r, f"stored_{kind}_bytes") for r in records]
            for kind in STORED_KINDS
        },
        "local_hit_ratio": [gic_records.local_hit_ratio(r.parts) for r in records],
    }


def summarize_soak(
    records: Sequence[BatchRecord], plan: SoakPlan, state_snapshot_bytes: int
) -> dict[str, Any]:
    """Windows, manifest and storage figures of a soak run."""
    by_id = {r.batch_id: r for r in records}
    early = [by_id[b] for b in range(*plan.early) if b in by_id]
    late = list(records[-plan.late :])
    manifests = [r.parts["manifest_bytes"] for r in records if "manifest_bytes" in r.parts]
    stored = [r.parts["stored_bytes"] for r in records if "stored_bytes" in r.parts]
    peak = max(
        (r for r in records if "stored_bytes" in r.parts),
        key=lambda r: r.parts["stored_bytes"],
        default=None,
    )
    hits = [h for r in records if (h := gic_records.local_hit_ratio(r.parts)) is not None]
    return {
        "early": window(early),
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
    early, late = summary["early"], summary["late"]
    growth = common.ratio(late["commit_ms_p99"], early["commit_ms_p99"])
    kept = common.ratio(late["rows_per_s"], early["rows_per_s"])
    manifest = summary["manifest_bytes_max"]
    stored = common.ratio(summary["stored_bytes_max"], summary["state_snapshot_bytes"] or None)
    return {
        **common.goal(
            "commit_p99_late_vs_early", growth, at_most=GOAL_COMMIT_P99_GROWTH, met="commit_p99_met"
        ),
        **common.goal(
            "throughput_late_vs_early", kept, at_least=GOAL_THROUGHPUT_KEPT, met="throughput_met"
        ),
        "manifest_bytes_at_most": GOAL_MANIFEST_BYTES,
        "manifest_bytes_max": manifest,
        "manifest_met": None if manifest is None else manifest <= GOAL_MANIFEST_BYTES,
        **common.goal(
            "stored_vs_state_snapshot", stored, at_most=GOAL_STORED_VS_SNAPSHOT, met="stored_met"
        ),
        "how": (
            "early = batches in the plan's early window, late = the last batches of the "
            "plan; commit: late commit_ms p99 / early p99; throughput: late rows/s / early "
            "rows/s (rows / sum of batch_ms); manifest: largest manifest file of the run; "
            "stored: largest sample of the bytes under the storage root / the snapshot "
            "bytes the last manifest references (null when no snapshot exists yet)"
        ),
    }


def plot(
    path: Path,
    title: str,
    cols: Mapping[str, Sequence[Any]],
    state_bytes: int,
    plan: SoakPlan,
) -> Path:
    """Commit time, throughput, manifest bytes and stored bytes over the batches, with the
    compared windows shaded."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ids = list(cols["batch_id"])
    fig, axes = plt.subplots(2, 2, figsize=(13, 7.5), sharex=True)
    panels = [
        (axes[0][0], "commit_ms", "Commit ms per batch", 1.0),
        (axes[0][1], "rows_per_s", "Rows/s per batch", 1.0),
        (axes[1][0], "manifest_bytes", "Manifest file (KiB)", 1 / 1024),
        (axes[1][1], "stored_bytes", "Bytes under the storage root (MB)", 1e-6),
    ]
    for ax, key, label, scale in panels:
        points = [(i, v * scale) for i, v in zip(ids, cols[key], strict=True) if v is not None]
        if points:
            xs, ys = zip(*points, strict=True)
            style = "o-" if key == "stored_bytes" else "-"
            ax.plot(
                xs,
                ys,
                style,
                linewidth=0.8,
                markersize=3,
                label="all" if key == "stored_bytes" else None,
            )
        if key == "stored_bytes":
            for kind in STORED_KINDS:
                kind_points = [
                    (i, v * scale)
                    for i, v in zip(ids, cols.get(f"stored_{kind}_bytes", ()), strict=False)
                    if v is not None
                ]
                if kind_points:
                    xs, ys = zip(*kind_points, strict=True)
                    ax.plot(xs, ys, ".-", linewidth=0.6, markersize=2, label=kind)
        ax.set_title(label)
        ax.grid(alpha=0.3)
        if key in ("commit_ms", "rows_per_s") and ids:
            ax.axvspan(plan.early[0], plan.early[1] - 1, color="C2", alpha=0.12, label="early")
            ax.axvspan(ids[-plan.late], ids[-1], color="C1", alpha=0.12, label="late")
            ax.legend(fontsize=7)
    axes[1][0].axhline(GOAL_MANIFEST_BYTES / 1024, color="red", linestyle="--", label="goal")
    axes[1][0].legend(fontsize=7)
    if state_bytes > 0:
        ax = axes[1][1]
        ax.axhline(state_bytes * 1e-6, color="grey", linestyle=":", label="state snapshots")
        limit = GOAL_STORED_VS_SNAPSHOT * state_bytes * 1e-6
        ax.axhline(limit, color="red", linestyle="--", label="goal (3x)")
        ax.legend(fontsize=7)
    for ax in axes[1]:
        ax.set_xlabel("batch id")
    fig.suptitle(title)
    return common.save_figure(fig, path)


def main() -> None:
    base = harness.params_from_env()
    plan = plan_from_env(quick=base.quick)
    mode = modes.mode_from_env(os.environ, "GIC_BENCH_SOAK_MODE")
    workload = keyed_count(base.quick)
    started = time.monotonic()
    params = BenchParams(
        warmup=0, measured=plan.batches, timeout_s=base.timeout_s, quick=base.quick
    )
    with modes.params_for(mode, params) as run_params:
        print(f"-- {NAME}: gic, {plan.batches} batches, {run_params.master}", flush=True)
        result = runner.run_in_subprocess(
            harness.GIC_TARGET,
            "gic",
            workload,
            run_params,
            options={"default_materialization": True, "stored_bytes_every": plan.stored_every},
            tag=NAME,
        )
    records = list(result.measured)
    snapshot = int(result.notes.get("state_snapshot_bytes", 0))
    summary = summarize_soak(records, plan, snapshot)
    goals = soak_goals(summary)
    cols = columns(records)
    data = {
        "workload": workload.describe(),
        "setup": {
            "system": "gic",
            "master": run_params.master,
            "cluster_mode": mode.describe(),
            "batches": plan.batches,
            "early_window": list(plan.early),
            "late_window": plan.late,
            "stored_bytes_every": plan.stored_every,
            "materialization": "runtime defaults (nothing overridden)",
            "quick": base.quick,
        },
        "summary": summary,
        "goals": goals,
        "notes": dict(result.notes),
        "batches": cols,
        "run_s": round(time.monotonic() - started, 1),
    }
    out_dir = harness.QUICK_RESULTS if base.quick else None
    path = harness.write(NAME, data, out_dir)
    print(f"wrote {path}", flush=True)
    title = f"{NAME}: gic on {workload.name}, {plan.batches} batches, {run_params.master}"
    print(f"wrote {plot(path.with_suffix('.png'), title, cols, snapshot, plan)}", flush=True)
    print(f"goals: {json.dumps(goals)}", flush=True)


if __name__ == "__main__":
    main()
