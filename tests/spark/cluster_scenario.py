"""One word-count run on a multi-executor Spark cluster, in its own process.

Run by ``test_multi_executor.py`` (a Spark driver holds one SparkContext
per process, and the other Spark tests use ``local[2]``)::

    python tests/spark/cluster_scenario.py --dir D --master 'local-cluster[2,1,1024]' \
        [--kill mid-batch|between-batches] [--kill-batch K] [--batches N]

Writes ``D/result.json``: one report per batch (local hits, restores, executors,
pinned, moved ranges), the executor-local directories found, and the executors
killed. The sink output stays in ``D/out`` for the test to check against the reference.

Killing: ``mid-batch`` SIGKILLs the executor JVM running the first state task of batch
K from inside that task (once: a marker file makes the retry run normally);
``between-batches`` SIGKILLs one executor JVM from the driver right after batch K
committed. Either way the cluster's worker starts a replacement executor; after batch
K+1 (which runs without it) the driver waits until it has registered.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shutil
import signal
import sys
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
sys.path.insert(0, str(Path(__file__).resolve().parent))

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import SparkSession
from pyspark.sql import functions as F
from words import write_text_batches

from gic_runtime.checkpoint.catalog import load_retained
from gic_runtime.config import GICSettings
from gic_runtime.processing import StateAccess, count
from gic_runtime.spark import BatchReport, GICJob
from gic_runtime.storage.uri import StoreResolver

EXECUTOR_MAIN = "CoarseGrainedExecutorBackend"
EXECUTORS = 2
"""Executors of every cluster the tests give (``local-cluster[2,...]``, two workers)."""
OUTPUT = pa.schema([("word", pa.string()), ("count", pa.int64())])


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def _parent(pid: int) -> int:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return 0
    return int(stat.rsplit(")", 1)[1].split()[1])


def executor_jvm_of_this_task() -> int:
    """The executor JVM among this Python worker's ancestors (0: none)."""
    pid = os.getpid()
    while pid > 1:
        pid = _parent(pid)
        if EXECUTOR_MAIN in _cmdline(pid):
            return pid
    return 0


def executor_jvms() -> list[int]:
    """Executor JVMs descending from this driver process, sorted."""
    me = os.getpid()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        pid = int(entry.name)
        if EXECUTOR_MAIN not in _cmdline(pid):
            continue
        ancestor = pid
        while ancestor > 1 and ancestor != me:
            ancestor = _parent(ancestor)
        if ancestor == me:
            found.append(pid)
    return sorted(found)


def wait_for_executors(spark: SparkSession, count: int, *, timeout_s: float) -> None:
    """Wait until ``count`` executors are registered (the driver's block manager aside)."""
    deadline = time.monotonic() + timeout_s
    sc: Any = spark.sparkContext._jsc.sc()
    while sc.getExecutorMemoryStatus().size() - 1 < count:
        if time.monotonic() > deadline:
            raise TimeoutError(f"fewer than {count} executors after {timeout_s} s")
        time.sleep(0.2)


def make_counter(marker: str, kill_batch: int) -> Any:
    """A vectorized word count; with a marker path, the first task of ``kill_batch``
    SIGKILLs its own executor once."""

    def count_words(table: pa.Table, states: StateAccess) -> pa.Table:
        counts = table.group_by("word").aggregate([("word", "count")])
        words = counts.column("word").to_pylist()
        added = counts.column("word_count").to_pylist()
        state = states.value("count")
        totals = [old + n for old, n in zip(state.get_many(words, 0), added, strict=True)]
        for word, total in zip(words, totals, strict=True):
            state.set(word, total)
        if marker and states.batch_id == kill_batch:
            try:
                os.close(os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
            except FileExistsError:
                pass
            else:
                jvm = executor_jvm_of_this_task()
                if jvm:
                    os.kill(jvm, signal.SIGKILL)
        return pa.table({"word": words, "count": pc.cast(pa.array(totals), pa.int64())})

    return count_words


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--dir", required=True, type=Path)
    parser.add_argument("--master", default="local-cluster[2,1,1024]")
    parser.add_argument("--kill", choices=["mid-batch", "between-batches"])
    parser.add_argument("--kill-batch", type=int, default=3)
    parser.add_argument("--batches", type=int, default=8)
    parser.add_argument(
        "--local-root", type=Path, help="where executors' scratch directories are (default: D)"
    )
    parser.add_argument("--first-file", type=int, default=0, help="index of the first new file")
    parser.add_argument(
        "--restore",
        choices=["background", "eager", "ahead", "select"],
        default="background",
        help="restore mode (ahead: restore_at_start, a job of its own beside the start; "
        "select: an aggregate whose first batch runs on the keys it names)",
    )
    parser.add_argument(
        "--wipe-local", action="store_true", help="start with empty executor-local directories"
    )
    args = parser.parse_args()
    base: Path = args.dir
    src, out, scratch = base / "in", base / "out", base / "spark-local"
    if args.wipe_local:
        shutil.rmtree(scratch, ignore_errors=True)
    write_text_batches(src, args.batches, start=args.first_file, lines=200)
    spark = (
        SparkSession.builder.master(args.master)
        .appName("gic-cluster-test")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "4")
        .config("spark.local.dir", str(scratch))
        .config("spark.executor.memory", "768m")
        .config("spark.executorEnv.PYSPARK_PYTHON", sys.executable)
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    # A standalone master starts executors after the application registers and does not
    # wait for them (spark.scheduler.minRegisteredResourcesRatio is 0 there): a first
    # batch planned before both registered would run on one, unpinned.
    wait_for_executors(spark, EXECUTORS, timeout_s=180)
    settings = GICSettings(
        job_id="wc-cluster",
        storage=(base / "store").as_uri(),
        num_buckets=16,
        control_poll_s=0.1,
        orphan_sweep_interval_s=0.5,
        restore_at_start=args.restore in ("ahead", "select"),
        restore_background=args.restore in ("background", "select"),
        restore_select_keys=args.restore == "select",
        # the first batch after the restart touches every bucket: restore it in the
        # background all the same, so the test covers that path end to end
        restore_eager_when_all_touched=False,
        restore_parallel=1,
        restore_fetch_threads=2,
    )
    killed: list[int] = []

    def on_batch(report: BatchReport) -> None:
        if args.kill and report.batch_id == args.kill_batch + 1:
            # one batch ran without the lost executor; let its replacement register
            # (its start-up time varies with load), as a resized cluster would
            wait_for_executors(spark, EXECUTORS, timeout_s=180)
        if args.kill == "between-batches" and report.batch_id == args.kill_batch:
            victims = executor_jvms()
            if victims:
                os.kill(victims[-1], signal.SIGKILL)
                killed.append(victims[-1])

    marker = str(base / "killed.marker") if args.kill == "mid-batch" else ""
    job = GICJob(spark, settings)
    lines = spark.readStream.option("maxFilesPerTrigger", 1).text(str(src))
    words = lines.select(F.explode(F.split("value", " ")).alias("word")).where("word != ''")
    keyed = job.keyed(words, key="word")
    if args.restore == "select":  # GIC's aggregate names its keys: same output
        query = keyed.aggregate(count=count())
    else:
        query = keyed.process_batches(make_counter(marker, args.kill_batch), OUTPUT)
    gic_query = query.to_parquet(str(out))
    summary = gic_query.run(trigger="available-now", on_batch=on_batch)
    ahead = gic_query.driver.restore_ahead if gic_query.driver is not None else None
    ahead_result = ahead.wait(60) if ahead is not None else None
    local_root = args.local_root or scratch
    local_dirs = sorted(str(p) for p in local_root.rglob("gic-local/wc-cluster/state"))
    resolver = StoreResolver()
    referenced: set[str] = set()
    for stored in load_retained(resolver, settings.storage, settings.job_id):
        referenced |= stored.manifest.uris()
    segments = {p.as_uri() for p in (base / "store/jobs/wc-cluster/changelog").rglob("*.seg")}
    result = {
        "batches": [
            {
                "batch_id": b.batch_id,
                "local_hits": b.local_hits,
                "restored": b.restored,
                "empty": b.empty,
                "executors": b.executors,
                "pinned": b.pinned,
                "moved_ranges": [list(r) for r in b.moved_ranges],
                "orphans_deleted": b.orphans_deleted,
                "restore_pending": b.restore_pending,
                "restore_bytes": b.restore_bytes,
                "selected": b.selected,
            }
            for b in summary.batches
        ],
        "local_dirs": local_dirs,
        "killed": killed,
        "unreferenced_segments": sorted(segments - referenced),
        "mid_batch_killed": Path(marker).exists() if marker else False,
        "restore_ahead": None if ahead_result is None else dataclasses.asdict(ahead_result),
    }
    spark.stop()
    (base / "result.json").write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
