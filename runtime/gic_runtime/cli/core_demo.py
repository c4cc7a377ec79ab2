"""The core-only demo: a local keyed word count with GIC checkpoints on local storage,
run by ``python -m gic_runtime.cli.core_demo`` without Spark, on the runtime core alone
(:class:`~gic_runtime.executor.state_task.StateTask` and
:class:`~gic_runtime.driver.timeline.CheckpointTimeline`). ``make run`` runs
``gic demo`` instead (:mod:`gic_runtime.cli.cmd_demo`): a word count on local Spark,
stopped with a savepoint and restored from it (:mod:`gic_runtime.spark.word_count_demo`).

What it shows, end to end on the runtime core:

1. a job counts words in micro-batches; every batch is a checkpoint (changelog upload +
   manifest), while buckets are materialized in the background;
2. a native savepoint of the latest checkpoint;
3. a crash in the middle of a checkpoint, recovery with a higher fencing epoch, the orphan
   sweep of the unfinished checkpoint's uploads, and the restored counts checked exactly;
4. a second job restored from the savepoint in no-claim mode: its first checkpoint is
   self-contained, the source is released, and the counts carried over.

Usage: ``python -m gic_runtime.cli.core_demo [--storage URI] [--batches N]``.
"""

from __future__ import annotations

import argparse
import random
import tempfile
import time
from collections import Counter
from collections.abc import Mapping, Sequence

from rich.console import Console
from rich.table import Table

from gic_runtime.checkpoint import RestoreMode, StoredManifest
from gic_runtime.coordination import TaskSettings
from gic_runtime.driver import CheckpointTimeline, RestoreRequest
from gic_runtime.errors import GICError
from gic_runtime.executor import StateTask
from gic_runtime.executor.core import TaskContext
from gic_runtime.executor.state_task import BatchFn
from gic_runtime.handles import BucketState
from gic_runtime.layout import savepoint_dir
from gic_runtime.materialization.scheduler import MaterializationSettings
from gic_runtime.state.memory_store import InMemoryStore
from gic_runtime.storage import StorageURI, StoreResolver, open_store

BUCKETS = 32
WORDS = [f"w{n:05d}" for n in range(20_000)]
console = Console(highlight=False, soft_wrap=True)


def _batch(rng: random.Random, size: int) -> list[str]:
    # Zipf-like: a few hot words, a long tail.
    return [WORDS[min(int(rng.paretovariate(0.8)) - 1, len(WORDS) - 1)] for _ in range(size)]


class WordCountJob:
    """One attempt of a word-count job: a StateTask for all buckets plus its timeline.
    Every batch runs through the task core (:meth:`StateTask.checkpoint`)."""

    def __init__(
        self,
        resolver: StoreResolver,
        root: str,
        job_id: str,
        *,
        epoch: int = 1,
        restore: RestoreRequest | None = None,
    ) -> None:
        self.timeline = CheckpointTimeline(
            resolver, root, job_id, epoch=epoch, num_buckets=BUCKETS, retain=3, restore=restore
        )
        self.task = StateTask(
            root=root,
            job_id=job_id,
            epoch=epoch,
            num_buckets=BUCKETS,
            store=InMemoryStore(),
            resolver=resolver,
            settings=TaskSettings(
                materialization=MaterializationSettings(interval_s=1.0, jitter=0.2)
            ),
        )
        self.task.restore(self.timeline.start.manifest)
        self.counts = self.task.backend.value_state("count")

    @staticmethod
    def counting(words: Sequence[str]) -> BatchFn:
        """The batch's changes: add each word's occurrences to its count."""
        occurrences = Counter(words)

        def apply(ctx: TaskContext) -> None:
            counts = ctx.backend.value_state("count")
            for word, n in occurrences.items():
                counts.set(word, (counts.get(word) or 0) + n)

        return apply

    def run_batch(self, batch_id: int, words: Sequence[str]) -> tuple[StoredManifest, float, int]:
        """Count ``words`` and checkpoint the batch: task core, manifest, completion."""
        started = time.perf_counter()
        previous = self.timeline.latest()
        ack = self.task.checkpoint(
            self.counting(words),
            checkpoint_id=batch_id,
            self_contained=self.timeline.must_be_self_contained,
        )
        stored, _wait = self.timeline.commit(batch_id, ack.states, engine={"batch_id": batch_id})
        self.task.notify_checkpoint_complete(ack.states)
        took = time.perf_counter() - started
        return stored, took, _new_bytes(ack.states, previous)

    def read_all(self) -> dict[str, int]:
        got = self.counts.get_many(WORDS)
        return {w: c for w, c in zip(WORDS, got, strict=True) if c is not None}

    def close(self, *, crash: bool = False) -> None:
        self.task.close(wait=not crash)
        self.timeline.close()


def _new_bytes(states: Mapping[int, BucketState], previous: StoredManifest | None) -> int:
    seen = previous.manifest.uris() if previous else frozenset()
    total = 0
    for state in states.values():
        total += sum(h.length for h in state.changelog if h.uri not in seen)
        if state.snapshot is not None and state.snapshot.uri not in seen:
            total += state.snapshot.size
    return total


def run(storage: str, batches: int) -> None:
    root = str(StorageURI.parse(storage))
    resolver = StoreResolver()
    resolver.register(open_store(root))
    rng = random.Random(42)
    reference: Counter[str] = Counter()
    console.print(f"[bold]GIC demo[/bold]: keyed word count, {BUCKETS} buckets, storage {root}")

    # 1. The job runs; every micro-batch is a checkpoint.
    job = WordCountJob(resolver, root, "wordcount")
    table = Table("batch", "words", "checkpoint ms", "bytes uploaded", "materialized")
    for batch_id in range(1, batches + 1):
        words = _batch(rng, 20_000)
        stored, took, uploaded = job.run_batch(batch_id, words)
        reference.update(words)
        snaps = sum(1 for s in stored.manifest.buckets.values() if s.snapshot is not None)
        table.add_row(
            str(batch_id),
            f"{len(words):,}",
            f"{took * 1000:.1f}",
            f"{uploaded:,}",
            f"{snaps}/{BUCKETS} buckets",
        )
        time.sleep(0.15)  # let background materialization make progress between batches
    console.print(table)

    # 2. A native savepoint of the latest checkpoint.
    sp_dir = savepoint_dir(root, "wordcount-sp-1")
    sp = job.timeline.native_savepoint(sp_dir)
    console.print(
        f"savepoint: {sp.files} files, {sp.bytes:,} bytes "
        f"({sp.server_side_copies} server-side copies) at {sp.stored.uri}"
    )
    sp_counts = dict(reference)

    # 3. Crash in the middle of a checkpoint: uploads happen, the manifest never does.
    words = _batch(rng, 20_000)
    job.task.checkpoint(job.counting(words), checkpoint_id=batches + 1)
    job.close(crash=True)
    console.print("[yellow]crash[/yellow]: changelog uploaded, manifest not written")
    job = WordCountJob(resolver, root, "wordcount", epoch=2)
    sweep = job.timeline.sweep()
    console.print(
        f"recovered at checkpoint {job.timeline.start.checkpoint_id} with epoch 2; orphan "
        f"sweep deleted {sweep.deleted} file(s), {sweep.deleted_bytes:,} bytes"
    )
    _check(job.read_all(), dict(reference), f"counts recovered from checkpoint {batches}")
    job.close()

    # 4. A new job from the savepoint, no-claim mode.
    job2 = WordCountJob(
        resolver, root, "wordcount-v2", restore=RestoreRequest(sp_dir, RestoreMode.NO_CLAIM)
    )
    _check(job2.read_all(), sp_counts, "counts restored from the savepoint")
    words = _batch(rng, 20_000)
    stored, took, uploaded = job2.run_batch(batches + 1, words)
    lineage = stored.manifest.restored_from
    released = lineage is not None and lineage.released
    console.print(
        f"job wordcount-v2 restored from the savepoint (no-claim); first checkpoint "
        f"self-contained: {uploaded:,} bytes in {took * 1000:.0f} ms; source released: "
        f"[bold]{released}[/bold]"
    )
    _check(job2.read_all(), dict(Counter(sp_counts) + Counter(words)), "counts after new batch")
    job2.close()
    total = sum(reference.values())
    console.print(
        f"[green]done[/green]: {batches} checkpoints, {total:,} words, "
        f"{len(reference):,} distinct; every restore matched the reference exactly"
    )


def _check(got: dict[str, int], expected: dict[str, int], what: str) -> None:
    if got != expected:
        wrong = sum(1 for w in set(got) | set(expected) if got.get(w) != expected.get(w))
        raise SystemExit(f"error: {what} differ from the reference for {wrong} word(s)")
    console.print(f"  [green]ok[/green] {what}: {len(got):,} words match the reference")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0] if __doc__ else "")
    parser.add_argument("--storage", help="storage URI (default: a new temporary directory)")
    parser.add_argument("--batches", type=int, default=8, help="micro-batches to run")
    args = parser.parse_args(argv)
    storage = args.storage or tempfile.mkdtemp(prefix="gic-demo-")
    try:
        run(storage, args.batches)
    except GICError as exc:
        console.print(f"[red]error:[/red] {exc}")
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
