"""Soak and recovery summaries and goals on synthetic batch records, the S3A settings of
Spark's stores, and the storage accounting helpers (listings, directory totals,
progress of restarted queries)."""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

import pytest
from bench.streaming import checkpoint_bytes, gic_records, recovery, s3a, soak, spark_query
from bench.streaming.records import BatchRecord, BenchmarkError, RunResult


def _record(batch: int, batch_ms: float, commit_ms: float, **parts: float) -> BatchRecord:
    return BatchRecord(batch, 1_000, batch_ms, commit_ms, 10, parts)


def _soak_records(late_commit: float, late_batch_ms: float) -> list[BatchRecord]:
    """200 batches: 100 at 100 ms (commit 10 ms, with logs 12 ms), then 100 as given; a
    manifest of 1 KiB per 10 batches and a storage sample every 10 batches."""
    out = []
    for b in range(200):
        young = b < 100
        parts = {
            "manifest_bytes": 1024.0 * (1 + b // 10),
            "local_hits": 8.0,
            "restored": 0.0,
            "commit_offsets_ms": 1.0,
            "wal_commit_ms": 1.0,
        }
        if b % 10 == 0:
            parts["stored_bytes"] = 1_000.0 * (b + 10)
            parts["stored_snapshots_bytes"] = 600.0 * (b + 10)
            parts["stored_changelog_bytes"] = 300.0 * (b + 10)
        out.append(
            _record(b, 100.0 if young else late_batch_ms, 10.0 if young else late_commit, **parts)
        )
    return out


PLAN = soak.SoakPlan(batches=200, steady=(50, 100), late=100, stored_every=10)


def test_soak_windows_compare_the_old_job_with_the_steady_young_one() -> None:
    summary = soak.summarize_soak(_soak_records(13.0, 105.0), PLAN, state_snapshot_bytes=80_000)
    assert summary["steady"]["batches"] == [50, 99]
    assert summary["late"]["batches"] == [100, 199]
    assert summary["steady"]["rows_per_s"] == pytest.approx(10_000)
    assert summary["steady"]["commit_with_logs_ms_p99"] == 12.0  # logs included
    assert summary["late"]["commit_with_logs_ms_p99"] == 15.0
    assert summary["late"]["stored_bytes_max"] == 200_000
    assert summary["manifest_bytes_max"] == 20 * 1024
    assert summary["stored_bytes_max"] == 200_000 and summary["stored_samples"] == 20
    assert summary["local_hit_ratio_mean"] == 1.0
    peak = summary["stored_at_peak"]
    assert peak["batch_id"] == 190
    assert peak["bytes"] == {"snapshots": 120_000, "changelog": 60_000, "rest": 20_000}
    assert peak["vs_state_snapshot"]["snapshots"] == pytest.approx(1.5)
    goals = soak.soak_goals(summary)
    assert goals["commit_p99_late_vs_steady"] == pytest.approx(1.25)
    assert goals["throughput_late_vs_steady"] == pytest.approx(100 / 105, abs=1e-4)
    assert goals["commit_p99_met"] and goals["throughput_met"] and goals["manifest_met"]
    assert goals["stored_vs_state_snapshot"] == pytest.approx(2.5)
    assert goals["stored_met"] is True


def test_soak_compares_gic_with_the_spark_store_over_the_same_windows() -> None:
    gic = soak.summarize_soak(_soak_records(13.0, 105.0), PLAN, state_snapshot_bytes=80_000)
    spark_records = [
        _record(b, 200.0, 40.0, stored_bytes=400_000.0, stored_state_bytes=300_000.0)
        for b in range(200)
    ]
    spark = soak.summarize_spark(spark_records, PLAN)
    assert spark["late"]["commit_with_logs_ms_p99"] == 40.0  # Spark's commit has its logs
    assert spark["stored_samples"] == 200
    versus = soak.versus_spark(gic, spark)
    assert versus["rows_per_s"] == pytest.approx(200 / 105, abs=1e-4)
    assert versus["commit_with_logs_ms_p99"] == pytest.approx(15 / 40)
    assert versus["stored_bytes_max"] == pytest.approx(0.5)
    assert soak.versus_spark(gic, None) == {"spark": None}
    cols = soak.columns(spark_records[:3], "spark_baseline", soak.SPARK_KINDS)
    assert cols["stored_state_bytes"] == [300_000.0] * 3
    assert cols["commit_with_logs_ms"] == [40.0] * 3


def test_soak_goals_fail_on_growth_and_are_null_without_snapshots() -> None:
    summary = soak.summarize_soak(_soak_records(22.0, 125.0), PLAN, state_snapshot_bytes=0)
    goals = soak.soak_goals(summary)
    assert goals["commit_p99_met"] is False  # 2.0x
    assert goals["throughput_met"] is False  # 0.8x
    assert goals["stored_vs_state_snapshot"] is None and goals["stored_met"] is None
    records = [_record(b, 100.0, 1.0, manifest_bytes=300_000.0) for b in range(200)]
    big = soak.soak_goals(soak.summarize_soak(records, PLAN, 1))
    assert big["manifest_met"] is False and big["stored_met"] is None  # nothing sampled


def test_soak_columns_plan_and_spark_store() -> None:
    cols = soak.columns(_soak_records(12.0, 105.0)[:11])
    assert cols["batch_id"][:2] == [0, 1]
    assert cols["rows_per_s"][0] == 10_000
    assert cols["commit_with_logs_ms"][0] == 12.0
    assert cols["stored_bytes"][:2] == [10_000.0, None]
    assert cols["stored_snapshots_bytes"][:2] == [6_000.0, None]
    assert cols["stored_checkpoints_bytes"][0] is None
    assert cols["local_hit_ratio"][0] == 1.0
    assert soak.plan_from_env({}) == soak.SoakPlan(400, (100, 150), 100, 1)
    assert soak.plan_from_env({}, quick=True).batches == 40
    with pytest.raises(BenchmarkError, match="do not fit"):
        soak.plan_from_env({"GIC_BENCH_SOAK_BATCHES": "200"})
    assert soak.spark_from_env({}) == "spark_hdfs"
    assert soak.spark_from_env({"GIC_BENCH_SOAK_SPARK": "none"}) is None
    with pytest.raises(BenchmarkError, match="choose one of"):
        soak.spark_from_env({"GIC_BENCH_SOAK_SPARK": "spark_memory"})


def _run(first_id: int, batches: int, to_first: float, **parts: float) -> RunResult:
    records = tuple(
        _record(first_id + i, 500.0 + 100 * (i == 0), 5.0, **parts) for i in range(batches)
    )
    notes = {
        "to_first_batch_ms": to_first,
        "before_first_batch_ms": to_first - 600,
        "session_start_ms": 4_000.0,
    }
    return RunResult("s", (), records, notes)


def _restarts(*to_first: float, **parts: float) -> list[dict[str, Any]]:
    return [recovery.first_batch(_run(300, 3, t, **parts)) for t in to_first]


def test_recovery_summarizes_medians_and_checks_the_restore() -> None:
    steady = _run(0, 300, 5_000.0)
    restarts = _restarts(3_000.0, 2_000.0, 9_000.0, restored=128.0, local_hits=0.0)
    fresh = _restarts(2_500.0, 2_400.0, 2_600.0, restored=0.0, local_hits=0.0)
    summary = recovery.summarize_system(steady, restarts, fresh)
    assert summary["steady_batch_ms"] == 500.0
    assert summary["restart_to_first_batch_ms"] == 3_000.0
    assert summary["restart_first_batch_ms"] == 600.0
    assert summary["fresh_to_first_batch_ms"] == 2_500.0
    assert summary["restart_restored_all_from_storage"] is True
    assert restarts[0]["first_batch_id"] == 300
    warm = recovery.summarize_system(steady, _restarts(1.0, restored=0.0, local_hits=128.0), [])
    assert warm["restart_restored_all_from_storage"] is False


def test_recovery_goals_compare_with_the_best_spark_restart_and_a_fresh_start() -> None:
    def system(restart: float | None, fresh: float | None = None) -> dict[str, Any]:
        return {"restart_to_first_batch_ms": restart, "fresh_to_first_batch_ms": fresh}

    systems = {
        "gic": system(3_000.0, 2_500.0),
        "spark_hdfs": system(3_500.0),
        "spark_rocksdb_changelog": system(3_200.0),
    }
    goals = recovery.recovery_goals(systems)
    assert goals["best_spark_restart"] == "spark_rocksdb_changelog"
    assert goals["restart_vs_best_spark_restart"] == pytest.approx(3_000 / 3_200, abs=1e-4)
    assert goals["restart_vs_spark_met"] is True
    assert goals["restart_vs_fresh"] == pytest.approx(1.2) and goals["restart_vs_fresh_met"]
    slow = recovery.recovery_goals({**systems, "gic": system(4_000.0, 2_000.0)})
    assert slow["restart_vs_spark_met"] is False and slow["restart_vs_fresh_met"] is False
    alone = recovery.recovery_goals({"gic": system(1.0, 1.0)})
    assert alone["best_spark_restart"] is None and alone["restart_vs_spark_met"] is None
    assert recovery.plan_from_env({}, quick=True) == recovery.RecoveryPlan(20, 3, 1)


def test_s3a_settings_use_pysparks_hadoop_version_and_the_s3_environment(tmp_path: Path) -> None:
    for name in ("hadoop-client-api-3.9.1.jar", "hadoop-client-runtime-3.9.1.jar"):
        (tmp_path / name).touch()
    assert s3a.hadoop_version(tmp_path) == "3.9.1"
    with pytest.raises(BenchmarkError, match="no hadoop-client-api"):
        s3a.hadoop_version(tmp_path / "missing")
    environ = {
        "GIC_S3_ENDPOINT_URL": "http://127.0.0.1:8333",
        "AWS_ACCESS_KEY_ID": "id",
        "AWS_SECRET_ACCESS_KEY": "secret",
    }
    conf = s3a.spark_conf(environ, checkpoint_manager=False)
    assert s3a.CHECKPOINT_FILE_MANAGER not in conf
    assert conf["spark.jars.packages"] == f"org.apache.hadoop:hadoop-aws:{s3a.hadoop_version()}"
    assert conf["spark.hadoop.fs.s3a.endpoint"] == "http://127.0.0.1:8333"
    assert conf["spark.hadoop.fs.s3a.path.style.access"] == "true"
    assert conf["spark.hadoop.fs.s3a.connection.ssl.enabled"] == "false"
    assert conf["spark.hadoop.fs.s3a.secret.key"] == "secret"
    assert not any("secret" in key for key in s3a.REPORTED)
    with pytest.raises(BenchmarkError, match="AWS_ACCESS_KEY_ID is not set"):
        s3a.spark_conf({"GIC_S3_ENDPOINT_URL": "http://x"}, checkpoint_manager=False)
    with pytest.raises(BenchmarkError, match="GIC_BENCH_S3_BUCKET"):
        s3a.bucket({})


def test_listings_are_attributed_like_directories() -> None:
    windows = [checkpoint_bytes.BatchWindow(b, 1_000 * (b + 1)) for b in range(3)]
    entries = [
        checkpoint_bytes.Entry("offsets/0", 100, 5_000),  # by name
        checkpoint_bytes.Entry("commits/0", 30, 5_000),
        checkpoint_bytes.Entry("state/0/1/2.delta", 400, 1_500),
        checkpoint_bytes.Entry("state/0/1/3.delta", 700, 2_000),
        checkpoint_bytes.Entry("state/0/1/9.delta", 900, 9_000),  # after the last batch
    ]
    added = checkpoint_bytes.attribute_entries(entries, windows)
    assert (added[0].bytes, added[1].bytes, added[2].bytes) == (130, 1_100, 0)
    paths = [e.path for e in entries]
    assert checkpoint_bytes.logs_complete_entries(paths, [0])
    assert not checkpoint_bytes.logs_complete_entries(paths, [0, 1])


def test_s3_listing_converts_keys_and_times() -> None:
    when = dt.datetime(2026, 1, 1, 0, 0, 1, 500_000, tzinfo=dt.UTC)

    class Paginator:
        def paginate(self, **kw: str) -> list[dict[str, Any]]:
            assert kw == {"Bucket": "b", "Prefix": "spark/cp/"}
            item = {"Key": "spark/cp/offsets/0", "Size": 7, "LastModified": when}
            return [{"Contents": [item]}, {}]

    class Client:
        def get_paginator(self, name: str) -> Paginator:
            return Paginator()

    (entry,) = checkpoint_bytes.s3_entries(Client(), "b", "spark/cp")  # type: ignore[arg-type]
    assert (entry.path, entry.size) == ("offsets/0", 7)
    assert entry.mtime_ns == int(when.timestamp() * 1e9)


def _entries(*paths: str) -> list[checkpoint_bytes.Entry]:
    return [checkpoint_bytes.Entry(p, 1, 0) for p in paths]


def test_missing_log_entries_are_named_in_batch_order() -> None:
    paths = ["offsets/0", "offsets/2", "commits/0", "commits/1", "state/0/1/1.zip"]
    assert checkpoint_bytes.missing_log_entries(paths, [0, 1, 2]) == ["offsets/1", "commits/2"]
    assert checkpoint_bytes.missing_log_entries(paths, [0]) == []


def test_s3_log_check_lists_again_when_a_listing_is_cut_short() -> None:
    whole = _entries("offsets/0", "offsets/1", "commits/0", "commits/1", "state/0/0/1.zip")
    listings = [whole[:3], whole]  # the first listing ends early, the second is whole
    calls: list[str] = []

    def list_prefix(sub: str) -> list[checkpoint_bytes.Entry]:
        calls.append(sub)
        return listings.pop(0)

    check = checkpoint_bytes.s3_log_check(list_prefix, [0, 1])
    assert check.complete and check.attempts == 2 and check.listing == whole
    assert calls == ["", ""]


def test_s3_log_check_tells_a_short_listing_from_deleted_files() -> None:
    cut = _entries("offsets/0", "commits/0", "state/0/0/1.zip")  # every listing ends early

    def short(sub: str) -> list[checkpoint_bytes.Entry]:
        if sub == "":
            return cut
        return _entries(f"{sub}/0", f"{sub}/1")  # the log directories listed apart

    check = checkpoint_bytes.s3_log_check(short, [0, 1])
    assert not check.complete
    assert check.attempts == checkpoint_bytes.LISTING_ATTEMPTS
    assert check.missing == check.listed_apart == ["offsets/1", "commits/1"]
    assert "incomplete listings" in check.problem("spark_x", "spark.retain")

    def deleted(sub: str) -> list[checkpoint_bytes.Entry]:
        return cut if sub == "" else _entries(f"{sub}/0")

    gone = checkpoint_bytes.s3_log_check(deleted, [0, 1])
    assert gone.missing == ["offsets/1", "commits/1"] and gone.listed_apart == []
    message = gone.problem("spark_x", "spark.retain")
    assert "offsets/1, commits/1 are gone" in message and "raise spark.retain" in message


def test_directory_totals_and_background_samples(tmp_path: Path) -> None:
    (tmp_path / "a" / "b").mkdir(parents=True)
    (tmp_path / "a" / "x").write_bytes(b"1" * 10)
    (tmp_path / "a" / "b" / "y").write_bytes(b"2" * 5)
    assert checkpoint_bytes.directory_bytes(tmp_path) == (15, 2)
    assert checkpoint_bytes.directory_bytes(tmp_path / "missing") == (0, 0)
    sampler = checkpoint_bytes.StoredBytesSampler(tmp_path, every=10)
    for batch in range(25):
        sampler.batch_done(batch)
    samples = sampler.close()
    assert sorted(samples) == [0, 10, 20]
    assert {(s.bytes, s.files) for s in samples.values()} == {(15, 2)}
    assert samples[0].kinds == {"other": 15}


def test_stored_samples_split_a_storage_root_by_kind(tmp_path: Path) -> None:
    job = tmp_path / "jobs" / "wc"
    for rel, size in {
        "snapshots/3/1-a.snap": 7,
        "snapshots/4/1-b.snap": 5,
        "changelog/1/c.seg": 11,
        "checkpoints/chk-000000000001.manifest": 3,
    }.items():
        (job / rel).parent.mkdir(parents=True, exist_ok=True)
        (job / rel).write_bytes(b"x" * size)
    (tmp_path / "savepoints" / "sp").mkdir(parents=True)
    (tmp_path / "savepoints" / "sp" / "_savepoint.manifest").write_bytes(b"s" * 2)
    sample = checkpoint_bytes.stored_sample(tmp_path)
    assert (sample.bytes, sample.files) == (28, 5)
    assert sample.kinds == {"snapshots": 12, "changelog": 11, "checkpoints": 3, "other": 2}
    assert checkpoint_bytes.directory_bytes(tmp_path) == (28, 5)


def test_progress_of_a_restarted_query_starts_at_its_first_batch() -> None:
    progress = {b: {"batchId": b} for b in (20, 21, 22, 23)}
    assert [p["batchId"] for p in spark_query.consecutive(progress, 3)] == [20, 21, 22]
    with pytest.raises(BenchmarkError, match=r"micro-batches \[24\] of 20..24"):
        spark_query.consecutive(progress, 5)


def test_local_hit_ratio_of_a_batch() -> None:
    assert gic_records.local_hit_ratio({"local_hits": 3.0, "restored": 1.0}) == 0.75
    assert gic_records.local_hit_ratio({"local_hits": 0.0, "restored": 0.0}) == 1.0
    assert gic_records.local_hit_ratio({"commit": 1.0}) is None
