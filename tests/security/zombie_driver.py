"""A driver process for the zombie-commit tests: the per-batch protocol of the Spark
driver (claim an epoch, open the timeline, sweep, then per batch: fence check, task
batch, fence check, manifest, report), run with the in-process API (``StateTask`` +
``CheckpointTimeline``) so a test can start several drivers of one job as real
processes and hold one of them at a protocol step (``GIC_HOLDPOINTS``).

Usage::

    python zombie_driver.py ROOT JOB OUT --batches N [--wait FILE]

It claims the next epoch, restores the job's latest checkpoint (or starts empty),
checks the restored state against the reference, optionally waits until ``FILE``
exists (after ``FILE.ready`` is created), then runs ``N`` batches after the start
checkpoint. ``OUT`` receives a JSON report: epoch, start checkpoint, whether the
restored state was exact, the committed checkpoints, and the error that stopped it.
S3 settings come from the environment (``GIC_S3_ENDPOINT_URL``, ``AWS_*``).

Batch ``n`` adds ``n + 1`` to the counter of every key ``k<i>`` with ``(i + n) % 3 != 0``,
so the state after checkpoint ``n`` is a known function of ``n``.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

from gic_runtime.coordination import TaskSettings
from gic_runtime.driver import CheckpointTimeline
from gic_runtime.executor import StateTask
from gic_runtime.executor.core import TaskContext
from gic_runtime.fencing import Fence, claim_epoch
from gic_runtime.state.memory_store import InMemoryStore
from gic_runtime.storage.s3_settings import S3Settings
from gic_runtime.storage.uri import StoreResolver, open_store

JOB_BUCKETS = 4
KEYS = 24


def expected_state(last_checkpoint: int | None) -> dict[str, int]:
    """Counters after batches ``0..last_checkpoint`` (empty before any)."""
    counts: dict[str, int] = {}
    if last_checkpoint is None:
        return counts
    for n in range(last_checkpoint + 1):
        for i in range(KEYS):
            if (i + n) % 3 != 0:
                counts[f"k{i}"] = counts.get(f"k{i}", 0) + n + 1
    return counts


def read_state(task: StateTask) -> dict[str, int]:
    counts = task.backend.value_state("count")
    out: dict[str, int] = {}
    for i in range(KEYS):
        value = counts.get(f"k{i}")
        if value is not None:
            out[f"k{i}"] = int(value)
    return out


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("root")
    parser.add_argument("job")
    parser.add_argument("out")
    parser.add_argument("--batches", type=int, required=True)
    parser.add_argument("--wait", default=None)
    args = parser.parse_args(argv)

    report: dict[str, Any] = {"committed": [], "error": None}
    resolver = StoreResolver(S3Settings.from_env())
    resolver.register(open_store(args.root, S3Settings.from_env()))
    timeline: CheckpointTimeline | None = None
    task: StateTask | None = None
    try:
        epoch = claim_epoch(resolver, args.root, args.job, claimed_by=f"test-driver {args.out}")
        report["epoch"] = epoch
        fence = Fence(resolver, args.root, args.job, epoch)
        timeline = CheckpointTimeline(
            resolver, args.root, args.job, epoch=epoch, num_buckets=JOB_BUCKETS, retain=2
        )
        start = timeline.start.checkpoint_id
        report["start"] = start
        task = StateTask(
            root=args.root,
            job_id=args.job,
            epoch=epoch,
            num_buckets=JOB_BUCKETS,
            store=InMemoryStore(),
            resolver=resolver,
            settings=TaskSettings(),
        )
        task.restore(timeline.start.manifest)
        restored = read_state(task)
        report["restored_exact"] = restored == expected_state(start)
        report["restored"] = restored
        timeline.sweep()
        if args.wait:
            Path(args.wait + ".ready").write_text("ready")
            while not Path(args.wait).exists():
                time.sleep(0.02)
        first = 0 if start is None else start + 1
        for n in range(first, first + args.batches):

            def apply(ctx: TaskContext, n: int = n) -> None:
                counts = ctx.backend.value_state("count")
                for i in range(KEYS):
                    if (i + n) % 3 != 0:
                        counts.set(f"k{i}", (counts.get(f"k{i}") or 0) + n + 1)

            fence.check()
            states = task.checkpoint(apply, checkpoint_id=n).states
            fence.check()
            _, wait = timeline.commit(n, states, engine={"batch": n})
            wait()
            task.notify_checkpoint_complete(states)
            report["committed"].append(n)
    except Exception as exc:  # reported to the test, which decides
        report["error"] = {"type": type(exc).__name__, "message": str(exc)}
    finally:
        if task is not None:
            task.close()
        if timeline is not None:
            timeline.close()
        Path(args.out).write_text(json.dumps(report))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
