"""What one reconcile pass of a GICJob costs with its job directory full of stray files.

A driver may store anything in its job's directory below the listing bounds (99,000
files under the 100,000 of ``checkpoints/``). This measures the operator's pass over a
job restored NoClaim whose source is not released yet (the pass that judges the release
from the job's manifests), with an empty directory and with ``junk`` stray files in its
``checkpoints/``: the wall time of a steady pass (median of ``passes``, after
``WARMUP`` passes), of the pass after the driver reported a new checkpoint (the
manifests are listed again), and the listing calls, S3-sized pages and objects each
made. The setup is the operator tests'
(:class:`tests.operator.jobs.test_job_lifecycle.World`: a fake API, real local storage
wrapped in a counting store); only storage costs differ between the two runs.

Writes ``bench/results/operator_pass_cost.json``; run it with ``python -m
bench.operator_pass_cost`` (not part of ``make bench``, not run by the tests; the counts
are pinned by ``tests/security/test_operator_pass_cost.py``).
"""

from __future__ import annotations

import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from tests.operator.jobs.test_job_lifecycle import World
from tests.security.test_operator_pass_cost import (
    Cost,
    CountingStore,
    counted_world,
    fill,
    restored_and_running,
)

from bench.common import write_result

JUNK = 99_000
PASSES = 50
WARMUP = 5


def _timed(world: World, store: CountingStore) -> tuple[float, Cost]:
    store.cost = Cost()
    started = time.perf_counter()
    world.reconcile("copier")
    return time.perf_counter() - started, store.cost


def _run(root: Path, junk: int, passes: int) -> dict[str, Any]:
    world, store = counted_world(root)
    job = restored_and_running(world)
    fill(job, junk, dirs=("checkpoints",))
    for _ in range(WARMUP):
        world.reconcile("copier")
    steady = [_timed(world, store) for _ in range(passes)]
    world.write_checkpoint("copier", checkpoint=4)
    world.driver_reports("copier", checkpoint=4)
    judged_s, judged = _timed(world, store)
    _, cost = steady[-1]
    return {
        "stray_files": junk,
        "steady_pass_ms": round(statistics.median(s for s, _ in steady) * 1000, 3),
        "steady_pass_listings": {"calls": cost.calls, "pages": cost.pages, "objects": cost.objects},
        "judging_pass_ms": round(judged_s * 1000, 3),
        "judging_pass_listings": {
            "calls": judged.calls,
            "pages": judged.pages,
            "objects": judged.objects,
        },
        "released": world.status("copier")["restoredFrom"]["released"],
    }


def main(junk: int = JUNK, passes: int = PASSES) -> Path:
    with tempfile.TemporaryDirectory(prefix="gic-pass-cost-") as tmp:
        clean = _run(Path(tmp) / "clean", 0, passes)
        flooded = _run(Path(tmp) / "flooded", junk, passes)
    ratio = flooded["steady_pass_ms"] / clean["steady_pass_ms"]
    path = write_result(
        "operator_pass_cost",
        {
            "setup": (
                "one GICJob restored NoClaim, source not yet released; stray files in its "
                "checkpoints/ directory; fake API, local storage"
            ),
            "passes": passes,
            "clean": clean,
            "flooded": flooded,
            "steady_pass_ratio": round(ratio, 2),
        },
    )
    print(
        f"steady pass: {clean['steady_pass_ms']} ms clean, {flooded['steady_pass_ms']} ms "
        f"with {junk} stray files ({ratio:.2f}x); wrote {path}"
    )
    return path


if __name__ == "__main__":
    main()
