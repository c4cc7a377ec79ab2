"""Registry of systems; runs them all on one workload and reports them side by side.

:data:`SYSTEMS` maps a system name to a :data:`~bench.streaming.runner.SystemFn`
``(workload, params) -> RunResult``. Spark's own state stores (names starting with
``spark_``) are the baselines; every other system is compared with the best of them.
Systems not registered are simply absent from the result. To add one, write its
function and add one entry, e.g. ``SYSTEMS["gic"] = in_subprocess("mod:fn", "gic")``.

:func:`run_benchmark` runs the chosen systems one after another (each in its own process
when registered through ``in_subprocess``), summarises the measured batches
(:func:`summarize`), compares every system with the best Spark store and evaluates the
goals for the GIC system named ``gic`` (:func:`compare`), then writes ``<name>.json`` and
``<name>.png``. A system that fails is reported under ``failed`` and the others still
run. :mod:`bench.streaming.modes` runs it once per cluster mode.

Environment (read by :func:`params_from_env` and :func:`chosen_systems`):
``GIC_BENCH_QUICK=1`` small sizes, 2 + 3 batches, results under ``bench/scratch/results``;
``GIC_BENCH_WARMUP`` / ``GIC_BENCH_MEASURED`` batch counts; ``GIC_BENCH_SYSTEMS`` a
comma-separated subset of the registry.

Not thread-safe: one benchmark run per process at a time.
"""

from __future__ import annotations

import json
import os
import platform
import statistics
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from bench import common
from bench.streaming import gic_records, plots
from bench.streaming.records import BenchmarkError, BenchParams, RunResult
from bench.streaming.runner import SystemFn, in_subprocess
from bench.streaming.workloads import WorkloadSpec

SPARK_TARGET = "bench.streaming.spark_stores:run_spark_store"
GIC_TARGET = "bench.streaming.gic_runner:run_gic"
SPARK_PREFIX = "spark_"

SYSTEMS: dict[str, SystemFn] = {
    "spark_hdfs": in_subprocess(SPARK_TARGET, "spark_hdfs"),
    "spark_rocksdb": in_subprocess(SPARK_TARGET, "spark_rocksdb"),
    "spark_rocksdb_changelog": in_subprocess(SPARK_TARGET, "spark_rocksdb_changelog"),
    "gic": in_subprocess(GIC_TARGET, "gic"),
    "gic_no_changelog": in_subprocess(GIC_TARGET, "gic_no_changelog"),
    "gic_s3": in_subprocess(GIC_TARGET, "gic_s3"),
}
"""Every known system, in report order: Spark's stores (:mod:`bench.streaming.spark_stores`),
then GIC's (:mod:`bench.streaming.gic_runner`)."""

GIC = "gic"
GIC_NO_CHANGELOG = "gic_no_changelog"
GOAL_THROUGHPUT_RATIO = 1.0
GOAL_COMMIT_P99_RATIO = 0.5
GOAL_CHANGELOG_OVERHEAD = 0.03
GOAL_LOCAL_HIT_RATIO = 0.95
QUICK_RESULTS = common.SCRATCH / "results"

DEFINITIONS = {
    "rows_per_s": "measured rows / sum of measured batch_ms",
    "batch_ms": "wall time of a micro-batch (each system states its source in notes)",
    "commit_ms": "each system states its definition in systems.<name>.notes",
    "process_ms": "batch_ms - commit_ms (work that does not make the batch durable)",
    "bytes_uploaded_per_checkpoint": "mean over measured batches of bytes added to storage",
    "local_hit_ratio_mean": (
        "GIC only: mean over measured batches of local_hits / (local_hits + restored)"
    ),
    "percentiles": "nearest rank over the measured batches (p99 of 25 is the slowest one)",
    "ratios": (
        "system / best Spark store: rows_per_s vs the highest Spark rows_per_s, commit "
        "percentiles vs the lowest Spark percentile"
    ),
}


def _env_int(environ: Mapping[str, str], name: str, default: int) -> int:
    raw = environ.get(name)
    if raw is None or raw == "":
        return default
    try:
        return int(raw)
    except ValueError as exc:
        raise BenchmarkError(f"{name}={raw!r} is not an integer; set a whole number") from exc


def params_from_env(environ: Mapping[str, str] = os.environ) -> BenchParams:
    """Benchmark parameters; quick mode (``GIC_BENCH_QUICK=1``) runs 2 + 3 batches."""
    quick = environ.get("GIC_BENCH_QUICK", "") not in ("", "0")
    base = (
        BenchParams(warmup=2, measured=3, timeout_s=600.0, quick=True) if quick else BenchParams()
    )
    return BenchParams(
        warmup=_env_int(environ, "GIC_BENCH_WARMUP", base.warmup),
        measured=_env_int(environ, "GIC_BENCH_MEASURED", base.measured),
        master=base.master,
        driver_memory=base.driver_memory,
        timeout_s=base.timeout_s,
        quick=quick,
    )


def chosen_systems(
    registry: Mapping[str, SystemFn], environ: Mapping[str, str] = os.environ
) -> list[str]:
    """Registered systems to run: all, or those named in ``GIC_BENCH_SYSTEMS``."""
    raw = environ.get("GIC_BENCH_SYSTEMS", "")
    if not raw.strip():
        return list(registry)
    names = [n.strip() for n in raw.split(",") if n.strip()]
    unknown = [n for n in names if n not in registry]
    if unknown:
        raise BenchmarkError(
            f"GIC_BENCH_SYSTEMS names unregistered systems {unknown}; registered: "
            f"{', '.join(registry)}"
        )
    return [n for n in registry if n in names]


def _round(value: float, digits: int = 3) -> float:
    return round(float(value), digits)


def summarize(result: RunResult) -> dict[str, Any]:
    """Statistics of the measured batches of one system, plus its notes and records."""
    rows = [r.rows for r in result.measured]
    batch = [r.batch_ms for r in result.measured]
    commit = [r.commit_ms for r in result.measured]
    process = [r.batch_ms - r.commit_ms for r in result.measured]
    nbytes = [r.bytes for r in result.measured]
    total_s = sum(batch) / 1000.0
    out: dict[str, Any] = {
        "batches": len(result.measured),
        "rows": sum(rows),
        "rows_per_s": _round(sum(rows) / total_s if total_s > 0 else 0.0, 1),
        "commit_ms_p50": _round(common.percentile(commit, 50)),
        "commit_ms_p99": _round(common.percentile(commit, 99)),
        "commit_ms_mean": _round(statistics.fmean(commit)),
        "batch_ms_p50": _round(common.percentile(batch, 50)),
        "batch_ms_p99": _round(common.percentile(batch, 99)),
        "batch_ms_mean": _round(statistics.fmean(batch)),
        "process_ms_mean": _round(statistics.fmean(process)),
        "bytes_uploaded_per_checkpoint": round(statistics.fmean(nbytes)),
        "bytes_uploaded_per_checkpoint_p50": round(common.percentile(nbytes, 50)),
        "bytes_uploaded_per_checkpoint_max": max(nbytes),
    }
    hits = [gic_records.local_hit_ratio(r.parts) for r in result.measured]
    if hits and all(h is not None for h in hits):
        out["local_hit_ratio_mean"] = _round(statistics.fmean(h for h in hits if h is not None), 4)
        out["local_hit_ratio_min"] = _round(min(h for h in hits if h is not None), 4)
    wall = [
        r.parts["commit_ms_wall_estimate"]
        for r in result.measured
        if "commit_ms_wall_estimate" in r.parts
    ]
    if len(wall) == len(result.measured):
        out["commit_ms_wall_estimate_p50"] = _round(common.percentile(wall, 50))
        out["commit_ms_wall_estimate_p99"] = _round(common.percentile(wall, 99))
    out["notes"] = dict(result.notes)
    out["measured_batches"] = [r.to_json() for r in result.measured]
    out["warmup_batches"] = [r.to_json() for r in result.warmup]
    return out


def _ratio(value: float, reference: float) -> float | None:
    return round(value / reference, 4) if reference > 0 else None


def compare(summaries: Mapping[str, Mapping[str, Any]], gic: str = GIC) -> dict[str, Any]:
    """Best Spark store per metric, every system's ratios against it, and the goals of
    the GIC system ``gic``."""
    spark = {n: s for n, s in summaries.items() if n.startswith(SPARK_PREFIX)}
    if not spark:
        return {
            "best_spark": None,
            "ratios": {},
            "goals": _goals(summaries, None, None, None, gic),
        }
    fastest = max(spark, key=lambda n: spark[n]["rows_per_s"])
    p50 = min(spark, key=lambda n: spark[n]["commit_ms_p50"])
    p99 = min(spark, key=lambda n: spark[n]["commit_ms_p99"])

    def wall(name: str) -> float:
        s = spark[name]
        return float(s.get("commit_ms_wall_estimate_p99", s["commit_ms_p99"]))

    p99_wall = min(spark, key=wall)
    ratios = {
        name: {
            "rows_per_s": _ratio(s["rows_per_s"], spark[fastest]["rows_per_s"]),
            "commit_ms_p50": _ratio(s["commit_ms_p50"], spark[p50]["commit_ms_p50"]),
            "commit_ms_p99": _ratio(s["commit_ms_p99"], spark[p99]["commit_ms_p99"]),
            "commit_ms_p99_vs_spark_wall_estimate": _ratio(s["commit_ms_p99"], wall(p99_wall)),
        }
        for name, s in summaries.items()
    }
    best = {
        "rows_per_s": fastest,
        "commit_ms_p50": p50,
        "commit_ms_p99": p99,
        "commit_ms_wall_estimate_p99": p99_wall,
    }
    return {
        "best_spark": best,
        "ratios": ratios,
        "goals": _goals(
            summaries,
            spark[fastest]["rows_per_s"],
            spark[p99]["commit_ms_p99"],
            wall(p99_wall),
            gic,
        ),
    }


def _goals(
    summaries: Mapping[str, Mapping[str, Any]],
    best_rows_per_s: float | None,
    best_p99: float | None,
    best_p99_wall: float | None,
    gic_name: str,
) -> dict[str, Any]:
    gic = summaries.get(gic_name)
    plain = summaries.get(GIC_NO_CHANGELOG) if gic_name == GIC else None
    throughput = commit = commit_wall = overhead = None
    if gic is not None and best_rows_per_s:
        throughput = _ratio(gic["rows_per_s"], best_rows_per_s)
    if gic is not None and best_p99 and best_p99_wall:
        commit = _ratio(gic["commit_ms_p99"], best_p99)
        commit_wall = _ratio(gic["commit_ms_p99"], best_p99_wall)
    if gic is not None and plain is not None and plain["process_ms_mean"] > 0:
        overhead = round(gic["process_ms_mean"] / plain["process_ms_mean"] - 1, 4)
    hits = gic.get("local_hit_ratio_mean") if gic is not None else None
    return {
        **common.goal(
            "throughput_vs_best_spark",
            throughput,
            at_least=GOAL_THROUGHPUT_RATIO,
            met="throughput_met",
        ),
        "commit_p99_vs_best_spark_at_most": GOAL_COMMIT_P99_RATIO,
        "commit_p99_vs_best_spark": commit,
        "commit_p99_vs_best_spark_wall_estimate": commit_wall,
        "commit_p99_met": (
            None
            if commit_wall is None or commit is None
            else max(commit, commit_wall) <= GOAL_COMMIT_P99_RATIO
        ),
        **common.goal(
            "changelog_overhead",
            overhead,
            at_most=GOAL_CHANGELOG_OVERHEAD,
            met="changelog_overhead_met",
        ),
        "local_hit_ratio_at_least": GOAL_LOCAL_HIT_RATIO,
        "local_hit_ratio_mean": hits,
        "local_hit_met": None if hits is None else hits >= GOAL_LOCAL_HIT_RATIO,
        "how": (
            f"throughput: {gic_name}.rows_per_s / best Spark rows_per_s. commit: "
            f"{gic_name}.commit_ms_p99 "
            "/ lowest Spark commit_ms_p99, both against Spark's own metric and against its "
            "wall estimate (state commit / task slots); met only if both ratios are within "
            f"the goal. changelog overhead: {gic_name}.process_ms_mean / "
            f"{GIC_NO_CHANGELOG}.process_ms_mean - 1 (time outside the commit, where the "
            "dual write happens). local hits: mean over the measured batches (after warm-up) "
            f"of {gic_name}'s local-hit ratio. null: a system needed for the goal was not run"
        ),
    }


def write(name: str, data: Mapping[str, Any], out_dir: Path | None) -> Path:
    """Write ``<name>.json`` to ``out_dir`` (``None``: ``bench/results``); return its path."""
    if out_dir is None:
        return common.write_result(name, data)
    out_dir.mkdir(parents=True, exist_ok=True)
    payload = {
        "benchmark": name,
        "recorded_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "machine": {"python": platform.python_version(), "cpus": os.cpu_count() or 0},
        **data,
    }
    path = out_dir / f"{name}.json"
    path.write_text(json.dumps(payload, indent=2) + "\n")
    return path


def run_benchmark(
    workload: WorkloadSpec,
    params: BenchParams,
    systems: Mapping[str, SystemFn],
    out_dir: Path | None = None,
    *,
    name: str | None = None,
    gic: str = GIC,
    setup: Mapping[str, Any] | None = None,
    registry: Mapping[str, SystemFn] | None = None,
) -> dict[str, Any]:
    """Run ``systems`` in order on ``workload``; write JSON and PNG; return the result.

    ``out_dir=None`` writes through :func:`bench.common.write_result` (``bench/results``).
    ``name``: the result's name (default the workload's); ``gic``: the system the goals
    are about; ``setup``: added to the result's ``setup`` section; ``registry``: the
    systems the benchmark knows (default :data:`SYSTEMS`).
    """
    name = name or workload.name
    started = time.monotonic()
    summaries: dict[str, dict[str, Any]] = {}
    failed: dict[str, str] = {}
    for system_name, system in systems.items():
        print(f"-- {name}: {system_name}", flush=True)
        begun = time.monotonic()
        try:
            result = system(workload, params)
            result.check(params)
        except BenchmarkError as exc:
            failed[system_name] = str(exc)
            print(f"-- {system_name} FAILED: {exc}", flush=True)
            continue
        summaries[system_name] = summarize(result)
        summaries[system_name]["run_s"] = round(time.monotonic() - begun, 1)
        s = summaries[system_name]
        hits = s.get("local_hit_ratio_mean")
        print(
            f"-- {system_name}: {s['rows_per_s']:.0f} rows/s, "
            f"commit p50 {s['commit_ms_p50']:.0f} ms "
            f"p99 {s['commit_ms_p99']:.0f} ms, batch p50 {s['batch_ms_p50']:.0f} ms, "
            f"{s['bytes_uploaded_per_checkpoint']} B/checkpoint"
            + (f", local hits {hits:.2f}" if hits is not None else ""),
            flush=True,
        )
    comparison = compare(summaries, gic)
    data: dict[str, Any] = {
        "workload": workload.describe(),
        "setup": {
            "master": params.master,
            "mode": params.mode,
            "executors": params.executors,
            "executor_memory_mib": params.executor_memory_mib,
            "shuffle_partitions": workload.partitions,
            "warmup_batches": params.warmup,
            "measured_batches": params.measured,
            "driver_memory": params.driver_memory,
            "quick": params.quick,
            "isolation": "each system in its own process and JVM, one after another",
            **(setup or {}),
        },
        "definitions": DEFINITIONS,
        "registered": list(SYSTEMS if registry is None else registry),
        "run": list(systems),
        "failed": failed,
        **comparison,
        "systems": summaries,
        "run_s": round(time.monotonic() - started, 1),
    }
    path = write(name, data, out_dir)
    print(f"wrote {path}", flush=True)
    if summaries:
        png = plots.plot(path.with_suffix(".png"), workload, params, summaries, title=name)
        print(f"wrote {png}", flush=True)
    return data
