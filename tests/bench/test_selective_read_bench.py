"""The selective-read benchmark: both paths over the same files, interleaved, checked
against each other, summarized the same way."""

from __future__ import annotations

from bench.__main__ import BENCHMARKS

from bench import selective_read


def test_both_paths_run_interleaved_and_agree() -> None:
    p = selective_read.Params(buckets=2, keys=300, tail_batches=3, batch_keys=20, rounds=3)
    result = selective_read.run(p)  # raises if a selected value differs from the restore's
    assert set(result["summary"]) == {"restore", "select"}
    for mode in selective_read.MODES:
        runs = result["runs"][mode]
        assert len(runs) == 3 and all(r["wall_s"] > 0 and r["cpu_s"] >= 0 for r in runs)
        wall = result["summary"][mode]["wall_s"]
        assert wall["min"] <= wall["median"] <= wall["max"]
    assert result["entries_per_bucket"] == 600
    assert result["select_vs_restore"]["wall_s"] > 0
    assert "selective_read" in BENCHMARKS
