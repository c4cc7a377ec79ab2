"""Streaming benchmark harness: a real Spark baseline run and a real GIC run in quick mode,
the statistics, ratios and goals over registered systems, the per-batch byte attribution,
and the event-log processor GIC runs."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pyarrow as pa
import pytest
from bench.streaming import checkpoint_bytes, gic_runner, harness, spark_stores
from bench.streaming.records import BatchRecord, BenchmarkError, BenchParams, RunResult
from bench.streaming.runner import SystemFn, in_subprocess
from bench.streaming.workloads import EVENT_LOG, WorkloadSpec, event_log, keyed_count

from bench import common
from gic_runtime.processing import StateAccess
from gic_runtime.state.backend import KeyedStateBackend
from gic_runtime.state.memory_store import InMemoryStore
from gic_runtime.testing.changelog_fakes import TestingChangelogWriter


@pytest.fixture
def quick(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[WorkloadSpec, BenchParams]:
    """W1 at quick size and quick parameters, with the scratch directory in ``tmp_path``."""
    monkeypatch.setattr(common, "SCRATCH", tmp_path)
    return keyed_count(quick=True), harness.params_from_env({"GIC_BENCH_QUICK": "1"})


def test_spark_baseline_runs_exactly_the_requested_batches_in_its_own_process(
    tmp_path: Path, quick: tuple[WorkloadSpec, BenchParams]
) -> None:
    workload, params = quick

    result = harness.SYSTEMS["spark_rocksdb_changelog"](workload, params)

    assert [r.batch_id for r in result.warmup] == [0, 1]
    assert [r.batch_id for r in result.measured] == [2, 3, 4]
    for record in result.measured:
        assert record.rows == workload.rows_per_batch
        assert record.batch_ms > 0
        assert 0 <= record.parts["wal_commit_ms"] < record.commit_ms
        assert record.bytes > 0
        assert 0 < record.parts["state_rows_total"] <= workload.keys
    totals = [r.parts["state_rows_total"] for r in (*result.warmup, *result.measured)]
    assert totals == sorted(totals)  # keys only accumulate in a keyed count
    notes = result.notes
    assert notes["nothing_deleted_during_run"] is True
    conf = notes["spark_conf"]
    assert conf["spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled"] == "true"
    assert conf["spark.sql.shuffle.partitions"] == "4"
    assert "commitTimeMs" in notes["commit_ms_definition"]
    # the run's checkpoint directory is gone, its log is kept
    assert [p.name for p in tmp_path.iterdir()] == ["logs"]


def test_the_query_without_state_keeps_no_state_and_writes_only_its_logs(
    tmp_path: Path, quick: tuple[WorkloadSpec, BenchParams]
) -> None:
    workload, params = quick
    run = in_subprocess(harness.SPARK_TARGET, spark_stores.NO_STATE)

    result = run(workload, params)

    assert [r.batch_id for r in result.measured] == [2, 3, 4]
    for record in result.measured:
        assert record.rows == workload.rows_per_batch
        assert record.batch_ms > 0
        assert "state_rows_total" not in record.parts or record.parts["state_rows_total"] == 0
        assert record.parts["state_commit_ms_sum_over_tasks"] == 0
        assert record.commit_ms == record.parts["wal_commit_ms"] + record.parts["commit_offsets_ms"]
        assert 0 < record.bytes < 4096  # an offset and a commit log entry, no state files
    assert "no state" in result.notes["sink"]
    with pytest.raises(BenchmarkError, match="no output"):
        spark_stores.run_spark_store(
            spark_stores.NO_STATE, workload, params, tmp_path / "x", output=True
        )


def _record(batch: int, rows: int, batch_ms: float, commit_ms: float, nbytes: int) -> BatchRecord:
    return BatchRecord(batch, rows, batch_ms, commit_ms, nbytes, {"x": 1.0})


def _fixed_system(batch_ms: float, commit_ms: float, nbytes: int) -> SystemFn:
    def run(workload: WorkloadSpec, params: BenchParams) -> RunResult:
        records = [
            _record(b, workload.rows_per_batch, batch_ms + b, commit_ms, nbytes)
            for b in range(params.total_batches)
        ]
        return RunResult(
            "fixed",
            tuple(records[: params.warmup]),
            tuple(records[params.warmup :]),
            {"commit_ms_definition": "fixed", "bytes_definition": "fixed"},
        )

    return run


def _broken(workload: WorkloadSpec, params: BenchParams) -> RunResult:
    raise BenchmarkError("no JVM today")


def test_harness_compares_every_system_with_the_best_spark_store(tmp_path: Path) -> None:
    systems = {
        "gic": _fixed_system(batch_ms=100.0, commit_ms=10.0, nbytes=1_000),
        "gic_no_changelog": _fixed_system(batch_ms=195.0, commit_ms=100.0, nbytes=50_000),
        "spark_slow": _fixed_system(batch_ms=400.0, commit_ms=50.0, nbytes=9_000),
        "spark_fast": _fixed_system(batch_ms=200.0, commit_ms=80.0, nbytes=8_000),
        "broken": _broken,
    }
    params = BenchParams(warmup=1, measured=4)
    workload = keyed_count(quick=True)

    data = harness.run_benchmark(workload, params, systems, out_dir=tmp_path)

    written = json.loads((tmp_path / "w1_keyed_count.json").read_text())
    assert written["systems"].keys() == {"gic", "gic_no_changelog", "spark_slow", "spark_fast"}
    assert (tmp_path / "w1_keyed_count.png").stat().st_size > 0
    assert written["failed"] == {"broken": "no JVM today"}
    gic = written["systems"]["gic"]
    # batches 1..4 take 101..104 ms, each 10,000 rows
    assert gic["rows_per_s"] == pytest.approx(40_000 / 0.410, rel=1e-4)
    assert gic["batch_ms_p50"] == 102 and gic["batch_ms_p99"] == 104
    assert gic["commit_ms_p99"] == 10 and gic["bytes_uploaded_per_checkpoint"] == 1_000
    assert len(gic["measured_batches"]) == 4 and len(gic["warmup_batches"]) == 1
    assert written["best_spark"]["rows_per_s"] == "spark_fast"
    assert written["best_spark"]["commit_ms_p99"] == "spark_slow"
    assert written["ratios"]["gic"]["commit_ms_p99"] == pytest.approx(0.2)
    goals = data["goals"]
    assert goals["throughput_met"] is True and goals["commit_p99_met"] is True
    # process time: gic 92.5 ms, no changelog 97.5 ms mean -> negative overhead
    assert goals["changelog_overhead"] == pytest.approx(92.5 / 97.5 - 1, abs=1e-4)
    assert goals["changelog_overhead_met"] is True


def test_goals_are_null_when_the_systems_they_need_did_not_run(tmp_path: Path) -> None:
    systems = {"spark_only": _fixed_system(batch_ms=200.0, commit_ms=80.0, nbytes=8_000)}
    data = harness.run_benchmark(event_log(quick=True), BenchParams(1, 2), systems, tmp_path)
    assert data["goals"]["throughput_met"] is None
    assert data["goals"]["changelog_overhead"] is None
    assert data["ratios"]["spark_only"]["rows_per_s"] == 1.0
    assert "ListState" in data["workload"]["spark_baseline"]


def test_a_run_with_the_wrong_batch_count_is_rejected() -> None:
    records = tuple(_record(b, 10, 5.0, 1.0, 0) for b in range(3))
    with pytest.raises(BenchmarkError, match="stop after exactly"):
        RunResult("s", records[:1], records[1:], {}).check(BenchParams(warmup=1, measured=3))
    with pytest.raises(BenchmarkError, match="non-consecutive"):
        RunResult("s", records[:1], records[2:], {}).check(BenchParams(warmup=1, measured=1))


def test_environment_selects_sizes_counts_and_systems() -> None:
    quick = harness.params_from_env({"GIC_BENCH_QUICK": "1", "GIC_BENCH_MEASURED": "4"})
    assert (quick.quick, quick.warmup, quick.measured) == (True, 2, 4)
    full = harness.params_from_env({})
    assert full.measured >= 25 and full.master == "local[2]"
    assert keyed_count().keys == 500_000 and keyed_count().rows_per_batch == 100_000
    assert keyed_count(quick=True).keys == 20_000
    registry = {"spark_a": _broken, "gic": _broken}
    assert harness.chosen_systems(registry, {"GIC_BENCH_SYSTEMS": "gic"}) == ["gic"]
    with pytest.raises(BenchmarkError, match="unregistered systems"):
        harness.chosen_systems(registry, {"GIC_BENCH_SYSTEMS": "gic,nope"})
    with pytest.raises(BenchmarkError, match="not an integer"):
        harness.params_from_env({"GIC_BENCH_WARMUP": "many"})


def _file(root: Path, relative: str, size: int, mtime_ns: int) -> None:
    path = root / relative
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"x" * size)
    os.utime(path, ns=(mtime_ns, mtime_ns))


def test_checkpoint_bytes_go_to_batches_by_log_name_or_modification_time(tmp_path: Path) -> None:
    windows = [checkpoint_bytes.BatchWindow(b, 1_000 * (b + 1)) for b in range(3)]
    _file(tmp_path, "metadata", 5, 10)  # before batch 0 ended
    _file(tmp_path, "offsets/0", 100, 10)
    _file(tmp_path, "offsets/.0.crc", 7, 10)
    _file(tmp_path, "commits/0", 30, 1_000)  # exactly at the end of batch 0
    _file(tmp_path, "offsets/1", 100, 999)  # written early, belongs to batch 1 by name
    _file(tmp_path, "state/0/1/2.delta", 400, 1_500)
    _file(tmp_path, "state/0/1/.2.delta.crc", 9, 1_500)
    _file(tmp_path, "state/0/2/3.delta", 600, 3_000)
    _file(tmp_path, "state/0/2/4.delta", 800, 3_001)  # after the last batch: ignored
    _file(tmp_path, "offsets/3", 100, 3_001)  # a batch outside the windows: ignored

    added = checkpoint_bytes.attribute(tmp_path, windows)

    assert (added[0].bytes, added[0].files, added[0].crc_bytes) == (135, 3, 7)
    assert (added[1].bytes, added[1].files, added[1].crc_bytes) == (500, 2, 9)
    assert (added[2].bytes, added[2].files, added[2].crc_bytes) == (600, 1, 0)
    assert not checkpoint_bytes.logs_complete(tmp_path, range(2))  # commits/1 missing
    _file(tmp_path, "commits/1", 30, 2_000)
    assert checkpoint_bytes.logs_complete(tmp_path, range(2))


def test_gic_systems_are_registered_after_the_spark_baselines() -> None:
    names = list(harness.SYSTEMS)
    assert names[-3:] == ["gic", "gic_no_changelog", "gic_s3"]
    assert all(n.startswith(harness.SPARK_PREFIX) for n in names[:-3])
    with pytest.raises(BenchmarkError, match="unknown GIC system"):
        gic_runner.run_gic("gic_tape", keyed_count(quick=True), BenchParams(), Path("/nonexistent"))


def test_event_log_processor_appends_each_keys_events_in_arrival_order() -> None:
    backend = KeyedStateBackend(range(16), 16, InMemoryStore(), TestingChangelogWriter())
    states = StateAccess(backend, 0)
    first = pa.table({"key": [3, 7, 3], "payload": ["a", "b", "c"]})
    second = pa.table({"key": [7, 3], "payload": ["d", "e"]})

    out = gic_runner.append_events(first, states)
    gic_runner.append_events(second, states)

    appended = zip(out["key"].to_pylist(), out["appended"].to_pylist(), strict=True)
    assert sorted(appended) == [(3, 2), (7, 1)]
    assert out.schema.field("appended").type == pa.int64()
    events = states.list("events")
    assert events.get(3) == ["a", "c", "e"]
    assert events.get(7) == ["b", "d"]


def test_gic_runs_exactly_the_requested_batches_in_its_own_process(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(common, "SCRATCH", tmp_path)
    params = BenchParams(warmup=1, measured=2, timeout_s=300.0, quick=True)
    workload = WorkloadSpec(
        "w2_event_log", EVENT_LOG, keys=2_000, rows_per_batch=2_000, partitions=4
    )

    result = harness.SYSTEMS["gic"](workload, params)

    assert [r.batch_id for r in result.warmup] == [0]
    assert [r.batch_id for r in result.measured] == [1, 2]
    for record in result.measured:
        parts = record.parts
        assert record.rows == workload.rows_per_batch
        # Spark's whole micro-batch contains the driver's foreachBatch hook
        assert record.batch_ms >= parts["gic_batch_ms"] > record.commit_ms > 0
        # every batch uploads a changelog segment and a manifest; nothing else here
        assert parts["changelog_bytes"] > 0 and parts["manifest_bytes"] > 0
        assert parts["snapshot_bytes"] == 0
        assert record.bytes >= parts["changelog_bytes"] + parts["manifest_bytes"]
        assert parts["local_hits"] + parts["restored"] + parts["empty"] == gic_runner.NUM_BUCKETS
        assert parts["changes"] > 0 and parts["stage_ms"] > parts["task_total_ms_max"] > 0
    notes = result.notes
    assert notes["gic_settings"]["num_tasks"] == workload.partitions
    assert notes["gic_settings"]["materialization_interval_s"] == (
        gic_runner.MATERIALIZATION_INTERVAL_S
    )
    assert "manifest write" in notes["commit_ms_definition"]
    assert [p.name for p in tmp_path.iterdir()] == ["logs"]


def test_a_goal_states_its_limit_value_and_verdict() -> None:
    assert common.goal("p99_ratio", 1.2, at_most=1.5, met="p99_met") == {
        "p99_ratio_at_most": 1.5,
        "p99_ratio": 1.2,
        "p99_met": True,
    }
    assert common.goal("kept", 0.8, at_least=0.9, met="kept_met")["kept_met"] is False
    assert common.goal("kept", None, at_least=0.9, met="kept_met")["kept_met"] is None
    with pytest.raises(ValueError, match="exactly one"):
        common.goal("x", 1.0, met="x_met")
    with pytest.raises(ValueError, match="exactly one"):
        common.goal("x", 1.0, at_most=1.0, at_least=0.0, met="x_met")
