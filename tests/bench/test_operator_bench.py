"""Operator benchmark pieces at tiny sizes: the orphan sweep on SeaweedFS, the reconcile
passes through a real kube-apiserver (the test control plane), goals and the plot."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from bench.operator_reconcile import ReconcileParams
from bench.operator_sweep import SweepParams
from tests.support.testing_s3server import TestingS3Server

from bench import operator as operator_bench
from bench import operator_e2e, operator_reconcile, operator_sweep
from gic_runtime.storage.s3 import S3ObjectStore


def test_sizes_follow_quick_mode() -> None:
    assert operator_sweep.params_from_env({}).orphans == 100_000
    assert operator_sweep.params_from_env({"GIC_BENCH_QUICK": "1"}).orphans == 2_000
    assert operator_reconcile.params_from_env({}).jobs == 200
    quick = operator_reconcile.params_from_env({"GIC_BENCH_QUICK": "1"})
    assert (quick.jobs, quick.steady_passes, quick.threads) == (20, 5, 4)


def test_sweep_deletes_every_orphan_and_keeps_the_checkpoint(
    s3_server: TestingS3Server, s3_bucket: str
) -> None:
    lines: list[str] = []
    params = SweepParams(orphans=60, referenced=3, put_threads=4)

    result = operator_sweep.run_sweep(s3_server.settings, s3_bucket, params, log=lines.append)

    assert (result["listed"], result["deleted"], result["referenced"]) == (64, 60, 4)
    assert result["deleted_bytes"] == 60 * operator_sweep.PAYLOAD_BYTES
    assert result["listed_per_s"] > 0 and result["dry_run_listed_per_s"] > 0
    store = S3ObjectStore(s3_bucket, operator_sweep.PREFIX, settings=s3_server.settings)
    left = sorted(info.key for info in store.list(f"jobs/{operator_sweep.JOB_ID}/"))
    assert len(left) == 4
    assert [k.split("/")[2] for k in left] == ["changelog"] * 3 + ["checkpoints"]
    assert any("uploaded 60/60 orphans" in line for line in lines)


@pytest.mark.slow  # starts the test control plane of tests/controlplane
def test_reconcile_passes_launch_then_run_every_job() -> None:
    lines: list[str] = []
    params = ReconcileParams(jobs=3, steady_passes=1, threads=2)

    result = operator_reconcile.measure(params, log=lines.append)

    assert {"gicjobs.gic.io", "savepoints.gic.io"} <= set(result["crds"])
    assert result["api"].startswith("Kubernetes v1.")
    for mode, threads in (("sequential", 1), ("pool", 2)):
        run = result["modes"][mode]
        assert run["threads"] == threads
        assert [p["kind"] for p in run["passes"]] == ["launch", "running", "steady"]
        assert [p["status_patches"] for p in run["passes"]][:2] == [3, 3]
        assert {kind: s["n"] for kind, s in run["latency"].items()} == {
            "launch": 3,
            "running": 3,
            "steady": 3,
        }
        launch = run["latency"]["launch"]
        assert 0 < launch["p50_ms"] <= launch["p99_ms"] <= launch["max_ms"]
    assert len(lines) == 6


def _sweep_result() -> dict[str, Any]:
    return {
        "orphans": 10,
        "put_objects_per_s": 500.0,
        "dry_run_listed_per_s": 9000.0,
        "listed_per_s": 400.0,
        "deleted_per_s": 380.0,
    }


def _reconcile_result() -> dict[str, Any]:
    def mode(threads: int, steady_wall: float) -> dict[str, Any]:
        stats = {"n": 1, "p50_ms": 1.0, "p95_ms": 2.0, "p99_ms": 3.0}
        kinds = ("launch", "running", "steady")
        return {
            "threads": threads,
            "latency": dict.fromkeys(kinds, stats),
            "pass_wall_s": {k: {"mean": 1.0, "max": steady_wall} for k in kinds},
        }

    return {"jobs": 5, "threads": 4, "modes": {"sequential": mode(1, 1), "pool": mode(4, 7.5)}}


def test_goals_compare_measurements_with_targets() -> None:
    e2e = {"goals": [operator_bench.goal("x_s", 3.0, None, "later", at_most=True)]}
    goals = {g["name"]: g for g in operator_bench.goals(_sweep_result(), _reconcile_result(), e2e)}

    steady = goals["steady_pass_wall_s"]
    assert (steady["target"], steady["measured"], steady["met"]) == (5.0, 7.5, False)
    orphans = goals["orphans_swept_in_recovery_budget"]
    assert (orphans["measured"], orphans["met"]) == (800, False)
    assert goals["x_s"]["met"] is None


def test_plot_writes_a_png(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(operator_bench, "RESULTS", tmp_path)
    operator_bench.plot(_sweep_result(), _reconcile_result())
    assert (tmp_path / "operator.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_e2e_part_summarizes_runs_and_checks_overheads() -> None:
    harness = operator_e2e.load_harness()
    assert isinstance(harness, (str, tuple))
    assert operator_e2e.summary([3.0, 1.0, 2.0]) == {
        "median": 2.0,
        "max": 3.0,
        "runs": [3.0, 1.0, 2.0],
    }
    savepoint = {"overhead_s": operator_e2e.summary([0.5, 2.5])}
    recovery = {"overhead_s": operator_e2e.summary([1.25])}
    goals = {g["name"]: g for g in operator_e2e._goals(savepoint, recovery)}
    assert (goals["savepoint_overhead_s"]["measured"], goals["savepoint_overhead_s"]["met"]) == (
        2.5,
        False,
    )
    assert (goals["recovery_overhead_s"]["measured"], goals["recovery_overhead_s"]["met"]) == (
        1.25,
        True,
    )
