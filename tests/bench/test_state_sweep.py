"""The state-size sweep's pure parts: sizes to key counts and payloads, the workload,
environment parsing, the heap rule of the HDFS store, restart figures, measures, goals,
result shaping and kept sizes. No timing assertions."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from bench.streaming import memory_sampling, outputs, s3a, state_sweep
from bench.streaming.records import BatchRecord, BenchmarkError, RunResult
from bench.streaming.state_sweep import FLOOR, GIC, HDFS, ROCKSDB, SIZES, StateSize
from bench.streaming.workloads import KEYED_COUNT, KEYED_PAYLOAD, WorkloadSpec, payload_hashes


def test_each_size_sets_keys_from_the_state_bytes_and_the_value_bytes() -> None:
    labels = [s.label for s in SIZES]
    assert labels == ["10MB", "100MB", "1GB", "4GB"]
    for size in SIZES:
        assert size.bytes_per_key == 8 + 8 + size.value_bytes
        assert size.keys == size.state_bytes // size.bytes_per_key
        assert abs(size.keys * size.bytes_per_key - size.state_bytes) < size.bytes_per_key
    assert SIZES[-1].state_bytes >= 4 * SIZES[2].state_bytes
    assert [s.value_bytes for s in SIZES] == sorted(s.value_bytes for s in SIZES)
    assert [s.keys for s in SIZES] == sorted(s.keys for s in SIZES)


def test_the_workload_loads_every_key_before_the_measured_batches() -> None:
    size = StateSize("x", 1_000_000, 100)
    spec = state_sweep.workload(size)
    assert spec.kind == KEYED_PAYLOAD
    assert spec.value_bytes == 100
    assert spec.keys == 1_000_000 // 116
    assert spec.load_batches == -(-spec.keys // spec.rows_per_batch)
    warmup, measured = state_sweep.batches(spec, {})
    assert warmup == spec.load_batches + state_sweep.WARMUP_AFTER_LOAD
    assert measured == state_sweep.MEASURED
    assert state_sweep.batches(spec, {"GIC_BENCH_WARMUP": "0", "GIC_BENCH_MEASURED": "4"}) == (
        spec.load_batches,
        4,
    )
    quick = state_sweep.workload(size, quick=True)
    assert quick.keys == spec.keys // state_sweep.QUICK_DIVISOR
    # every system's query runs at the same partitions, the default or the one set
    assert state_sweep.workload(size, environ={}).partitions == state_sweep.PARTITIONS
    two = {state_sweep.PARTITIONS_ENV: "2"}
    assert state_sweep.workload(size, environ=two).partitions == 2
    with pytest.raises(BenchmarkError, match="at least 1"):
        state_sweep.partitions_from_env({state_sweep.PARTITIONS_ENV: "0"})


def test_payload_workload_json_round_trips_and_others_keep_their_json() -> None:
    spec = state_sweep.workload(SIZES[0])
    assert WorkloadSpec.from_json(spec.to_json()) == spec
    described = spec.describe()
    assert "payload" in described and "load phase" in described["key"]
    plain = WorkloadSpec("w1", KEYED_COUNT, 10, 10, 1)
    assert "value_bytes" not in plain.to_json()
    assert plain.load_batches == 0
    with pytest.raises(BenchmarkError):
        WorkloadSpec("bad", KEYED_PAYLOAD, 10, 10, 1)
    with pytest.raises(BenchmarkError):
        WorkloadSpec("bad", KEYED_COUNT, 10, 10, 1, value_bytes=5)
    assert payload_hashes(1) == 1
    assert payload_hashes(128) == 1
    assert payload_hashes(129) == 2
    assert payload_hashes(2000) == 16


def test_sizes_come_from_the_environment_in_sweep_order() -> None:
    env = state_sweep.SIZES_ENV
    reference = state_sweep.RSS_REFERENCE
    assert state_sweep.sizes_from_env({}) == [*SIZES, reference]
    chosen = state_sweep.sizes_from_env({env: "100mb-2kb, 100mb, 10MB"})
    assert [s.label for s in chosen] == ["10MB", "100MB", "100MB-2KB"]
    with pytest.raises(BenchmarkError, match="unknown sizes"):
        state_sweep.sizes_from_env({env: "3GB"})


def test_hdfs_runs_only_where_its_versions_fit_in_half_the_heap() -> None:
    heap = state_sweep.memory_bytes("6g")
    assert heap == 6 << 30
    assert state_sweep.memory_bytes("3072m") == 3 << 30
    with pytest.raises(BenchmarkError):
        state_sweep.memory_bytes("lots")
    runs = {s.label: state_sweep.systems_for(s, heap, {}) for s in state_sweep.ALL_SIZES}
    assert runs["100MB-2KB"] == [GIC]  # a base of comparison for GIC's memory only
    assert runs["10MB"] == [GIC, ROCKSDB, HDFS, FLOOR]
    assert runs["100MB"] == [GIC, ROCKSDB, HDFS, FLOOR]
    assert runs["4GB"] == [GIC, ROCKSDB, FLOOR]
    assert state_sweep.systems_for(SIZES[2], 2 << 30, {}) == [GIC, ROCKSDB, FLOOR]
    only = {"GIC_BENCH_SYSTEMS": f"{GIC},{ROCKSDB}"}
    assert state_sweep.systems_for(SIZES[0], heap, only) == [GIC, ROCKSDB]
    with pytest.raises(BenchmarkError):
        state_sweep.systems_for(SIZES[0], heap, {"GIC_BENCH_SYSTEMS": "gic"})


def test_back_to_steady_counts_batches_until_one_is_steady() -> None:
    steady = 100.0
    assert state_sweep.back_to_steady_ms(1000.0, [110.0, 90.0], steady) == 1000.0
    assert state_sweep.back_to_steady_ms(1000.0, [900.0, 400.0, 120.0, 90.0], steady) == 1520.0
    assert state_sweep.back_to_steady_ms(1000.0, [900.0, 400.0], steady) is None


def _record(batch: int, ms: float, **parts: float) -> BatchRecord:
    return BatchRecord(batch, 10, ms, 1.0, 100, parts)


def test_restarts_write_no_output_and_gic_restores_from_storage() -> None:
    runs = state_sweep.SizeRuns(state_sweep.workload(SIZES[0]), output=True)
    assert runs.options(GIC)["output"] is True and runs.options(ROCKSDB)["output"] is True
    assert runs.options(FLOOR)["output"] is False
    gic = runs.restart_options(GIC)
    assert gic["output"] is False and gic["local_dir"] == "local-restart"
    spark = runs.restart_options(ROCKSDB)
    assert spark["output"] is False and spark["spark_retention"] is True


def test_restart_figures_come_from_the_restarted_run() -> None:
    result = RunResult(
        "gic_s3",
        (),
        (_record(7, 900.0, restored=128.0, local_hits=0.0), _record(8, 100.0)),
        {"to_first_batch_ms": 2000.0, "before_first_batch_ms": 1100.0, "rss_peak_bytes": 5.0},
    )
    figures = state_sweep.restart_figures(result, 100.0)
    assert figures["to_first_batch_ms"] == 2000.0
    assert figures["back_to_steady_ms"] == 2100.0
    assert figures["restored_buckets"] == 128.0
    assert figures["batch_ms"] == [900.0, 100.0]
    assert figures["first_batch_parts"]["restored"] == 128.0  # where the first batch went


def _restart(first: float, steady: float | None, marker: str) -> dict[str, Any]:
    return {
        "steady_batch_ms": 100.0,
        "to_first_batch_ms": first,
        "before_first_batch_ms": 10.0,
        "first_batch_ms": first - 10.0,
        "back_to_steady_ms": steady,
        "rss_peak_bytes": 5.0,
        "batch_ms": [first - 10.0],
        "first_batch_parts": {"marker": marker},
    }


def test_restarts_combine_as_medians_with_their_spread_and_every_run() -> None:
    runs = [
        _restart(3000.0, 3500.0, "a"),
        {"error": "the restart did not finish"},
        _restart(1000.0, None, "b"),
        _restart(2000.0, 2600.0, "c"),
    ]
    combined = state_sweep.combine_restarts(runs)
    assert combined["to_first_batch_ms"] == 2000.0
    assert combined["spread"]["to_first_batch_ms"] == {
        "median": 2000.0,
        "min": 1000.0,
        "max": 3000.0,
        "n": 3,
    }
    # a restart that never got back to steady has no figure to count
    assert combined["back_to_steady_ms"] == 3050.0
    assert combined["spread"]["back_to_steady_ms"]["n"] == 2
    assert combined["first_batch_parts"] == {"marker": "c"}  # the median restart's
    assert combined["restarts"] == 3 and combined["runs"] == runs
    failed = state_sweep.combine_restarts([{"error": "x"}, {"error": "y"}])
    assert failed["error"] == "x" and len(failed["runs"]) == 2


def test_restarts_come_from_the_environment() -> None:
    assert state_sweep.restarts_from_env({}) == state_sweep.RESTARTS == 3
    assert state_sweep.restarts_from_env({"GIC_BENCH_QUICK": "1"}) == 1
    assert state_sweep.restarts_from_env({"GIC_BENCH_RESTARTS": "5"}) == 5
    for bad in ("0", "two"):
        with pytest.raises(BenchmarkError, match="GIC_BENCH_RESTARTS"):
            state_sweep.restarts_from_env({"GIC_BENCH_RESTARTS": bad})


def test_every_gic_restart_starts_on_an_empty_local_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    runs = state_sweep.SizeRuns(state_sweep.workload(SIZES[0]), output=False)
    scratch = tmp_path / "run"
    runs.last[GIC] = scratch
    local = scratch / runs.restart_options(GIC)["local_dir"]
    seen: list[bool] = []

    def fake_run(*_args: Any, **kwargs: Any) -> RunResult:  # the subprocess seam
        seen.append(local.exists())
        (kwargs["scratch"] / "local-restart" / "bucket-00000").mkdir(parents=True)
        return RunResult(GIC, (), (), {})

    monkeypatch.setattr(state_sweep.runner, "run_in_subprocess", fake_run)
    params = state_sweep.harness.params_from_env({"GIC_BENCH_QUICK": "1"})
    for _ in range(2):
        runs.restart(GIC, params)
    assert seen == [False, False]  # the second restart did not find the first's copy


def _run(system: str, rows_per_s: float, p99: float, nbytes: float, rss: float) -> dict[str, Any]:
    gic = system == GIC
    return {
        "rows_per_s": rows_per_s,
        "commit_with_logs_ms_p50": p99 / 2,
        "commit_with_logs_ms_p99": p99,
        "batch_ms_p50": 1000.0,
        "bytes_uploaded_per_checkpoint": nbytes,
        "notes": {
            "kind": "gic" if gic else "spark_baseline",
            "stored_bytes": 10 * nbytes,
            "rss_peak_bytes": rss * 1.5,
            "rss_steady_bytes": rss,
            "pss_anon_steady_bytes": rss / 2,
            **({"gic_settings": {"materialization_interval_s": 30.0}} if gic else {}),
        },
        "measured_batches": [
            {
                "batch_ms": 1000.0,
                "parts": {"changelog_bytes": 800.0, "state_snapshot_bytes": 6000.0},
            }
        ]
        * 2,
        "warmup_batches": [{"batch_ms": 5.0}],
    }


def _section(gic_rss: float = 1e9) -> dict[str, Any]:
    rounds = [
        {
            GIC: _run(GIC, 3000.0 + i, 100.0, 1000.0, gic_rss),
            ROCKSDB: _run(ROCKSDB, 1000.0, 400.0, 20000.0, 2e9),
        }
        for i in range(3)
    ]
    return {
        "systems": {GIC: {}, ROCKSDB: {}},
        "rounds": rounds,
        "ratios": {"ratios": {GIC: {"median": 3.001, "per_round": [3.0, 3.001, 3.002]}}},
        "outputs": {"identical": True},
        "failed": {},
    }


def test_measures_and_goals_are_computed_from_the_runs() -> None:
    restart = {
        GIC: {"to_first_batch_ms": 1000.0, "back_to_steady_ms": 3000.0},
        ROCKSDB: {"to_first_batch_ms": 5000.0, "back_to_steady_ms": 6000.0},
    }
    size = next(s for s in SIZES if s.label == "4GB")
    spec = state_sweep.workload(size)
    data = state_sweep.shape_size(size, spec, _section(), restart, 12.34)

    gic = data["measures"][GIC]
    assert gic["rows_per_s"]["median"] == 3001.0
    assert gic["rows_per_s"]["min"] == 3000.0
    assert gic["changelog_bytes_per_checkpoint"]["median"] == 800.0
    assert gic["interval_spread_bytes"]["median"] == 200.0  # 6000 B x 1 s / 30 s
    # the changelog-ratio trigger (1.0 by default) snapshots a changelog's worth per batch
    assert gic["materialization_spread_bytes"]["median"] == 800.0
    assert "changelog_bytes_per_checkpoint" not in data["measures"][ROCKSDB]
    assert all("warmup_batches" not in run for r in data["rounds"] for run in r.values())
    assert data["run_s"] == 12.3

    goals = data["goals"]
    assert all(g["applies"] for g in goals.values())
    assert goals["throughput"]["met"] is True and goals["throughput"]["aim_met"] is True
    assert goals["commit_p99"]["ratio_vs_rocksdb_changelog"] == 0.25
    assert goals["commit_p99"]["met"] is True
    assert goals["bytes_vs_changelog_plus_spread"]["ratio"] == 0.625  # 1000 / (800 + 800)
    assert goals["bytes_vs_changelog_plus_spread"]["met"] is True
    interval_only = goals["bytes_vs_changelog_plus_spread"]
    assert interval_only["ratio_to_changelog_plus_interval_spread_only"] == 1.0  # / (800 + 200)
    assert goals["bytes_vs_rocksdb"]["rocksdb_over_gic"] == 20.0
    assert goals["restart_first_batch"]["met"] is True  # 0.2
    assert goals["restart_back_to_steady"]["met"] is True  # 0.5

    small = state_sweep.shape_size(SIZES[1], state_sweep.workload(SIZES[1]), _section(), {}, 1.0)
    assert not any(g["applies"] for g in small["goals"].values())
    assert small["goals"]["restart_first_batch"]["met"] is None  # not measured


def test_the_ceiling_is_the_floor_over_rocksdb_per_round() -> None:
    section = _section()
    size = SIZES[2]
    plain = state_sweep.shape_size(size, state_sweep.workload(size), section, {}, 1.0)
    assert plain["goals"]["throughput"]["reachable"] is None  # no floor run
    assert "ceiling" not in plain
    for i, r in enumerate(section["rounds"]):
        r[FLOOR] = _run(FLOOR, 1500.0 + 100 * i, 50.0, 10.0, 1e9)
    data = state_sweep.shape_size(size, state_sweep.workload(size), section, {}, 1.0)
    bound = data["ceiling"]
    # per round 1500/1000, 1600/1000, 1700/1000
    assert bound["floor_over_best_baseline"]["median"] == 1.6
    assert bound["floor_over_best_baseline"]["min"] == 1.5
    assert bound["contenders_over_floor"][GIC]["median"] == round(3001 / 1600, 4)
    throughput = data["goals"]["throughput"]
    assert throughput["ceiling_ratio"] == 1.6
    assert throughput["reachable"] is False  # a free store would reach 1.6x, not 2x
    again = state_sweep.reshape({"sizes": {"1GB": {**data, "goals": {}}}})
    assert again["sizes"]["1GB"]["goals"]["throughput"]["reachable"] is False
    assert again["sizes"]["1GB"]["ceiling"] == bound


def test_goals_not_met_say_so() -> None:
    section = _section()
    for r in section["rounds"]:
        r[GIC]["commit_with_logs_ms_p99"] = 300.0
    section["ratios"]["ratios"][GIC]["median"] = 1.5
    data = state_sweep.shape_size(SIZES[2], state_sweep.workload(SIZES[2]), section, {}, 1.0)
    goals = data["goals"]
    assert goals["throughput"]["met"] is False
    assert goals["commit_p99"]["met"] is False  # 300 / 400
    assert goals["bytes_vs_rocksdb"]["applies"] is False  # 4 GB only


def test_rss_goal_compares_4gb_with_100mb_and_the_summary_lists_applying_goals() -> None:
    def shaped(size: StateSize, rss: float) -> dict[str, Any]:
        return state_sweep.shape_size(size, state_sweep.workload(size), _section(rss), {}, 1.0)

    sizes = {"100MB": shaped(SIZES[1], 1e9), "4GB": shaped(SIZES[3], 1.1e9)}
    goal = state_sweep.rss_goal(sizes)
    assert goal["gic_rss_4gb_vs_100mb"] == 1.1
    assert goal["met"] is True
    assert goal["anonymous"]["gic_pss_anon_4gb_vs_100mb"] == 1.1
    assert goal["anonymous"]["met"] is True
    sizes["4GB"] = shaped(SIZES[3], 1.3e9)
    assert state_sweep.rss_goal(sizes)["met"] is False
    assert state_sweep.rss_goal({"100MB": sizes["100MB"]})["met"] is None
    # at the same payload size as 4 GB: only the state differs
    reference = state_sweep.RSS_REFERENCE
    assert (reference.state_bytes, reference.value_bytes) == (SIZES[1].state_bytes, 2000)
    assert reference.value_bytes == SIZES[3].value_bytes
    # ... and its output discarded as at 4 GB, where sizes up to 100 MB write theirs
    assert [state_sweep.writes_output(s) for s in (SIZES[1], SIZES[3], reference)] == [
        True,
        False,
        False,
    ]
    same = state_sweep.rss_goal(sizes)["same_value_bytes"]
    assert same["met"] is None  # not measured
    sizes[reference.label] = shaped(reference, 1.2e9)
    same = state_sweep.rss_goal(sizes)["same_value_bytes"]
    assert same["gic_rss_4gb_vs_100mb_2kb"] == round(1.3 / 1.2, 4)
    assert same["met"] is True
    assert same["anonymous"]["met"] is True
    summary = state_sweep.goals_summary(sizes)
    assert summary["100MB"] == {}
    assert summary[reference.label] == {}  # no goal applies at a reference size
    assert set(summary["4GB"]) == set(sizes["4GB"]["goals"])
    assert summary["rss_4gb_vs_100mb"] is False


def test_reshape_computes_measures_and_goals_again_from_the_rounds() -> None:
    size = SIZES[3]
    data = state_sweep.shape_size(size, state_sweep.workload(size), _section(), {}, 1.0)
    stale = {**data, "measures": {GIC: {}, ROCKSDB: {}}, "goals": {}}
    again = state_sweep.reshape({"sizes": {"4GB": stale}, "definitions": {"old": 1}})
    assert again["sizes"]["4GB"]["measures"] == data["measures"]
    assert again["sizes"]["4GB"]["goals"] == data["goals"]
    assert again["definitions"]["old"] == 1
    assert again["goals"]["4GB"]["throughput"] is True


def test_sizes_not_run_again_are_kept_in_sweep_order(tmp_path: Path) -> None:
    path = tmp_path / "state_sweep.json"
    assert state_sweep.kept_sizes(path, ["10MB"]) == {}
    path.write_text(json.dumps({"sizes": {"10MB": {"old": 1}, "1GB": {"old": 2}}}))
    kept = state_sweep.kept_sizes(path, ["10MB"])
    assert kept == {"1GB": {"old": 2}}
    ordered = state_sweep.ordered_sizes({"1GB": {}, "10MB": {}, "100MB": {}})
    assert list(ordered) == ["10MB", "100MB", "1GB"]
    path.write_text("not json")
    assert state_sweep.kept_sizes(path, []) == {}


def test_plot_series_take_medians_and_spreads_per_system() -> None:
    size = SIZES[0]
    data = state_sweep.shape_size(
        size, state_sweep.workload(size), _section(), {GIC: {"to_first_batch_ms": 9.0}}, 1.0
    )
    series = state_sweep.plot_series({"10MB": data}, "rows_per_s")
    assert series[GIC] == [(float(size.state_bytes), 3001.0, 3000.0, 3002.0)]
    assert state_sweep.plot_series({"10MB": data}, "to_first_batch_ms") == {
        GIC: [(float(size.state_bytes), 9.0, 9.0, 9.0)]
    }
    restarted = state_sweep.combine_restarts([_restart(8.0, 9.0, "a"), _restart(12.0, 13.0, "b")])
    data["restart"] = {GIC: restarted}  # several restarts: their spread
    assert state_sweep.plot_series({"10MB": data}, "to_first_batch_ms") == {
        GIC: [(float(size.state_bytes), 10.0, 8.0, 12.0)]
    }
    # a log scale shows no zero: the query without state stores nothing
    data["measures"][FLOOR] = {"stored_bytes": {"median": 0.0, "min": 0.0, "max": 0.0}}
    assert FLOOR not in state_sweep.plot_series({"10MB": data}, "stored_bytes")
    # a reference size is no point against state size
    ref = state_sweep.RSS_REFERENCE
    extra = state_sweep.shape_size(ref, state_sweep.workload(ref), _section(), {}, 1.0)
    both = state_sweep.plot_series({"10MB": data, ref.label: extra}, "rows_per_s")
    assert both[GIC] == [(float(size.state_bytes), 3001.0, 3000.0, 3002.0)]


def test_processes_are_told_apart_by_their_command_line() -> None:
    kind = memory_sampling.process_kind
    assert kind(["/usr/lib/jvm/java-17/bin/java", "-cp", "x", "SparkSubmit"]) == "jvm"
    assert kind(["/venv/bin/python", "-m", "pyspark.daemon", "pyspark.worker"]) == "workers"
    assert kind(["/venv/bin/python", "-m", "bench.streaming.runner", "r.json"]) == "driver"
    assert kind([]) == "driver"


def test_rss_of_this_process_tree_is_positive_and_summarized() -> None:
    assert memory_sampling.tree_rss(os.getpid()) > 0
    rss, anon, file = memory_sampling.tree_memory(os.getpid())
    assert rss > 0 and anon > 0 and file > 0
    assert anon + file <= rss * 1.05  # proportional shares of what is resident
    assert memory_sampling.process_memory(2**22 + 7) == (0, 0, 0)  # no such process
    zero = (0, 0, 0)
    samples = [
        {"driver": (10, 4, 6), "jvm": zero, "workers": zero},
        {"driver": (20, 5, 15), "jvm": zero, "workers": (10, 3, 5)},
        {"driver": (15, 4, 11), "jvm": (5, 2, 1), "workers": zero},
    ]
    both = memory_sampling.memory_summary(samples)
    assert both["rss_peak_bytes"] == 30.0 and both["pss_anon_peak_bytes"] == 8.0
    assert both["pss_file_steady_bytes"] == 16.0 and both["rss_samples"] == 3
    assert both["pss_anon_steady_bytes_driver"] == 4.5
    assert both["pss_anon_steady_bytes_workers"] == 1.5
    assert both["rss_steady_bytes_jvm"] == 2.5
    mine = memory_sampling.tree_memory_by_kind(os.getpid())
    assert set(mine) == set(memory_sampling.PROCESS_KINDS) and mine["driver"][0] > 0
    assert sum(part[0] for part in mine.values()) > 0
    summary = memory_sampling.rss_summary([1, 5, 3, 4])
    assert summary == {"rss_peak_bytes": 5.0, "rss_steady_bytes": 3.5, "rss_samples": 4}
    assert memory_sampling.rss_summary([])["rss_peak_bytes"] is None


def test_the_sampler_process_measures_the_tree_without_itself() -> None:
    # a child of the root that holds 64 MiB of its own: the sampler must count it as the
    # root's tree, and must not count itself (it is a child of the root too)
    hog = subprocess.Popen(
        [sys.executable, "-c", "import time; b = bytearray(64 << 20); time.sleep(30)"]
    )
    try:
        time.sleep(0.5)
        with memory_sampling.MemorySampler(os.getpid(), interval_s=0.1) as sampler:
            time.sleep(0.6)
            sampler_pid = sampler.pid or -1
            with_sampler = memory_sampling.tree_memory_by_kind(os.getpid())
            without = memory_sampling.tree_memory_by_kind(os.getpid(), frozenset({sampler_pid}))
    finally:
        hog.kill()
        hog.wait()
    assert len(sampler.samples) >= 3
    last = sampler.samples[-1]
    assert last["driver"][1] >= 64 << 20  # this process and the hog, anonymous memory
    # the sampler leaves itself out: its samples sit near the tree without it, below the
    # tree with it by about one Python interpreter
    assert with_sampler["driver"][0] > without["driver"][0]
    own = last["driver"][0]
    assert abs(own - without["driver"][0]) < abs(own - with_sampler["driver"][0])
    with pytest.raises(ValueError, match="not a memory sample"):
        memory_sampling.parse_samples('{"driver": [1, 2, 3]}')


def test_fingerprints_hash_strings_the_same_way_everywhere() -> None:
    a = outputs.fingerprint([(1, 2, "abc"), (2, 1, "def")], [0, 0], 1)
    b = outputs.fingerprint([(2, 1, "def"), (1, 2, "abc")], [0, 0], 1)
    c = outputs.fingerprint([(2, 1, "deg"), (1, 2, "abc")], [0, 0], 1)
    assert a == b
    assert a["rows_sha256"] != c["rows_sha256"]
    assert outputs.cell("abc") == outputs.cell("abc") != outputs.cell("abd")


def test_spark_output_is_fingerprinted_from_its_parquet_files_like_gics(tmp_path: Path) -> None:
    """Spark's batches as its ``foreachBatch`` writer lays them out (a directory per batch
    with part files, ``_SUCCESS`` and ``.crc`` files, timestamps as INT96) read without
    Spark's driver, whose result size limit the sweep's outputs pass."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    from bench.streaming import spark_query

    stamp = datetime(2026, 1, 2, 3, 4, 5, 678_000, tzinfo=UTC)
    rows_by_batch = {
        0: [(1, "a" * 500, stamp), (2, "b", stamp)],
        1: [(1, "c", stamp + timedelta(seconds=1))],
        2: [],
        3: [(9, "late", stamp)],  # a batch beyond the ones counted
    }
    schema = pa.schema([("key", pa.int64()), ("payload", pa.string()), ("ts", pa.timestamp("us"))])
    for batch, rows in rows_by_batch.items():
        directory = tmp_path / "out" / f"batch_id={batch}"
        directory.mkdir(parents=True)
        table = pa.table(
            {
                "key": [r[0] for r in rows],
                "payload": [r[1] for r in rows],
                "ts": [r[2].replace(tzinfo=None) for r in rows],
            },
            schema=schema,
        )
        part = directory / "part-00000.parquet"
        pq.write_table(table, part, use_deprecated_int96_timestamps=True)
        (directory / "_SUCCESS").write_bytes(b"")
        (directory / ".part-00000.parquet.crc").write_bytes(b"\x00crc")
    read = spark_query.output_fingerprint(tmp_path / "out", 3)
    kept = [(row, batch) for batch, rows in rows_by_batch.items() for row in rows]
    expected = outputs.fingerprint([r for r, _ in kept], [b for _, b in kept], 3)
    assert read == expected
    assert read["rows"] == 3
    moved = outputs.fingerprint([r for r, _ in kept], [0 for _ in kept], 3)
    assert read["rows_by_batch_sha256"] != moved["rows_by_batch_sha256"]
    assert spark_query.output_fingerprint(tmp_path / "none", 3) == outputs.fingerprint([], [], 3)


def test_a_finished_run_keeps_its_checkpoint_but_not_its_local_copies(tmp_path: Path) -> None:
    scratch = tmp_path / "run"
    for name in (*state_sweep.LOCAL_COPIES, "checkpoint"):
        (scratch / name / "deep").mkdir(parents=True)
        (scratch / name / "deep" / "data.mdb").write_bytes(b"x" * 10)
    (scratch / "result.json").write_text("{}")
    state_sweep.drop_local_copies(scratch)
    assert sorted(p.name for p in scratch.iterdir()) == ["checkpoint", "result.json"]
    state_sweep.drop_local_copies(tmp_path / "never-ran")  # nothing to delete is fine


def _volume_bytes(data_dir: Path) -> int:
    return sum(f.stat().st_size for f in data_dir.rglob("*.dat"))


def test_a_forgotten_run_leaves_no_objects_and_the_server_frees_their_space(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tests.support.testing_s3server import TestingS3Server

    with TestingS3Server(tmp_path / "seaweedfs") as server:
        for name, value in server.environment().items():
            monkeypatch.setenv(name, value)
        bucket = server.create_bucket()
        monkeypatch.setenv(s3a.BUCKET_ENV, bucket)
        spec = state_sweep.workload(SIZES[0])
        runs = state_sweep.SizeRuns(spec, output=False, reclaim=server.reclaim_deleted)
        scratch = tmp_path / "run"
        scratch.mkdir()
        runs.last[ROCKSDB] = scratch
        prefix = state_sweep.storage_prefix(ROCKSDB, spec, scratch)
        other = "gic/another-run/kept"
        body = os.urandom(1 << 20)
        for i in range(24):
            server.client().put_object(Bucket=bucket, Key=f"{prefix}/part-{i}", Body=body)
        server.client().put_object(Bucket=bucket, Key=other, Body=b"kept")
        before = _volume_bytes(server.data_dir)
        assert before >= 24 << 20

        runs.clean()

        listed = server.client().list_objects_v2(Bucket=bucket).get("Contents", [])
        assert [o["Key"] for o in listed] == [other]  # nothing else under another prefix
        assert not scratch.exists() and runs.last == {}
        # the deleted bytes left the volumes at once, not at SeaweedFS's next own vacuum
        assert before - _volume_bytes(server.data_dir) >= 20 << 20
        with pytest.raises(Exception, match="garbage_threshold"):
            server.reclaim_deleted(0.0)
