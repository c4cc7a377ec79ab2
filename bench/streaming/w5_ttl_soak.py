"""W5, TTL churn soak: does state with a time to live stay bounded while keys come and go?

The churn workload (:func:`~bench.streaming.timed_workloads.ttl_churn`: 50,000 live keys,
each live for about 10 batches and then gone for good, 20,000 rows per batch, event time
advancing 10 s per batch) runs for :data:`BATCHES` micro-batches as the same GIC job
twice (:mod:`bench.streaming.gic_timed`): ``gic_ttl`` keeps a count per key in a value
state with a TTL of 30 seconds of event time, ``gic_no_ttl`` the same state without one; both write
their output (the keys whose entry a batch created) to a Parquet sink. Runtime defaults
for materialization. Per batch:

``state_rows``
    entries of the state (the counts; not the TTL expiry index) in the batch's
    checkpoint, counted in the restore sample below. (Counting the keys a batch created
    minus ``BatchReport.expired`` would overcount: an entry that expired but was not
    swept yet reads as absent, so a returning key is created again.)
``snapshot_bytes``
    bytes of the snapshots the batch's manifest references (the state's own size once
    every bucket has been materialized; it follows the state with a lag).
``stored_bytes``
    every byte under the job's storage root (snapshots, changelog, manifests), sampled
    every ``stored_every`` batches off the batch's path.
``restore_ms``
    sampled every ``restore_every`` batches (with ``state_rows``): the time to rebuild
    every bucket of the batch's checkpoint from storage into an empty in-memory store,
    single threaded, in the driver right after the batch (so the next batch starts that
    much later).

Goals (:func:`ttl_goals`): with the TTL, the mean of each of state rows, stored bytes and
restore time over the last 100 batches within :data:`GOAL_LATE_VS_EARLY` times its mean
over batches 100-200; without it they grow (the same ratios, shown beside). Runs are
repeated ``GIC_BENCH_ROUNDS`` times (default 3, quick 1), interleaved; the goals use the
median ratio. Quick mode (``GIC_BENCH_QUICK=1``): 40 batches, windows 10-20 and the last
10. ``GIC_BENCH_W5_BATCHES`` overrides the batch count, ``GIC_BENCH_W5_MODE`` the cluster
mode (default ``local2``). Writes ``w5_ttl_soak.json`` (per-batch columns of the first
round) and ``.png``.
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
from bench.streaming import harness, modes, repeats, runner
from bench.streaming.records import BatchRecord, BenchmarkError, BenchParams
from bench.streaming.timed_workloads import TTL, ttl_churn

NAME = "w5_ttl_soak"
BATCHES = 400
GOAL_LATE_VS_EARLY = 1.2
SYSTEMS = {"gic_ttl": "ttl", "gic_no_ttl": "no_ttl"}
MEASURES = ("state_rows", "stored_bytes", "restore_ms")
DEFINITIONS = {
    "state_rows": (
        "entries of the state (values; not the TTL expiry index) in the batch's checkpoint, "
        "counted in the restore sample"
    ),
    "created": "output rows: keys whose entry the batch created (get() found none)",
    "snapshot_bytes": "bytes of the snapshots the batch's manifest references",
    "stored_bytes": "bytes under the job's storage root, sampled every stored_bytes_every",
    "restore_ms": (
        "every restore_every batches: rebuild of every bucket of the batch's checkpoint "
        "from storage into an empty in-memory store, single threaded, in the driver"
    ),
    "late_vs_early": "mean over the late window / mean over the early window (samples only)",
}
"""What each per-batch column means (also in the result JSON)."""


@dataclass(frozen=True)
class TTLPlan:
    """Batches, compared windows (batch ids ``[start, end)``) and sampling intervals."""

    batches: int
    early: tuple[int, int]
    late: tuple[int, int]
    stored_every: int
    restore_every: int

    def __post_init__(self) -> None:
        if not 0 <= self.early[0] < self.early[1] <= self.late[0] < self.late[1] <= self.batches:
            raise BenchmarkError(
                f"W5 windows do not fit: {self.batches} batches, early {self.early}, late "
                f"{self.late}; raise GIC_BENCH_W5_BATCHES"
            )


def plan_from_env(environ: Mapping[str, str] = os.environ, quick: bool = False) -> TTLPlan:
    """400 batches, windows 100-200 and the last 100 (quick: 40, 10-20, the last 10)."""
    raw = environ.get("GIC_BENCH_W5_BATCHES", "")
    batches = int(raw) if raw.strip() else (40 if quick else BATCHES)
    if quick:
        return TTLPlan(batches, (10, 20), (batches - 10, batches), 5, 2)
    return TTLPlan(batches, (100, 200), (batches - 100, batches), 10, 10)


def columns(records: Sequence[BatchRecord]) -> dict[str, list[float | None]]:
    """Per-batch columns (see the module docstring); ``None`` where a batch has no sample."""
    return {
        "batch_id": [float(r.batch_id) for r in records],
        "state_rows": [r.parts.get("state_entries") for r in records],
        "created": [r.parts.get("rows_out") for r in records],
        "snapshot_bytes": [r.parts.get("state_snapshot_bytes") for r in records],
        "stored_bytes": [r.parts.get("stored_bytes") for r in records],
        "restore_ms": [r.parts.get("restore_ms") for r in records],
        "batch_ms": [r.batch_ms for r in records],
        "expired": [r.parts.get("expired") for r in records],
    }


def window_mean(
    cols: Mapping[str, Sequence[float | None]], name: str, window: tuple[int, int]
) -> float | None:
    """Mean of column ``name`` over the samples of batches in ``window`` (None: none)."""
    values = [
        v
        for b, v in zip(cols["batch_id"], cols[name], strict=True)
        if v is not None and window[0] <= (b or 0) < window[1]
    ]
    return statistics.fmean(values) if values else None


def growth(cols: Mapping[str, Sequence[float | None]], plan: TTLPlan) -> dict[str, Any]:
    """Per measure: early and late window means and late / early."""
    out: dict[str, Any] = {}
    for name in MEASURES:
        early, late = window_mean(cols, name, plan.early), window_mean(cols, name, plan.late)
        out[name] = {"early": early, "late": late, "late_vs_early": common.ratio(late, early)}
    return out


def ttl_goals(runs: Mapping[str, Sequence[Mapping[str, Any]]]) -> dict[str, Any]:
    """With the TTL each measure's median late/early ratio <= the goal; without, shown."""
    out: dict[str, Any] = {}
    for system, grown in runs.items():
        for name in MEASURES:
            ratios = [g[name]["late_vs_early"] for g in grown if g[name]["late_vs_early"]]
            med = repeats.spread(ratios)["median"]
            key = f"{system}.{name}"
            if system == "gic_ttl":
                out[key] = common.goal("late_vs_early", med, at_most=GOAL_LATE_VS_EARLY, met="met")
            else:
                out[key] = {"late_vs_early": med, "grows": None if med is None else med > 1.2}
    verdicts = [v["met"] for k, v in out.items() if k.startswith("gic_ttl.")]
    out["met"] = None if not verdicts or None in verdicts else all(verdicts)
    out["how"] = (
        "per run and measure: mean over the last window / mean over the early window (samples "
        "only); median over the rounds; met when every gic_ttl ratio is within the goal"
    )
    return out


def plot(
    path: Path, title: str, cols: Mapping[str, Mapping[str, Sequence[Any]]], plan: TTLPlan
) -> Path:
    """State rows, snapshot bytes, stored bytes and restore time over the batches, with and
    without the TTL, the compared windows shaded."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, 2, figsize=(13, 7.5), sharex=True)
    panels = [
        (axes[0][0], "state_rows", "State rows (live entries)", 1.0),
        (axes[0][1], "snapshot_bytes", "Snapshot bytes referenced (MB)", 1e-6),
        (axes[1][0], "stored_bytes", "Bytes under the job's storage root (MB)", 1e-6),
        (axes[1][1], "restore_ms", "Restore of the whole state (ms)", 1.0),
    ]
    for ax, key, label, scale in panels:
        for i, (system, c) in enumerate(cols.items()):
            pts = [
                (b, v * scale) for b, v in zip(c["batch_id"], c[key], strict=True) if v is not None
            ]
            if pts:
                xs, ys = zip(*pts, strict=True)
                ax.plot(
                    xs,
                    ys,
                    "o-" if len(pts) < 60 else "-",
                    markersize=2,
                    linewidth=0.9,
                    color=f"C{i}",
                    label=system,
                )
        ax.axvspan(plan.early[0], plan.early[1] - 1, color="C2", alpha=0.1)
        ax.axvspan(plan.late[0], plan.late[1] - 1, color="C1", alpha=0.1)
        ax.set_title(label)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    for ax in axes[1]:
        ax.set_xlabel("batch id")
    fig.suptitle(title)
    return common.save_figure(fig, path)


def main() -> None:
    base = harness.params_from_env()
    plan = plan_from_env(quick=base.quick)
    rounds = repeats.rounds_from_env(quick=base.quick)
    mode = modes.mode_from_env(os.environ, "GIC_BENCH_W5_MODE")
    workload = ttl_churn(base.quick)
    started = time.monotonic()
    params = BenchParams(
        warmup=0, measured=plan.batches, timeout_s=base.timeout_s, quick=base.quick
    )
    grown: dict[str, list[dict[str, Any]]] = {s: [] for s in SYSTEMS}
    first: dict[str, dict[str, list[float | None]]] = {}
    notes: dict[str, Any] = {}
    with modes.params_for(mode, params) as run_params:
        for i in range(rounds):
            for system in repeats.order(list(SYSTEMS), i):
                print(
                    f"-- {NAME} round {i + 1}/{rounds}: {system}, {plan.batches} batches",
                    flush=True,
                )
                options = {
                    "processor": SYSTEMS[system],
                    "output": True,  # counted in rows_out (a discarded output is not)
                    "default_materialization": True,
                    "stored_bytes_every": plan.stored_every,
                    "restore_every": plan.restore_every,
                }
                result = runner.run_in_subprocess(
                    harness.GIC_TARGET, "gic", workload, run_params, options=options, tag=system
                )
                cols = columns(result.measured)
                grown[system].append(growth(cols, plan))
                first.setdefault(system, cols)
                notes.setdefault(system, dict(result.notes))
                print(f"-- {system}: {json.dumps(grown[system][-1])}", flush=True)
    goals = ttl_goals(grown)
    data = {
        "workload": workload.describe(),
        "setup": {
            "systems": {
                s: f"count per key, processor {p} (TTL {TTL}, event time)"
                if p == "ttl"
                else "count per key, no TTL"
                for s, p in SYSTEMS.items()
            },
            "master": run_params.master,
            "cluster_mode": mode.describe(),
            "batches": plan.batches,
            "early_window": list(plan.early),
            "late_window": list(plan.late),
            "stored_bytes_every": plan.stored_every,
            "restore_every": plan.restore_every,
            "rounds": rounds,
            "materialization": "runtime defaults (nothing overridden)",
            "quick": base.quick,
        },
        "definitions": DEFINITIONS,
        "growth_per_round": grown,
        "goals": goals,
        "notes": notes,
        "batches": first,
        "run_s": round(time.monotonic() - started, 1),
    }
    out_dir = harness.QUICK_RESULTS if base.quick else None
    path = harness.write(NAME, data, out_dir)
    print(f"wrote {path}", flush=True)
    title = f"{NAME}: {workload.keys:,} live keys, {plan.batches} batches, {run_params.master}"
    print(f"wrote {plot(path.with_suffix('.png'), title, first, plan)}", flush=True)
    print(f"goals: {json.dumps(goals)}", flush=True)


if __name__ == "__main__":
    main()
