"""The restore-floor benchmark: every path reads every stored byte from a real S3 server,
interleaved; its bounds are set against the sweep's restart as defined."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from bench.__main__ import BENCHMARKS

from bench import restore_floor


def test_every_path_reads_every_stored_byte_in_interleaved_rounds() -> None:
    p = restore_floor.Params(
        snapshots=3, snapshot_bytes=300_000, tail_bytes=300_000, segment_bytes=100_000, rounds=3
    )
    result = restore_floor.run(p)  # raises if a path read, uncompressed or wrote less
    assert result["objects"] == 3 + 3
    assert set(result["summary"]) == set(restore_floor.MODES)
    for mode in restore_floor.MODES:
        runs = result["runs"][mode]
        assert len(runs) == 3 and all(r["wall_s"] > 0 for r in runs)
        wall = result["summary"][mode]["wall_s"]
        assert wall["min"] <= wall["median"] <= wall["max"]
    # the proxied paths went through the proxy: one GET per object per path and round,
    # plus the latency probe's
    gets = result["requests_through_proxy"]["GET"]
    assert gets >= 3 * 3 * result["objects"]
    assert result["latency"]["added_ms_p50"] > 10  # 20 ms held, measured at the client
    # hex text compresses to about half
    assert 1.6 < result["uncompressed_bytes"] / result["stored_bytes"] < 2.2
    assert "restore_floor" in BENCHMARKS


def test_the_shape_splits_snapshots_and_tail_into_objects() -> None:
    p = restore_floor.Params(snapshots=4, snapshot_bytes=10, tail_bytes=9, segment_bytes=3)
    objects = restore_floor.shape(p)
    snaps = [n for k, n in objects if k.startswith("snapshots/")]
    tail = [n for k, n in objects if k.startswith("changelog/")]
    assert snaps == [3, 3, 2, 2] and tail == [3, 3, 3]
    assert len({k for k, _ in objects}) == len(objects)
    assert restore_floor.shape(
        restore_floor.Params(snapshots=1, snapshot_bytes=5, tail_bytes=0)
    ) == [("snapshots/bucket-00000", 5)]


def test_a_path_that_read_or_wrote_less_than_it_should_fails() -> None:
    stored = restore_floor.Stored(
        keys=("snapshots/a", "changelog/b"),
        raw_bytes={"snapshots/a": 10, "changelog/b": 6},
        stored_bytes=12,
    )
    # the snapshots' raw bytes are laid down, the tail only folded into them
    whole = {"fetched": 12.0, "uncompressed": 16.0, "written": 10.0, "wall_s": 1.0, "cpu_s": 0.5}
    assert restore_floor.check_run("fetch_decompress_write", [whole], stored)["reader_cpu_s"] == 0.5
    assert restore_floor.check_run("fetch_write", [{**whole, "written": 12.0}], stored)
    with pytest.raises(AssertionError, match="fetched 11"):
        restore_floor.check_run("fetch", [{**whole, "fetched": 11.0, "written": 0.0}], stored)
    with pytest.raises(AssertionError, match="written"):
        restore_floor.check_run("fetch_decompress_write", [{**whole, "written": 16.0}], stored)
    with pytest.raises(AssertionError, match="uncompressed"):
        restore_floor.check_run("fetch_decompress", [{**whole, "uncompressed": 10.0}], stored)


def test_bounds_set_each_path_against_spark_restart(tmp_path: Path) -> None:
    sweep = {
        "sizes": {
            "4GB": {
                "recorded_at": "t",
                "restart": {
                    "gic_s3": {
                        "to_first_batch_ms": 40_000,
                        "before_first_batch_ms": 2_000,
                        "steady_batch_ms": 3_000,
                    },
                    "spark_rocksdb_changelog_s3a": {"to_first_batch_ms": 80_000},
                },
            }
        }
    }
    path = tmp_path / "state_sweep.json"
    path.write_text(json.dumps(sweep))
    restart = restore_floor.sweep_restart(path)
    assert restart is not None and restart["spark_to_first_batch_s"] == 80.0
    summary = {
        "fetch": {"wall_s": {"median": 10.0}},
        "fetch_decompress_write": {"wall_s": {"median": 18.0}},
    }
    b = restore_floor.bounds(summary, restart)
    assert b is not None and b["goal_s"] == 20.0
    assert b["paths"]["fetch"] == {
        "floor_s": 10.0,
        "floor_vs_spark": 0.125,
        "with_batch_s": 13.0,
        "with_batch_vs_spark": 0.163,
        "goal_within_reach": True,
    }
    assert b["paths"]["fetch_decompress_write"]["with_batch_s"] == 21.0
    assert b["paths"]["fetch_decompress_write"]["goal_within_reach"] is False
    recorded = {"summary": summary, "bounds": None}
    assert restore_floor.set_against_sweep(recorded, path)["bounds"] == b
    assert restore_floor.sweep_restart(tmp_path / "missing.json") is None
    assert restore_floor.bounds(summary, None) is None
