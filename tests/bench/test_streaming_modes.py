"""Cluster modes of the streaming benchmarks: mode selection, per-mode runs and the
overview with the multi-executor goal (on synthetic systems), the executor settings a
cluster-mode session gets, and a real standalone cluster running a trivial job."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import types
from pathlib import Path

import pytest
from bench.streaming import harness, modes, spark_query
from bench.streaming.records import BatchRecord, BenchmarkError, BenchParams, RunResult
from bench.streaming.runner import SystemFn
from bench.streaming.workloads import WorkloadSpec, keyed_count

from bench import __main__ as bench_main
from bench import cluster


def _system(batch_ms: float, local_hits: int | None = None) -> SystemFn:
    """A system whose batches all take ``batch_ms``; with ``local_hits`` (of 10 used
    buckets) it reports GIC's bucket counters."""

    def run(workload: WorkloadSpec, params: BenchParams) -> RunResult:
        parts = (
            {} if local_hits is None else {"local_hits": local_hits, "restored": 10 - local_hits}
        )
        records = [
            BatchRecord(b, workload.rows_per_batch, batch_ms, 10.0, 100, {**parts})
            for b in range(params.total_batches)
        ]
        return RunResult("s", tuple(records[: params.warmup]), tuple(records[params.warmup :]))

    return run


def test_modes_come_from_the_environment_in_order() -> None:
    assert [m.name for m in modes.modes_from_env({})] == ["local2", "cluster2"]
    chosen = modes.modes_from_env({"GIC_BENCH_MODES": "cluster3, standalone2"})
    assert [m.name for m in chosen] == ["cluster3", "standalone2"]
    assert modes.mode_from_env({}, "GIC_BENCH_SOAK_MODE").name == "local2"
    assert modes.mode_from_env({"X": "cluster2"}, "X").executors == 2
    with pytest.raises(BenchmarkError, match="unknown modes"):
        modes.modes_from_env({"GIC_BENCH_MODES": "local2,yarn"})


def test_a_mode_sets_master_executors_and_result_names() -> None:
    local, two, three = (modes.MODES[n] for n in ("local2", "cluster2", "cluster3"))
    assert (local.master(), local.suffix) == ("local[2]", "")
    assert two.master() == f"local-cluster[2,1,{modes.EXECUTOR_MEMORY_MIB}]"
    assert three.suffix == "_cluster3"
    with pytest.raises(BenchmarkError, match="URL of a running cluster"):
        modes.MODES["standalone2"].master()
    params = modes.adapt(BenchParams(), three, three.master())
    assert (params.mode, params.executors, params.cluster) == ("cluster3", 3, True)
    assert params.driver_memory == modes.CLUSTER_DRIVER_MEMORY
    everything = list(harness.SYSTEMS)
    assert modes.systems_for(local, everything) == everything
    assert modes.systems_for(two, everything) == list(modes.CLUSTER_SYSTEMS)
    with pytest.raises(BenchmarkError, match="both be set"):
        BenchParams(executors=2)


def test_cluster_sessions_size_executors_and_pass_the_workers_environment() -> None:
    assert spark_query.cluster_conf(BenchParams()) == {}
    params = modes.adapt(BenchParams(), modes.MODES["cluster2"], "local-cluster[2,1,3072]")
    environ = {"PYSPARK_PYTHON": "/venv/python", "PYTHONPATH": "/repo", "HOME": "/root"}
    conf = spark_query.cluster_conf(params, environ)
    assert conf["spark.executor.memory"] == f"{modes.EXECUTOR_MEMORY_MIB}m"
    assert conf["spark.executor.cores"] == "1" and conf["spark.cores.max"] == "2"
    assert conf["spark.executorEnv.PYSPARK_PYTHON"] == "/venv/python"
    assert conf["spark.executorEnv.PYTHONPATH"] == "/repo"
    assert "spark.executorEnv.HOME" not in conf


def test_local_hit_ratio_is_summarized_and_becomes_a_goal(tmp_path: Path) -> None:
    systems = {"spark_a": _system(200.0), "gic": _system(100.0, local_hits=9)}
    data = harness.run_benchmark(keyed_count(quick=True), BenchParams(1, 2), systems, tmp_path)
    assert data["systems"]["gic"]["local_hit_ratio_mean"] == pytest.approx(0.9)
    assert "local_hit_ratio_mean" not in data["systems"]["spark_a"]
    assert data["goals"]["local_hit_met"] is False
    assert data["goals"]["throughput_met"] is True


def test_multi_executor_goal_needs_every_cluster_mode_to_meet_both_parts() -> None:
    def summary(executors: int, ratio: float | None, hits: float | None) -> dict[str, object]:
        gic = {} if hits is None else {"local_hit_ratio_mean": hits}
        return {
            "executors": executors,
            "gic_rows_per_s_vs_best_spark": ratio,
            "systems": {"gic": gic},
        }

    good = {"local2": summary(0, 0.5, 1.0), "cluster2": summary(2, 1.6, 0.97)}
    goal = modes.multi_executor_goal(good)
    assert list(goal["modes"]) == ["cluster2"]  # local mode is not multi-executor
    assert goal["modes"]["cluster2"]["aim_met"] is True and goal["met"] is True

    mixed = {**good, "cluster3": summary(3, 1.2, 0.90)}
    goal = modes.multi_executor_goal(mixed)
    three = goal["modes"]["cluster3"]
    assert (three["throughput_met"], three["aim_met"], three["local_hit_met"]) == (
        True,
        False,
        False,
    )
    assert goal["met"] is False

    missing = {"cluster2": summary(2, None, 0.99)}
    assert modes.multi_executor_goal(missing)["met"] is None
    assert modes.multi_executor_goal({"local2": summary(0, 2.0, 1.0)})["met"] is None


def test_main_for_runs_every_mode_and_writes_an_overview(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    registry = {
        "spark_hdfs": _system(200.0),
        "spark_rocksdb": _system(250.0),
        "gic_no_changelog": _system(300.0, local_hits=10),
        "gic": _system(100.0, local_hits=10),
    }
    monkeypatch.setattr(harness, "SYSTEMS", registry)
    monkeypatch.setattr(harness, "QUICK_RESULTS", tmp_path)
    monkeypatch.setenv("GIC_BENCH_QUICK", "1")
    monkeypatch.setenv("GIC_BENCH_MODES", "local2,cluster2")
    monkeypatch.delenv("GIC_BENCH_SYSTEMS", raising=False)

    modes.main_for(keyed_count)

    local = json.loads((tmp_path / "w1_keyed_count.json").read_text())
    cluster2 = json.loads((tmp_path / "w1_keyed_count_cluster2.json").read_text())
    assert set(local["systems"]) == set(registry)
    assert set(cluster2["systems"]) == {"spark_hdfs", "spark_rocksdb", "gic"}
    assert cluster2["setup"]["master"].startswith("local-cluster[2,1,")
    assert cluster2["setup"]["cluster_mode"]["gic_local_dir"].startswith("runtime default")
    overview = json.loads((tmp_path / "w1_keyed_count_modes.json").read_text())
    assert list(overview["modes"]) == ["local2", "cluster2"]
    assert overview["modes"]["cluster2"]["gic_rows_per_s_vs_best_spark"] == pytest.approx(2.0)
    assert overview["modes"]["cluster2"]["result"] == "w1_keyed_count_cluster2.json"
    assert overview["goals"]["multi_executor"]["met"] is True
    for name in ("w1_keyed_count", "w1_keyed_count_cluster2", "w1_keyed_count_modes"):
        assert (tmp_path / f"{name}.png").stat().st_size > 0


def test_bench_main_reports_a_failing_benchmark_and_runs_the_next(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    ran: list[str] = []
    broken, fine = types.ModuleType("broken_bench"), types.ModuleType("fine_bench")

    def fail() -> None:
        raise BenchmarkError("no JVM today")

    broken.main = fail  # type: ignore[attr-defined]
    fine.main = lambda: ran.append("fine")  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "broken_bench", broken)
    monkeypatch.setitem(sys.modules, "fine_bench", fine)
    monkeypatch.setattr(bench_main, "BENCHMARKS", ("broken", "fine"))
    monkeypatch.setattr(bench_main, "MODULES", {"broken": "broken_bench", "fine": "fine_bench"})

    assert bench_main.main([]) == 1
    assert ran == ["fine"]
    assert "failed: broken" in capsys.readouterr().out


TRIVIAL_JOB = """
import os, sys, time
from pyspark.sql import SparkSession
spark = (SparkSession.builder.master(sys.argv[1]).config("spark.ui.enabled", "false")
    .config("spark.executor.memory", "512m").config("spark.cores.max", "2").getOrCreate())
while spark.sparkContext._jsc.sc().getExecutorMemoryStatus().size() < 3:  # driver + 2
    time.sleep(0.2)
rdd = spark.sparkContext.parallelize(range(1000), 4)
print("RESULT", rdd.sum(), len(set(rdd.map(lambda _: os.getpid()).collect())))
spark.stop()
"""


@pytest.mark.slow
def test_standalone_cluster_runs_a_job_on_its_workers_and_stops_them(tmp_path: Path) -> None:
    with cluster.running_cluster(workers=2, cores=1, memory_mib=1024, base_dir=tmp_path) as c:
        assert c.master_url.startswith("spark://127.0.0.1:")
        assert cluster.alive_workers(c.webui_url) == 2
        env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1", "PYSPARK_PYTHON": sys.executable}
        done = subprocess.run(
            [sys.executable, "-c", TRIVIAL_JOB, c.master_url],
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        assert done.returncode == 0, done.stderr[-2000:]
        line = next(x for x in done.stdout.splitlines() if x.startswith("RESULT"))
        assert line.split()[1] == "499500"
        assert line.split()[2] == "2"  # one Python worker per executor, two executors
        work = [p.name for p in (c.directory / "worker-0" / "work").iterdir()]
        assert work and all(name.startswith("app-") for name in work)
        pids = c.pids
    for pid in pids:
        with pytest.raises(ProcessLookupError):
            os.killpg(pid, 0)
    assert list(tmp_path.iterdir()) == []
