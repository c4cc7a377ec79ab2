"""Operator benchmark: orphan sweep rate on S3 and GICJob reconcile latency.

``.venv/bin/python -m bench operator`` (``GIC_BENCH_QUICK=1`` for a small smoke run).
Writes ``bench/results/operator.json`` and ``operator.png``.

Parts (each documented in its module):

* :mod:`bench.operator_sweep` -- the crash-recovery orphan sweep
  (:meth:`~gic_operator.storage.job_storage.JobStorage.sweep_orphans`) over 100,000 orphaned
  objects on SeaweedFS (2,000 in quick mode); ``sweep_objects_per_s`` is objects listed
  and classified per second of the sweep, which deletes every orphan it lists;
* :mod:`bench.operator_reconcile` -- the GICJob reconciler over 200 jobs (20 in quick
  mode) through a real kube-apiserver (the test control plane of ``tests/controlplane``):
  a launch pass, a pass seeing the pods
  running, then steady passes, sequentially and on a pool of 4 threads;
  ``reconcile_p99_ms`` is the p99 of steady reconciles on the pool (how the operator runs
  them);
* :mod:`bench.operator_e2e` -- annotate-to-savepoint-completed and driver-kill-to-running
  times with a real operator process on the test control plane, its process kubelet
  running the Spark drivers, when the
  end-to-end harness (``tests/e2e``) offers its measuring helpers; otherwise those keys
  are left out and ``e2e.skipped`` says why.

Goals (``goals``: a list of ``name``, ``target``, ``measured``, ``met``, ``how``) are
checked against the numbers of this run.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping
from typing import Any

from bench import operator_e2e, operator_reconcile, operator_sweep
from bench.common import RESULTS, write_result
from gic_operator.operator_settings import OperatorSettings

NAME = "operator"
#: A crash leaves at most a few batches' uploads behind; this many must fit in the
#: recovery budget (seconds) the end-to-end goal allows the operator.
RECOVERY_BUDGET_S = 2.0
ORPHANS_IN_BUDGET = 1_000


def goal(
    name: str, target: float, measured: float | None, how: str, *, at_most: bool
) -> dict[str, Any]:
    """One goal entry; ``met`` is ``None`` when nothing was measured."""
    met = None if measured is None else (measured <= target if at_most else measured >= target)
    return {
        "name": name,
        "target": target,
        "measured": measured,
        "met": met,
        "direction": "at_most" if at_most else "at_least",
        "how": how,
    }


def goals(
    sweep: Mapping[str, Any], reconcile: Mapping[str, Any], e2e: Mapping[str, Any]
) -> list[dict[str, Any]]:
    """The goals of this run (see the module docstring)."""
    interval = OperatorSettings().reconcile_interval_s
    pool = reconcile["modes"]["pool"]
    out = [
        goal(
            "steady_pass_wall_s",
            interval,
            pool["pass_wall_s"]["steady"]["max"],
            f"slowest steady pass over all {reconcile['jobs']} jobs on the pool of "
            f"{reconcile['threads']} threads, at most the operator's default reconcile "
            "interval (every job is reconciled once per interval)",
            at_most=True,
        ),
        goal(
            "orphans_swept_in_recovery_budget",
            ORPHANS_IN_BUDGET,
            round(sweep["listed_per_s"] * RECOVERY_BUDGET_S),
            f"orphans the measured sweep rate clears in the {RECOVERY_BUDGET_S:.0f} s the "
            "recovery goal allows the operator (derived target: a crash leaves at most a few "
            "batches' uploads behind)",
            at_most=False,
        ),
    ]
    for entry in e2e.get("goals", []):
        out.append(dict(entry))
    return out


def plot(sweep: Mapping[str, Any], reconcile: Mapping[str, Any]) -> None:
    """``operator.png``: reconcile latency percentiles per pass kind and mode; sweep rates."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4.5), width_ratios=[2, 1])
    kinds = ["launch", "running", "steady"]
    bars = [(mode, q) for mode in reconcile["modes"] for q in ("p50_ms", "p95_ms", "p99_ms")]
    width = 0.8 / len(bars)
    for i, (mode, q) in enumerate(bars):
        xs = [k + i * width for k in range(len(kinds))]
        ys = [reconcile["modes"][mode]["latency"][kind][q] for kind in kinds]
        threads = reconcile["modes"][mode]["threads"]
        who = "sequential" if threads == 1 else f"{threads} threads"
        left.bar(xs, ys, width, label=f"{who} {q.removesuffix('_ms')}")
    left.set_xticks([k + width * (len(bars) - 1) / 2 for k in range(len(kinds))])
    left.set_xticklabels([f"{k} pass" for k in kinds])
    left.set_ylabel("ms per reconcile")
    left.set_title(f"GICJob reconcile latency, {reconcile['jobs']} jobs")
    left.legend(fontsize="small", ncols=2)

    labels = ["PUT (setup)", "list (dry run)", "sweep: listed", "sweep: deleted"]
    values = [
        sweep["put_objects_per_s"],
        sweep["dry_run_listed_per_s"],
        sweep["listed_per_s"],
        sweep["deleted_per_s"],
    ]
    right.bar(labels, values, color=["#999999", "#4c72b0", "#55a868", "#c44e52"])
    right.set_ylabel("objects / s")
    right.set_title(f"orphan sweep\n{sweep['orphans']:,} orphans on SeaweedFS")
    right.tick_params(axis="x", labelrotation=20)
    fig.tight_layout()
    RESULTS.mkdir(parents=True, exist_ok=True)
    fig.savefig(RESULTS / f"{NAME}.png", dpi=100)
    plt.close(fig)


def main() -> None:
    sweep_params = operator_sweep.params_from_env()
    reconcile_params = operator_reconcile.params_from_env()
    quick = sweep_params.quick
    load_before = os.getloadavg()[0]

    print(f"-- reconcile: {reconcile_params.jobs} GICJobs", flush=True)
    t0 = time.monotonic()
    reconcile = operator_reconcile.measure(reconcile_params, log=_log)
    reconcile["run_s"] = round(time.monotonic() - t0, 1)

    print(f"-- orphan sweep: {sweep_params.orphans:,} orphans on SeaweedFS", flush=True)
    t0 = time.monotonic()
    sweep = operator_sweep.measure(sweep_params, log=_log)
    sweep["run_s"] = round(time.monotonic() - t0, 1)

    print("-- savepoint and recovery times (end to end)", flush=True)
    e2e = operator_e2e.measure(quick=quick, log=_log)

    pool = reconcile["modes"]["pool"]
    data: dict[str, Any] = {
        "setup": {
            "quick": quick,
            "jobs": reconcile_params.jobs,
            "steady_passes": reconcile_params.steady_passes,
            "threads": reconcile_params.threads,
            "orphans": sweep_params.orphans,
            "load_average_1m": {"start": load_before, "end": os.getloadavg()[0]},
        },
        "definitions": {
            "sweep_objects_per_s": "objects listed and classified per second of "
            "JobStorage.sweep_orphans (it deletes every orphan among them in batches of "
            "1,000); sweep.deleted_per_s counts deletions over the same time",
            "reconcile_p99_ms": "p99 of steady-pass reconciles on the pool of threads, one "
            "reconcile = JobController.reconcile_named (read the GICJob, the pod and the "
            "status record, patch the status if it changed, post events)",
            "latency": "per reconcile, wall time inside the worker thread (no queueing); "
            "percentiles by nearest rank",
            "pass_wall_s": "from the first reconcile of a pass to the last one's end",
            "status_patches": "reconciles of the pass that sent a status patch (a steady "
            "pass changes nothing, so it should send none)",
        },
        "sweep_objects_per_s": sweep["listed_per_s"],
        "reconcile_p99_ms": pool["latency"]["steady"]["p99_ms"],
        "reconcile_p99_ms_by_pass": {
            mode: {kind: stats["p99_ms"] for kind, stats in result["latency"].items()}
            for mode, result in reconcile["modes"].items()
        },
    }
    e2e_definitions = {
        "annotate_to_savepoint_completed_s": "kubectl annotate gicjob gic.io/savepoint=<nonce> "
        "until kubectl wait sees the Savepoint Completed (median, max, runs); "
        "e2e.savepoint.own_work_s is the driver's part (outcome finished_at - started_at)",
        "driver_kill_to_running_s": "driver process killed until the new driver's runtime "
        "status record says running (median, max, runs); e2e.recovery.driver_start_s is the "
        "new driver's start (pod seen -> runtime running), e2e.recovery.status_running_s "
        "until the GICJob status shows the new pod Running",
    }
    for key, definition in e2e_definitions.items():
        if key in e2e:
            data[key] = e2e[key]
            data["definitions"][key] = definition
    data["goals"] = goals(sweep, reconcile, e2e)
    data["sweep"] = sweep
    data["reconcile"] = reconcile
    data["e2e"] = {k: v for k, v in e2e.items() if k != "goals"}
    path = write_result(NAME, data)
    plot(sweep, reconcile)
    print(f"wrote {path} and {path.with_suffix('.png')}")
    for entry in data["goals"]:
        print(f"  goal {entry['name']}: {entry['measured']} vs {entry['target']} -> {entry['met']}")


def _log(message: str) -> None:
    print(message, flush=True)


if __name__ == "__main__":
    main()
