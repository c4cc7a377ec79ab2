"""Cluster modes of the streaming benchmarks, and running a workload in each of them.

A :class:`Mode` says where tasks run:

``local2``
    ``local[2]``: one JVM, two task slots (the driver runs the tasks). Results keep the
    workload's own name (``w1_keyed_count.json``).
``cluster2`` / ``cluster3``
    ``local-cluster[N,1,M]``: N executor JVMs of one core and ``M`` MiB each
    (:data:`EXECUTOR_MEMORY_MIB`), started by Spark itself beside a small driver; results
    are ``<workload>_cluster2.json`` and ``_cluster3``.
``standalone2``
    a Spark standalone cluster of two one-core workers started from pyspark's jars
    (:func:`bench.cluster.running_cluster`) for the run of the workload in that mode.

Memory: at most three executors of 3 GiB plus a 2 GiB driver (and their Python workers),
well inside the 24 GiB of the benchmark machine.

The repeated comparisons (:mod:`bench.streaming.repeats`) run in the modes of
``GIC_BENCH_MODES`` (comma-separated, default :data:`DEFAULT_MODES`: what two cores
allow); each mode's description says how many task slots it has on how many cores
(:func:`contention`).

:func:`main_for` (one run per system, no longer used by W1 and W2) runs one workload in
every mode of ``GIC_BENCH_MODES``: in local mode every registered system, in cluster modes
Spark's three stores and ``gic`` (:data:`CLUSTER_SYSTEMS`), each mode a full
:func:`~bench.streaming.harness.run_benchmark` with its own JSON and PNG. Then it writes
``<workload>_modes.json`` (and PNG): per mode the systems' headline figures and GIC's
ratio against the best Spark store of the same mode, plus the multi-executor goal
(:func:`multi_executor_goal`). A mode or system that fails is reported and the others
still run; :func:`main_for` raises at the end if anything failed.

Not thread-safe: one benchmark run per process.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.cluster import ClusterError, running_cluster
from bench.streaming import harness, plots
from bench.streaming.records import BenchmarkError, BenchParams
from bench.streaming.workloads import KEYED_COUNT, WorkloadSpec

LOCAL, LOCAL_CLUSTER, STANDALONE = "local", "local-cluster", "standalone"
EXECUTOR_MEMORY_MIB = 3072
"""Heap of every executor in cluster modes (W2's Spark state is the largest user)."""
CLUSTER_DRIVER_MEMORY = "2g"
"""The driver only plans and collects acks once executors run the tasks."""
MODES_ENV = "GIC_BENCH_MODES"
DEFAULT_MODES = ("local2", "cluster2")
"""What the benchmark machine's two cores allow; ``cluster3`` (three one-core executors
on two cores) runs only when named, and its results say it measures contention
(:func:`contention`)."""
CLUSTER_SYSTEMS = ("spark_hdfs", "spark_rocksdb", "spark_rocksdb_changelog", "gic")
GOAL_MULTI_EXECUTOR_RATIO = 1.0
AIM_MULTI_EXECUTOR_RATIO = 1.5


@dataclass(frozen=True)
class Mode:
    """Where the tasks of a benchmark run."""

    name: str
    kind: str
    executors: int = 0
    executor_memory_mib: int = 0
    driver_memory: str = "6g"

    @property
    def suffix(self) -> str:
        """Added to result names; empty for ``local2`` so its files keep their names."""
        return "" if self.name == "local2" else f"_{self.name}"

    def master(self, url: str | None = None) -> str:
        """The Spark master URL (``url``: a running standalone cluster's)."""
        if self.kind == LOCAL:
            return "local[2]"
        if self.kind == LOCAL_CLUSTER:
            return f"local-cluster[{self.executors},1,{self.executor_memory_mib}]"
        if url is None:
            raise BenchmarkError(f"mode {self.name} needs the URL of a running cluster")
        return url

    @property
    def task_slots(self) -> int:
        """Tasks that run at once: two in ``local[2]``, one per executor otherwise."""
        return 2 if self.kind == LOCAL else self.executors

    def describe(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "kind": self.kind,
            "executors": self.executors,
            "executor_cores": 1 if self.executors else 0,
            "executor_memory_mib": self.executor_memory_mib,
            "driver_memory": self.driver_memory,
            "gic_local_dir": (
                "runtime default (executor-private)" if self.executors else "bench/scratch"
            ),
            **contention(self),
        }


def contention(mode: Mode, cores: int | None = None) -> dict[str, Any]:
    """The task slots of ``mode`` against the machine's cores (``cores``: default
    ``os.cpu_count()``): whether the run measures contention rather than scaling."""
    available = cores if cores is not None else (os.cpu_count() or 1)
    over = mode.task_slots > available
    if over:
        note = (
            f"{mode.task_slots} task slots on {available} cores: the executors take turns on "
            "the cores, so this mode measures contention, not scaling"
        )
    else:
        note = (
            f"{mode.task_slots} task slots on {available} cores; the driver, the executor "
            "JVMs and their Python workers share them"
        )
    return {"cores": available, "task_slots": mode.task_slots, "contention": over, "note": note}


def _cluster(name: str, kind: str, executors: int) -> Mode:
    return Mode(name, kind, executors, EXECUTOR_MEMORY_MIB, CLUSTER_DRIVER_MEMORY)


MODES: dict[str, Mode] = {
    "local2": Mode("local2", LOCAL),
    "cluster2": _cluster("cluster2", LOCAL_CLUSTER, 2),
    "cluster3": _cluster("cluster3", LOCAL_CLUSTER, 3),
    "standalone2": _cluster("standalone2", STANDALONE, 2),
}


def modes_from_env(
    environ: Mapping[str, str] = os.environ, default: Sequence[str] = DEFAULT_MODES
) -> list[Mode]:
    """The modes named in ``GIC_BENCH_MODES`` (default ``default``), in that order."""
    raw = environ.get(MODES_ENV, "")
    names = [n.strip() for n in raw.split(",") if n.strip()] or list(default)
    unknown = [n for n in names if n not in MODES]
    if unknown:
        raise BenchmarkError(
            f"{MODES_ENV} names unknown modes {unknown}; choose from {', '.join(MODES)}"
        )
    return [MODES[n] for n in names]


def mode_from_env(environ: Mapping[str, str], variable: str) -> Mode:
    """The one mode named by ``variable`` (default ``local2``)."""
    name = environ.get(variable, "").strip() or "local2"
    return modes_from_env({MODES_ENV: name})[0]


def systems_for(mode: Mode, names: Sequence[str]) -> list[str]:
    """The systems of ``names`` that run in ``mode`` (cluster modes: :data:`CLUSTER_SYSTEMS`)."""
    if mode.kind == LOCAL:
        return list(names)
    return [n for n in names if n in CLUSTER_SYSTEMS]


@contextlib.contextmanager
def params_for(mode: Mode, base: BenchParams) -> Iterator[BenchParams]:
    """``base`` adapted to ``mode``; a standalone cluster runs while the block runs."""
    if mode.kind != STANDALONE:
        yield adapt(base, mode, mode.master())
        return
    from bench import common

    base_dir = common.SCRATCH / "standalone"
    with running_cluster(mode.executors, 1, mode.executor_memory_mib, base_dir=base_dir) as cluster:
        yield adapt(base, mode, mode.master(cluster.master_url))


def adapt(base: BenchParams, mode: Mode, master: str) -> BenchParams:
    """``base`` with ``mode``'s master, executors and driver heap."""
    return dataclasses.replace(
        base,
        master=master,
        mode=mode.name,
        executors=mode.executors,
        executor_memory_mib=mode.executor_memory_mib,
        driver_memory=mode.driver_memory,
    )


# --- the overview across modes -------------------------------------------------------------

HEADLINE = (
    "rows_per_s",
    "commit_ms_p50",
    "commit_ms_p99",
    "batch_ms_p50",
    "bytes_uploaded_per_checkpoint",
    "local_hit_ratio_mean",
)


def mode_summary(mode: Mode, result_name: str, data: Mapping[str, Any]) -> dict[str, Any]:
    """The headline figures of one mode's result."""
    systems = data.get("systems", {})
    best = (data.get("best_spark") or {}).get("rows_per_s")
    gic = systems.get(harness.GIC)
    ratio = None
    if best is not None and gic is not None and systems[best]["rows_per_s"] > 0:
        ratio = round(gic["rows_per_s"] / systems[best]["rows_per_s"], 4)
    return {
        "master": data.get("setup", {}).get("master"),
        "executors": mode.executors,
        "result": f"{result_name}.json",
        "best_spark_rows_per_s": best,
        "gic_rows_per_s_vs_best_spark": ratio,
        "systems": {name: {k: s[k] for k in HEADLINE if k in s} for name, s in systems.items()},
        "failed": dict(data.get("failed", {})),
    }


def multi_executor_goal(modes: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """W1 goal: in every multi-executor mode, GIC's rows/s >= 1.0x the best Spark store of
    that mode (aim 1.5x) and GIC's mean local-hit ratio after warm-up >= 0.95."""
    per_mode: dict[str, Any] = {}
    for name, summary in modes.items():
        if summary.get("executors", 0) < 2:
            continue
        ratio = summary.get("gic_rows_per_s_vs_best_spark")
        hits = summary.get("systems", {}).get(harness.GIC, {}).get("local_hit_ratio_mean")
        throughput = None if ratio is None else ratio >= GOAL_MULTI_EXECUTOR_RATIO
        local = None if hits is None else hits >= harness.GOAL_LOCAL_HIT_RATIO
        per_mode[name] = {
            "gic_rows_per_s_vs_best_spark": ratio,
            "throughput_met": throughput,
            "aim_met": None if ratio is None else ratio >= AIM_MULTI_EXECUTOR_RATIO,
            "local_hit_ratio_mean": hits,
            "local_hit_met": local,
            "met": None if throughput is None or local is None else throughput and local,
        }
    verdicts = [m["met"] for m in per_mode.values()]
    return {
        "goal": (
            f"multi-executor rows/s >= {GOAL_MULTI_EXECUTOR_RATIO}x the best Spark store in "
            f"the same mode (aim {AIM_MULTI_EXECUTOR_RATIO}x), mean local-hit ratio >= "
            f"{harness.GOAL_LOCAL_HIT_RATIO} after warm-up"
        ),
        "modes": per_mode,
        "met": None if not verdicts or None in verdicts else all(verdicts),
        "how": (
            "per mode with 2+ executors: gic.rows_per_s / the highest Spark rows_per_s of "
            "that mode's run, and gic.local_hit_ratio_mean over its measured batches; met "
            "only if every such mode meets both; null: a needed system did not run or failed"
        ),
    }


def _write_overview(
    workload: WorkloadSpec, base: BenchParams, modes: Mapping[str, Any], out_dir: Path | None
) -> None:
    goal = multi_executor_goal(modes)
    if workload.kind != KEYED_COUNT:
        goal["note"] = "the goal is set for W1; reported here for information"
    name = f"{workload.name}_modes"
    data = {
        "workload": workload.describe(),
        "setup": {
            "warmup_batches": base.warmup,
            "measured_batches": base.measured,
            "quick": base.quick,
            "modes": {m: MODES[m].describe() for m in modes},
        },
        "modes": modes,
        "goals": {"multi_executor": goal},
    }
    path = harness.write(name, data, out_dir)
    print(f"wrote {path}", flush=True)
    png = plots.plot_modes(path.with_suffix(".png"), name, modes)
    print(f"wrote {png}", flush=True)
    print(f"goals: {json.dumps(goal)}", flush=True)


def main_for(make_workload: Callable[[bool], WorkloadSpec]) -> None:
    """Entry point of one workload: every mode, everything from the environment."""
    base = harness.params_from_env()
    workload = make_workload(base.quick)
    names = harness.chosen_systems(harness.SYSTEMS)
    out_dir = harness.QUICK_RESULTS if base.quick else None
    modes: dict[str, Any] = {}
    failures: list[str] = []
    for mode in modes_from_env():
        chosen = systems_for(mode, names)
        if not chosen:
            continue
        result_name = f"{workload.name}{mode.suffix}"
        print(f"== {result_name} ({mode.name})", flush=True)
        try:
            with params_for(mode, base) as params:
                data = harness.run_benchmark(
                    workload,
                    params,
                    {n: harness.SYSTEMS[n] for n in chosen},
                    out_dir,
                    name=result_name,
                    setup={"cluster_mode": mode.describe()},
                )
        except ClusterError as exc:
            failures.append(f"{mode.name}: {exc}")
            print(f"-- mode {mode.name} FAILED: {exc}", flush=True)
            continue
        print(f"goals: {json.dumps(data['goals'])}", flush=True)
        modes[mode.name] = mode_summary(mode, result_name, data)
        failures += [f"{mode.name}/{n}" for n in data["failed"]]
    if modes:
        _write_overview(workload, base, modes, out_dir)
    if failures:
        raise BenchmarkError(
            f"{len(failures)} run(s) failed: {', '.join(failures)}; the result files list "
            "their errors and the logs are under bench/scratch/logs"
        )
