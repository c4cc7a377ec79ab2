"""The systems of the repeated comparisons of W1, W2 and W1 on S3, each a
:data:`~bench.streaming.runner.SystemFn` that runs in its own process and JVM and writes
its output to Parquet, fingerprinted (:mod:`bench.streaming.outputs`), so that every run
of a comparison can be checked to have written the same rows.

``gic(variant)``
    GIC (:func:`bench.streaming.gic_runner.run_gic`: ``gic``, ``gic_no_changelog``,
    ``gic_s3``) with its output in a Parquet sink.
``spark_store(variant)``
    Spark's aggregation with one of its state stores
    (:func:`bench.streaming.spark_stores.run_spark_store`, ``_s3a`` variants included),
    ``foreachBatch`` to Parquet.
``no_state()``
    The query without state (:data:`bench.streaming.spark_stores.NO_STATE`): a
    comparison's ``floor``, writing no output.
``spark_event_log(variant)``
    W2's list state through ``transformWithState`` / ``transformWithStateInPandas``
    (:mod:`bench.streaming.spark_event_log`).

:func:`gic_against` builds the comparison W1 and W2 share: Spark's systems as the
baselines, ``gic`` the contender, ``gic_no_changelog`` beside it in local modes.

Stateless; safe from any thread.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from bench.streaming import runner, spark_stores
from bench.streaming.records import BenchParams, RunResult
from bench.streaming.repeats import Comparison
from bench.streaming.runner import SystemFn
from bench.streaming.workloads import WorkloadSpec

GIC_TARGET = "bench.streaming.gic_runner:run_gic"
SPARK_STORE_TARGET = "bench.streaming.spark_stores:run_spark_store"
SPARK_EVENT_LOG_TARGET = "bench.streaming.spark_event_log:run_spark_event_log"


def _system(target: str, variant: str, options: dict[str, Any]) -> SystemFn:
    def run(workload: WorkloadSpec, params: BenchParams) -> RunResult:
        return runner.run_in_subprocess(target, variant, workload, params, options=options)

    run.__name__ = f"run_{variant}"
    return run


def gic(variant: str, **options: Any) -> SystemFn:
    """GIC as ``variant``, writing its output to Parquet."""
    return _system(GIC_TARGET, variant, {"output": True, **options})


def spark_store(variant: str, **options: Any) -> SystemFn:
    """Spark's aggregation on the ``variant`` store, writing its output to Parquet."""
    return _system(SPARK_STORE_TARGET, variant, {"output": True, **options})


NO_STATE = spark_stores.NO_STATE
"""The name :func:`no_state` runs under."""


def no_state() -> SystemFn:
    """The workload's query without state: each batch aggregated alone, no output."""
    return _system(SPARK_STORE_TARGET, NO_STATE, {})


def spark_event_log(variant: str) -> SystemFn:
    """W2 through Spark's ``transformWithState`` APIs (``variant`` of
    :data:`bench.streaming.spark_event_log.VARIANTS`)."""
    return _system(SPARK_EVENT_LOG_TARGET, variant, {})


def gic_against(
    name: str,
    workload: Callable[[bool], WorkloadSpec],
    baselines: Mapping[str, SystemFn],
    *,
    goal: float,
    batches: tuple[int, int] | None = None,
    floor: bool = False,
) -> Comparison:
    """The comparison ``name``: ``gic`` (the contender, to beat the best of ``baselines``
    by ``goal``) and the ``baselines``, with ``gic_no_changelog`` shown beside them in
    local modes and, with ``floor``, the query without state (:func:`no_state`) in every
    mode."""
    extra = {NO_STATE: no_state()} if floor else {}
    return Comparison(
        name=name,
        workload=workload,
        systems={
            **baselines,
            "gic": gic("gic"),
            "gic_no_changelog": gic("gic_no_changelog"),
            **extra,
        },
        baselines=tuple(baselines),
        contenders=("gic",),
        goal=goal,
        local_only=("gic_no_changelog",),
        batches=batches,
        floor=NO_STATE if floor else None,
    )
