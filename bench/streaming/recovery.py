"""Recovery: how long a restarted job takes to complete its first batch, GIC against Spark.

Every system runs the W1 keyed count to a steady state (:data:`STEADY` micro-batches at
default settings: GIC's materialization defaults, Spark's default retention), is stopped,
and is started again in a fresh process (a fresh JVM, as a replaced pod), which runs
:data:`AFTER` more batches from the same checkpoint storage. GIC restarts with an EMPTY
executor-local directory (local mode: a new directory; cluster modes: new executors with
their runtime-default private directories), so every bucket is restored from storage;
the first batch's ``restored`` count shows it. Spark restarts from its checkpoint
directory (its executors' state stores are new, so they load from the checkpoint too).
Compared, in the same run:

(a) a normal steady batch (median ``batch_ms`` of the last batches of the steady run);
(b) GIC's first batch of a fresh job (empty state, fresh storage, fresh process);
(c) Spark's restart of the same query, for ``spark_hdfs`` and ``spark_rocksdb_changelog``.

The figure is ``to_first_batch_ms``: from starting the query (GIC: ``GICQuery.run``, which
includes recovery; Spark: ``writeStream.start``) to the end of the first batch (its
progress ``timestamp + triggerExecution``). JVM and session start are reported apart
(``session_start_ms``: the same for every system). Restarts and fresh starts are
repeated :data:`REPEATS` times, interleaved across systems; medians are compared.

Goals (:func:`recovery_goals`): GIC's first batch after restart no slower than the best
Spark store's restart, and at most 1.5x GIC's own fresh first batch.

Environment: ``GIC_BENCH_QUICK=1`` (20 steady batches, 3 after, 1 repeat),
``GIC_BENCH_RECOVERY_STEADY`` / ``_AFTER`` / ``_REPEATS``, ``GIC_BENCH_RECOVERY_MODE`` (a
mode of :mod:`bench.streaming.modes`, default ``local2``). Writes ``recovery.json`` and
``recovery.png``.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import statistics
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench import common
from bench.streaming import harness, modes, runner
from bench.streaming.records import BenchmarkError, BenchParams, RunResult
from bench.streaming.workloads import WorkloadSpec, keyed_count

NAME = "recovery"
STEADY, AFTER, REPEATS = 300, 10, 3
SPARK_STORES = ("spark_hdfs", "spark_rocksdb_changelog")
GIC = "gic"
GOAL_VS_SPARK_RESTART = 1.0
GOAL_VS_FRESH = 1.5
STEADY_TAIL = 50
"""The steady batch is the median over the last batches of the steady run (at most this many)."""
GIC_OPTIONS = {"default_materialization": True}
SPARK_OPTIONS = {"spark_retention": True}


@dataclass(frozen=True)
class RecoveryPlan:
    steady: int
    after: int
    repeats: int


def plan_from_env(environ: Mapping[str, str] = os.environ, quick: bool = False) -> RecoveryPlan:
    defaults = (20, 3, 1) if quick else (STEADY, AFTER, REPEATS)
    names = ("GIC_BENCH_RECOVERY_STEADY", "GIC_BENCH_RECOVERY_AFTER", "GIC_BENCH_RECOVERY_REPEATS")
    values = [int(environ.get(n) or d) for n, d in zip(names, defaults, strict=True)]
    if min(values) < 1:
        raise BenchmarkError(f"recovery plan needs positive counts, got {values}")
    return RecoveryPlan(*values)


def first_batch(result: RunResult) -> dict[str, Any]:
    """How a run's first batch went (a restart's or a fresh job's)."""
    first = result.measured[0]
    notes = result.notes
    out: dict[str, Any] = {
        "first_batch_id": first.batch_id,
        "to_first_batch_ms": float(notes["to_first_batch_ms"]),
        "before_first_batch_ms": float(notes["before_first_batch_ms"]),
        "first_batch_ms": first.batch_ms,
        "session_start_ms": float(notes["session_start_ms"]),
    }
    for part in ("restored", "local_hits", "empty", "rocksdbLoadLatencyMs"):
        if part in first.parts:
            out[part] = first.parts[part]
    return out


def steady_batch_ms(result: RunResult) -> float:
    """Median batch time over the last :data:`STEADY_TAIL` batches (or the last half)."""
    batches = [r.batch_ms for r in result.measured]
    tail = batches[-min(STEADY_TAIL, max(1, len(batches) // 2)) :]
    return float(statistics.median(tail))


def _median(items: Sequence[Mapping[str, Any]], key: str) -> float | None:
    values = [float(i[key]) for i in items if key in i]
    return float(statistics.median(values)) if values else None


def summarize_system(
    steady: RunResult | None,
    restarts: Sequence[Mapping[str, Any]],
    fresh: Sequence[Mapping[str, Any]],
) -> dict[str, Any]:
    """Steady batch, and medians of the first batches after restart and of fresh jobs."""
    out: dict[str, Any] = {
        "steady_batch_ms": steady_batch_ms(steady) if steady else None,
        "steady_batches": len(steady.measured) if steady else 0,
        "restart_to_first_batch_ms": _median(restarts, "to_first_batch_ms"),
        "restart_first_batch_ms": _median(restarts, "first_batch_ms"),
        "restart_before_first_batch_ms": _median(restarts, "before_first_batch_ms"),
        "fresh_to_first_batch_ms": _median(fresh, "to_first_batch_ms"),
        "fresh_first_batch_ms": _median(fresh, "first_batch_ms"),
        "restarts": list(restarts),
        "fresh": list(fresh),
    }
    if restarts and all("restored" in r for r in restarts):
        out["restart_restored_all_from_storage"] = all(
            r["restored"] > 0 and r.get("local_hits", 0) == 0 for r in restarts
        )
    return out


def recovery_goals(systems: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """GIC's restart against the best Spark restart and against its own fresh start."""
    gic = systems.get(GIC, {})
    restart = gic.get("restart_to_first_batch_ms")
    spark = {
        n: s["restart_to_first_batch_ms"]
        for n, s in systems.items()
        if n.startswith(harness.SPARK_PREFIX) and s.get("restart_to_first_batch_ms") is not None
    }
    best = min(spark, key=lambda n: spark[n]) if spark else None
    vs_spark = common.ratio(restart, spark[best] if best else None)
    vs_fresh = common.ratio(restart, gic.get("fresh_to_first_batch_ms"))
    return {
        "best_spark_restart": best,
        **common.goal(
            "restart_vs_best_spark_restart",
            vs_spark,
            at_most=GOAL_VS_SPARK_RESTART,
            met="restart_vs_spark_met",
        ),
        **common.goal(
            "restart_vs_fresh", vs_fresh, at_most=GOAL_VS_FRESH, met="restart_vs_fresh_met"
        ),
        "how": (
            "median to_first_batch_ms of GIC's restarts / the lowest median of the Spark "
            "stores' restarts, and / the median of GIC's fresh first batches; null: a "
            "needed run failed"
        ),
    }


# --- the runs ---------------------------------------------------------------------------------


@dataclass
class _System:
    name: str
    target: str
    options: dict[str, Any]
    scratch: Path
    steady: RunResult | None = None
    restarts: list[dict[str, Any]] | None = None
    fresh: list[dict[str, Any]] | None = None
    error: str | None = None


def _run(
    system: _System,
    workload: WorkloadSpec,
    params: BenchParams,
    scratch: Path,
    tag: str,
    *,
    local_dir: str | None = None,
) -> RunResult:
    options = dict(system.options)
    if local_dir is not None and system.name == GIC:
        options["local_dir"] = local_dir
    print(f"-- {NAME}: {system.name} {tag}", flush=True)
    return runner.run_in_subprocess(
        system.target,
        system.name,
        workload,
        params,
        scratch=scratch,
        options=options,
        tag=f"{NAME}-{tag}",
    )


def _rounds(
    systems: list[_System], workload: WorkloadSpec, params: BenchParams, plan: RecoveryPlan
) -> None:
    steady = dataclasses.replace(params, warmup=0, measured=plan.steady)
    after = dataclasses.replace(params, warmup=0, measured=plan.after)
    for s in systems:
        try:
            s.steady = _run(s, workload, steady, s.scratch, "steady", local_dir="local-0")
        except BenchmarkError as exc:
            s.error = f"steady run: {exc}"
            continue
        if s.name != GIC:  # Spark's fresh start, for information (GIC repeats its own)
            s.fresh = [first_batch(s.steady)]
    for i in range(1, plan.repeats + 1):
        for s in systems:
            if s.error is not None:
                continue
            try:
                restarted = _run(
                    s, workload, after, s.scratch, f"restart{i}", local_dir=f"local-{i}"
                )
                s.restarts = [*(s.restarts or []), first_batch(restarted)]
                if s.name == GIC:
                    fresh_dir = s.scratch.parent / f"{s.scratch.name}-fresh{i}"
                    try:
                        started = _run(s, workload, after, fresh_dir, f"fresh{i}")
                    finally:
                        shutil.rmtree(fresh_dir, ignore_errors=True)
                    s.fresh = [*(s.fresh or []), first_batch(started)]
            except BenchmarkError as exc:
                s.error = f"round {i}: {exc}"


def plot(path: Path, title: str, systems: Mapping[str, Mapping[str, Any]]) -> Path:
    """Per system: steady batch, fresh first batch, first batch after restart (ms)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(systems)
    bars = (
        ("steady_batch_ms", "steady batch (batch_ms)", "0.7"),
        ("fresh_to_first_batch_ms", "fresh job: start to first batch", "C0"),
        ("restart_to_first_batch_ms", "restart: start to first batch", "C3"),
    )
    fig, ax = plt.subplots(figsize=(10, 4.8))
    width = 0.8 / len(bars)
    for i, (key, label, color) in enumerate(bars):
        values = [float(systems[n].get(key) or 0.0) for n in names]
        drawn = ax.bar([x + i * width for x in range(len(names))], values, width, label=label)
        for bar, value in zip(drawn, values, strict=True):
            bar.set_color(color)
            if value:
                ax.annotate(
                    f"{value:.0f}",
                    (bar.get_x() + bar.get_width() / 2, value),
                    ha="center",
                    va="bottom",
                    fontsize=7,
                )
    ax.set_xticks([x + width for x in range(len(names))])
    ax.set_xticklabels(names)
    ax.set_ylabel("ms (medians)")
    ax.set_title(title)
    ax.legend(fontsize=8)
    return common.save_figure(fig, path)


def main() -> None:
    base = harness.params_from_env()
    plan = plan_from_env(quick=base.quick)
    mode = modes.mode_from_env(os.environ, "GIC_BENCH_RECOVERY_MODE")
    workload = keyed_count(base.quick)
    started = time.monotonic()
    run_id = uuid.uuid4().hex[:10]
    systems = [
        _System(GIC, harness.GIC_TARGET, dict(GIC_OPTIONS), common.SCRATCH / f"{NAME}-gic-{run_id}")
    ]
    systems += [
        _System(
            n, harness.SPARK_TARGET, dict(SPARK_OPTIONS), common.SCRATCH / f"{NAME}-{n}-{run_id}"
        )
        for n in SPARK_STORES
    ]
    try:
        with modes.params_for(mode, base) as params:
            _rounds(systems, workload, params, plan)
            master = params.master
    finally:
        if os.environ.get("GIC_BENCH_KEEP_SCRATCH") != "1":
            for s in systems:
                shutil.rmtree(s.scratch, ignore_errors=True)
    summaries = {
        s.name: summarize_system(s.steady, s.restarts or [], s.fresh or [])
        for s in systems
        if s.error is None
    }
    goals = recovery_goals(summaries)
    data = {
        "workload": workload.describe(),
        "setup": {
            "master": master,
            "cluster_mode": mode.describe(),
            "steady_batches": plan.steady,
            "batches_after_restart": plan.after,
            "repeats": plan.repeats,
            "gic": "materialization at the runtime's defaults; restarted with an empty local dir",
            "spark": "Spark's default retention and maintenance; restarted from its checkpoint",
            "quick": base.quick,
        },
        "definitions": {
            "to_first_batch_ms": "query start (GICQuery.run / writeStream.start) to the end "
            "of the first batch (progress timestamp + triggerExecution)",
            "before_first_batch_ms": "query start to the first batch's trigger start",
            "first_batch_ms": "triggerExecution of the first batch",
            "steady_batch_ms": f"median batch_ms of the last {STEADY_TAIL} steady batches",
            "fresh_to_first_batch_ms": "GIC: median over its fresh jobs (fresh storage and "
            "process, repeated like the restarts); Spark: the steady run's own first batch "
            "(one sample, for information)",
            "session_start_ms": "JVM and session start (not part of to_first_batch_ms)",
        },
        "failed": {s.name: s.error for s in systems if s.error is not None},
        "goals": goals,
        "systems": summaries,
        "run_s": round(time.monotonic() - started, 1),
    }
    path = harness.write(NAME, data, harness.QUICK_RESULTS if base.quick else None)
    print(f"wrote {path}", flush=True)
    title = f"{NAME}: {workload.name}, {plan.steady} steady batches, {master}"
    if summaries:
        print(f"wrote {plot(path.with_suffix('.png'), title, summaries)}", flush=True)
    print(f"goals: {json.dumps(goals)}", flush=True)
    if data["failed"]:
        raise BenchmarkError(f"recovery runs failed: {data['failed']}")


if __name__ == "__main__":
    main()
