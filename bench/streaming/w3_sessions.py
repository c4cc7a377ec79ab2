"""W3, sessions over event time: GIC's timers against Spark's ``transformWithState``.

Each key's session closes :data:`~bench.streaming.timed_workloads.SESSION_GAP_MS` after
its last event; the event-time timer that closes it emits ``key, start, end, events``
(:mod:`bench.streaming.timed_workloads`: ``rate-micro-batch`` with event time advancing
10 s per batch, 300,000 keys, 50,000 rows per batch). Systems, all writing their
sessions to Parquet:

``gic_per_key`` / ``gic_batches``
    GIC with ``process(..., on_timer=...)`` (per key, as ``examples/sessions.py``) and
    with ``process_batches(..., on_timers=...)`` (vectorized)
    (:mod:`bench.streaming.gic_timed`).
``spark_tws_pandas`` / ``spark_tws_row``
    the same logic through ``transformWithStateInPandas`` and ``transformWithState``
    (Row API), event-time timers, RocksDB state store
    (:mod:`bench.streaming.spark_sessions`).

Goal (per mode, ``local[2]`` and two executors): the faster GIC variant's rows/s at
least :data:`GOAL` times the faster Spark API's in the same round (aim :data:`AIM`),
median over the rounds; every run's sessions identical (recorded under ``outputs``).
Run: ``.venv/bin/python -m bench w3_sessions`` (``GIC_BENCH_QUICK=1``: a smoke run; see
:mod:`bench.streaming.repeats` for the other variables). Writes
``bench/results/w3_sessions.json`` and ``.png``.
"""

from __future__ import annotations

from typing import Any

from bench.streaming import harness, runner
from bench.streaming.records import BenchParams, RunResult
from bench.streaming.repeats import Comparison, run_comparison
from bench.streaming.runner import SystemFn
from bench.streaming.timed_workloads import sessions
from bench.streaming.workloads import WorkloadSpec

SPARK_TIMED = "bench.streaming.spark_timed:run_spark_timed"
GOAL, AIM = 5.0, 10.0


def gic_system(name: str, **options: Any) -> SystemFn:
    """GIC (``run_gic``, variant ``gic``) with ``options``, logged as ``name``."""

    def run(workload: WorkloadSpec, params: BenchParams) -> RunResult:
        opts = {"output": True, **options}
        return runner.run_in_subprocess(
            harness.GIC_TARGET, "gic", workload, params, options=opts, tag=name
        )

    return run


def spark_system(variant: str) -> SystemFn:
    """A system of :mod:`bench.streaming.spark_timed`."""
    return runner.in_subprocess(SPARK_TIMED, variant)


COMPARISON = Comparison(
    name="w3_sessions",
    workload=sessions,
    systems={
        "gic_per_key": gic_system("gic_per_key", processor="per_key"),
        "gic_batches": gic_system("gic_batches", processor="batches"),
        "spark_tws_pandas": spark_system("spark_tws_pandas"),
        "spark_tws_row": spark_system("spark_tws_row"),
    },
    baselines=("spark_tws_pandas", "spark_tws_row"),
    contenders=("gic_per_key", "gic_batches"),
    goal=GOAL,
    aim=AIM,
)


def main() -> None:
    run_comparison(COMPARISON)


if __name__ == "__main__":
    main()
