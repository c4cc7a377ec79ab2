"""The event-time benchmarks' pure logic: output fingerprints and reference outputs,
interleaved rounds and their ratios and goals, the W3 session step, the W5 columns,
windows and goals, and the event-time workload specs. No Spark, no timings."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path
from typing import Any

import pytest
from bench.__main__ import BENCHMARKS, MODULES
from bench.streaming import outputs, repeats, timed_workloads, w5_ttl_soak
from bench.streaming.records import BatchRecord, BenchmarkError
from bench.streaming.spark_sessions import advance
from bench.streaming.workloads import WorkloadSpec

UTC = dt.UTC


def test_fingerprint_ignores_row_order_and_later_batches_and_reads_timestamps_as_micros() -> None:
    stamp = dt.datetime(2026, 1, 1, 0, 0, 1, tzinfo=UTC)
    micros = outputs.micros(stamp)
    assert micros == 1_767_225_601_000_000
    assert outputs.micros(stamp.replace(tzinfo=None)) == micros
    a = outputs.fingerprint([(1, stamp, 3), (2, stamp, 4), (9, stamp, 9)], [0, 1, 5], 2)
    b = outputs.fingerprint([(2, micros, 4), (1, micros, 3)], [1, 0], 2)
    assert a == b
    assert a["rows"] == 2
    moved = outputs.fingerprint([(2, micros, 4), (1, micros, 3)], [0, 0], 2)
    assert moved["rows_sha256"] == a["rows_sha256"]
    assert moved["rows_by_batch_sha256"] != a["rows_by_batch_sha256"]


def test_agreement_needs_two_runs_and_equal_hashes() -> None:
    one = outputs.fingerprint([(1, 2)], [0], 1)
    other = outputs.fingerprint([(1, 3)], [0], 1)
    assert outputs.agreement({"a#1": one})["identical"] is None
    assert outputs.agreement({"a#1": one, "b#1": dict(one)})["identical"] is True
    differ = outputs.agreement({"a#1": one, "b#1": other, "c#1": None})  # type: ignore[dict-item]
    assert differ["identical"] is False
    assert differ["runs_compared"] == ["a#1", "b#1"]


def test_reference_sessions_close_by_timer_or_by_a_late_enough_event() -> None:
    gap = 30
    events = [(0, 1, 0), (0, 2, 5), (1, 1, 12), (2, 2, 47), (3, 1, 35), (5, 3, 50)]
    out = outputs.reference_sessions(events, gap)
    # key 2: 5 then 47 (> 5 + 30) closes [5, 5] in batch 2 by the event itself
    assert (2, 2, 5, 5, 1) in out
    # key 1: 0, 12, 35 (within 12 + 30): one session; closes once the watermark
    # (max time of earlier batches) reaches 35 + 30 = 65 -> never here
    assert all(row[1] != 1 for row in out)
    # key 2's second session [47, 47] closes when the watermark reaches 77: never
    assert len(out) == 1


def test_reference_sessions_fire_at_the_watermark() -> None:
    events = [(0, 7, 0), (1, 8, 10), (2, 8, 30), (3, 8, 31)]
    out = outputs.reference_sessions(events, 10)
    # batch 2 runs with watermark 10 (max of batches 0-1): key 7's timer at 10 fires
    # key 8: 10 then 30 (> 10 + 10) closes [10, 10] in batch 2, before the timers fire
    assert out == [(2, 8, 10, 10, 1), (2, 7, 0, 0, 1)]


def test_session_step_matches_the_reference_logic() -> None:
    closed, current = advance(None, [0, 10, 50, 55], 30)
    assert closed == [[0, 10, 2]]
    assert current == [50, 55, 2]
    closed, current = advance([50, 55, 2], [60], 30)
    assert closed == []
    assert current == [50, 60, 3]


def test_reference_windows_write_each_window_once_the_watermark_passes_its_end() -> None:
    events = [(0, 1, 5), (0, 1, 59), (1, 1, 61), (2, 2, 130), (3, 2, 131)]
    out = outputs.reference_windows(events, 60, 10)
    # batch 2 runs with watermark 61 - 10 = 51 (<60); batch 3 with 130 - 10 = 120
    assert out == [(3, 1, 0, 60, 2), (3, 1, 60, 120, 1)]


def test_rounds_rotate_the_order_and_ratios_use_the_same_round() -> None:
    assert repeats.order(["a", "b", "c"], 0) == ["a", "b", "c"]
    assert repeats.order(["a", "b", "c"], 1) == ["b", "c", "a"]
    assert repeats.order(["a", "b", "c"], 5) == ["c", "a", "b"]
    rounds: list[dict[str, dict[str, Any]]] = [
        {"g": {"rows_per_s": 100.0}, "s1": {"rows_per_s": 10.0}, "s2": {"rows_per_s": 20.0}},
        {"g": {"rows_per_s": 50.0}, "s1": {"rows_per_s": 25.0}, "s2": {"rows_per_s": 5.0}},
        {"g": {"rows_per_s": 90.0}, "s2": {"rows_per_s": 10.0}},
    ]
    got = repeats.round_ratios(rounds, ("s1", "s2"), ("g",))
    assert got["best_baseline_per_round"] == ["s2", "s1", "s2"]
    assert got["ratios"]["g"]["per_round"] == [5.0, 2.0, 9.0]
    assert got["ratios"]["g"]["median"] == 5.0
    assert (got["ratios"]["g"]["min"], got["ratios"]["g"]["max"]) == (2.0, 9.0)


def test_goals_use_the_median_ratio_of_the_best_contender() -> None:
    comparison = repeats.Comparison(
        "x", timed_workloads.sessions, {}, ("s",), ("a", "b"), 5.0, 10.0
    )
    ratios = {"ratios": {"a": repeats.spread([3.0, 4.0, 6.0]), "b": repeats.spread([6.0, 7.0])}}
    got = repeats.goals(ratios, comparison)
    assert got["per_contender"]["a"]["met"] is False
    assert got["per_contender"]["b"]["met"] is True
    assert got["per_contender"]["b"]["aim_met"] is False
    assert got["met"] is True
    empty = repeats.goals({"ratios": {"a": repeats.spread([])}}, comparison)
    assert empty["met"] is None


def test_the_ceiling_is_the_floor_over_the_best_baseline_of_each_round() -> None:
    rounds: list[dict[str, dict[str, Any]]] = [
        {"g": {"rows_per_s": 30.0}, "s1": {"rows_per_s": 10.0}, "f": {"rows_per_s": 15.0}},
        {"g": {"rows_per_s": 36.0}, "s1": {"rows_per_s": 20.0}, "f": {"rows_per_s": 40.0}},
        {"g": {"rows_per_s": 20.0}, "s1": {"rows_per_s": 10.0}},
    ]
    assert repeats.ceiling(rounds[2:], ("s1",), "f", ("g",)) is None
    bound = repeats.ceiling(rounds, ("s1",), "f", ("g",))
    assert bound is not None
    assert bound["floor_over_best_baseline"]["per_round"] == [1.5, 2.0]
    assert bound["contenders_over_floor"]["g"]["per_round"] == [2.0, 0.9]
    comparison = repeats.Comparison("x", timed_workloads.sessions, {}, ("s1",), ("g",), 2.0)
    ratios = repeats.round_ratios(rounds, ("s1",), ("g",))
    got = repeats.goals(ratios, comparison, bound)
    assert got["met"] is True  # median of 3.0, 1.8, 2.0
    assert got["ceiling_ratio"] == 1.75
    assert got["reachable"] is False  # a free store would have reached 1.75x, not 2x
    assert repeats.goals(ratios, comparison)["reachable"] is None


def test_commit_with_logs_adds_spark_logs_to_gic_only() -> None:
    record = BatchRecord(0, 10, 100.0, 20.0, 1, {"commit_offsets_ms": 5.0, "wal_commit_ms": 7.0})
    assert repeats.commit_with_logs(record, "gic") == 32.0
    assert repeats.commit_with_logs(record, "spark_baseline") == 20.0


def test_rounds_from_env() -> None:
    assert repeats.rounds_from_env({}, quick=False) == 3
    assert repeats.rounds_from_env({}, quick=True) == 1
    assert repeats.rounds_from_env({"GIC_BENCH_ROUNDS": "5"}) == 5
    with pytest.raises(BenchmarkError):
        repeats.rounds_from_env({"GIC_BENCH_ROUNDS": "0"})


def _churn(batches: int, ttl: bool, every: int = 5) -> list[BatchRecord]:
    """Batches whose samples hold 300 entries with a TTL, 100 more per batch without."""
    out = []
    for b in range(batches):
        parts = {"rows_out": 100.0, "expired": 100.0 if ttl and b >= 3 else 0.0}
        if b % every == 0:
            entries = 300.0 if ttl else 100.0 * (b + 1)
            stored = 1000.0 + (0.0 if ttl else b * 10.0)
            parts.update(state_entries=entries, stored_bytes=stored, restore_ms=5.0)
        out.append(BatchRecord(b, 100, 50.0, 5.0, 1, parts))
    return out


def test_w5_columns_take_the_samples_and_goals_hold_with_ttl() -> None:
    plan = w5_ttl_soak.TTLPlan(40, (10, 20), (30, 40), 10, 10)
    ttl = w5_ttl_soak.columns(_churn(40, True))
    grow = w5_ttl_soak.columns(_churn(40, False))
    assert ttl["state_rows"][:6] == [300.0, None, None, None, None, 300.0]
    assert grow["state_rows"][35] == 3600.0
    assert ttl["created"][0] == 100.0
    assert w5_ttl_soak.window_mean(ttl, "stored_bytes", (10, 20)) == 1000.0
    assert w5_ttl_soak.window_mean(ttl, "restore_ms", (11, 14)) is None
    goals = w5_ttl_soak.ttl_goals(
        {
            "gic_ttl": [w5_ttl_soak.growth(ttl, plan)],
            "gic_no_ttl": [w5_ttl_soak.growth(grow, plan)],
        }
    )
    assert goals["gic_ttl.state_rows"]["met"] is True
    assert goals["gic_no_ttl.state_rows"]["grows"] is True
    assert goals["gic_no_ttl.stored_bytes"]["grows"] is False  # 1325 / 1125
    assert goals["met"] is True


def test_w5_plan_windows_must_fit() -> None:
    assert w5_ttl_soak.plan_from_env({}, quick=True).late == (30, 40)
    assert w5_ttl_soak.plan_from_env({}).early == (100, 200)
    with pytest.raises(BenchmarkError):
        w5_ttl_soak.plan_from_env({"GIC_BENCH_W5_BATCHES": "150"})


def test_event_time_workloads_are_valid_specs_and_registered() -> None:
    for make in (timed_workloads.sessions, timed_workloads.windowed_count):
        for quick in (False, True):
            spec = make(quick)
            assert WorkloadSpec.from_json(spec.to_json()) == spec
            assert "event_time" in spec.describe()
    churn = timed_workloads.ttl_churn()
    assert timed_workloads.churn_shift(churn) == churn.keys // timed_workloads.LIFETIME_BATCHES
    assert timed_workloads.SESSION_GAP_MS >= timed_workloads.ADVANCE_MS
    for name in ("w3_sessions", "w4_windowed_count", "w5_ttl_soak"):
        assert name in BENCHMARKS
        assert MODULES[name] == f"bench.streaming.{name}"


def test_a_run_of_some_modes_keeps_the_others_measured_the_same_way(tmp_path: Path) -> None:
    same = {"workload": {"name": "w"}, "rounds": 3, "batches": [3, 6]}
    path = tmp_path / "w.json"
    assert repeats.kept_modes(path, {}, same) == {}  # no file yet
    path.write_text(
        json.dumps(
            {
                "recorded_at": "2026-01-01T00:00:00Z",
                "workload": {"name": "w"},
                "setup": {"rounds": 3, "warmup_batches": 3, "measured_batches": 6},
                "modes": {"local2": {"goals": "old local2"}, "cluster2": {"goals": "old c2"}},
            }
        )
    )
    kept = repeats.kept_modes(path, {"cluster2": {}}, same)
    assert kept == {"local2": {"recorded_at": "2026-01-01T00:00:00Z", "goals": "old local2"}}
    assert repeats.kept_modes(path, {}, {**same, "rounds": 1}) == {}  # measured otherwise
    path.write_text("{not json")
    assert repeats.kept_modes(path, {}, same) == {}
