"""``gic demo`` (``make run``): the word-count example end to end on local Spark.

1. Job ``word-count`` counts words of six generated text files, one file per
   micro-batch, with GIC checkpoints on local storage; it runs in the background and
   the demo asks it, through the durable control channel, to stop with a savepoint.
2. Job ``word-count-v2`` starts from that savepoint in no-claim mode, reads two more
   files, and releases the savepoint with its first (self-contained) checkpoint.
3. Checks, by reading storage: v2's counts equal a reference computed from all eight
   files (state carried over, nothing lost or doubled); v2's manifests reference
   nothing in the savepoint; after deleting the savepoint, v2 still resumes exactly.

Everything lives in one directory (default ``./gic-demo``, replaced on every run),
including Spark's own output (``spark.log``, unless ``GIC_SPARK_LOG`` names another
file). If job ``word-count`` fails (e.g. Spark's Python workers cannot import GIC), the
demo ends at once with that job's error instead of waiting for a savepoint.
"""

from __future__ import annotations

import os
import shutil
import threading
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from rich.console import Console
from rich.table import Table

from gic_runtime.checkpoint.catalog import load_retained
from gic_runtime.checkpoint.manifest import RestoreMode
from gic_runtime.config import GICSettings
from gic_runtime.control import ControlChannel
from gic_runtime.control.auth import ControlKey
from gic_runtime.errors import GICError
from gic_runtime.processing import count
from gic_runtime.sinks import read_file_sink
from gic_runtime.spark.job import GICJob, GICQuery, RunSummary
from gic_runtime.spark.reports import BatchReport
from gic_runtime.spark.session import SPARK_LOG_ENV, local_spark
from gic_runtime.status import read_status
from gic_runtime.storage.uri import StoreResolver

MARKER = ".gic-demo"
#: Seconds the demo waits for each of its steps (a healthy run needs a few).
STEP_TIMEOUT_S = 300.0
_WORDS = (
    "state",
    "changelog",
    "checkpoint",
    "savepoint",
    "bucket",
    "barrier",
    "manifest",
    "snapshot",
    "spark",
    "stream",
    "kubernetes",
    "operator",
    "restore",
    "claim",
    "epoch",
    "sweep",
)


@dataclass(frozen=True)
class DemoPaths:
    base: Path

    @property
    def input(self) -> Path:
        return self.base / "input"

    @property
    def storage(self) -> str:
        return (self.base / "storage").as_uri()

    @property
    def local(self) -> Path:
        return self.base / "local"

    def output(self, job: str) -> Path:
        return self.base / "output" / job


def spark_log(base: Path) -> Path:
    """Where the demo's JVM writes its output: ``GIC_SPARK_LOG``, else
    ``<base>/spark.log``."""
    given = os.environ.get(SPARK_LOG_ENV)
    return Path(given) if given else base.resolve() / "spark.log"


class _Background:
    """A query run on a thread; :meth:`check` re-raises its failure on the caller's."""

    def __init__(self, query: GICQuery, name: str) -> None:
        self.summary: RunSummary | None = None
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, args=(query,), name=name, daemon=True)
        self.thread.start()

    def _run(self, query: GICQuery) -> None:
        try:
            self.summary = query.run()
        except BaseException as exc:
            self.error = exc

    def check(self, *_: object) -> None:
        """Raise the query's error once it has failed (also as a wait's progress hook)."""
        if self.error is not None:
            raise self.error
        if not self.thread.is_alive() and self.summary is None:
            raise GICError("the demo's first job ended without a result")

    def wait_for_checkpoint(self, resolver: StoreResolver, paths: DemoPaths, last: int) -> None:
        deadline = time.monotonic() + STEP_TIMEOUT_S
        while time.monotonic() < deadline:
            self.check()
            status = read_status(resolver, paths.storage, "word-count")
            if status and status.last_checkpoint and status.last_checkpoint.id >= last:
                return
            if not self.thread.is_alive():
                return
            time.sleep(0.2)


def _prepare(base: Path) -> DemoPaths:
    if base.exists():
        if not (base / MARKER).exists():
            raise GICError(
                f"{base} exists and is not a gic demo directory; pass another --dir or remove it"
            )
        shutil.rmtree(base)
    base.mkdir(parents=True)
    (base / MARKER).write_text("created by gic demo; replaced on every run\n")
    return DemoPaths(base)


def _write_input(directory: Path, first: int, count_: int) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    for i in range(first, first + count_):
        lines = [
            " ".join(_WORDS[(i * 5 + j * 3 + k * 7) % len(_WORDS)] for k in range(2 + (i + j) % 5))
            for j in range(400)
        ]
        path = directory / f"part-{i:03d}.txt"
        path.write_text("\n".join(lines) + "\n")
        os.utime(path, (1_700_000_000 + i, 1_700_000_000 + i))


def _words(spark: SparkSession, src: Path) -> DataFrame:
    lines = spark.readStream.option("maxFilesPerTrigger", 1).text(str(src))
    return lines.select(F.explode(F.split("value", " ")).alias("word")).where("word != ''")


def _batch_table(title: str, reports: Sequence[BatchReport]) -> Table:
    table = Table(title=title)
    for column in ("batch", "rows", "commit ms", "uploaded", "local hits", "self-contained"):
        table.add_column(column, justify="right")
    for r in reports:
        table.add_row(
            str(r.batch_id),
            f"{r.rows_in:,}",
            f"{r.commit_ms:.0f}",
            f"{r.bytes_uploaded:,} B",
            f"{r.local_hit_ratio:.0%}",
            "yes" if r.self_contained else "",
        )
    return table


def _settings(paths: DemoPaths, job_id: str, **extra: object) -> GICSettings:
    return GICSettings(
        job_id=job_id,
        storage=paths.storage,
        num_buckets=32,
        local_dir=str(paths.local),
        control_poll_s=0.2,
        materialization_interval_s=2.0,
        **extra,
    )


def run_demo(base: Path, console: Console | None = None) -> bool:
    """Run the demo in ``base``; returns whether every check passed. A failed job
    raises its :class:`GICError` (the CLI adds where Spark's log is)."""
    out = console or Console()
    paths = _prepare(base.resolve())
    resolver = StoreResolver()
    _write_input(paths.input, 0, 6)
    log = spark_log(paths.base)
    out.print(f"[bold]GIC demo[/] in {paths.base}")
    out.print(f"starting local Spark (local[2], 4 partitions); its log: {log}", markup=False)
    spark = local_spark("gic-demo", log_file=str(log))
    try:
        # 1. job word-count, stopped with a savepoint through the control channel
        job_a = GICJob(spark, _settings(paths, "word-count"))
        query_a = job_a.keyed(_words(spark, paths.input), key="word").aggregate(count=count())
        background = _Background(
            query_a.to_parquet(str(paths.output("word-count"))), "gic-demo-word-count"
        )
        background.wait_for_checkpoint(resolver, paths, 5)
        background.check()
        # the driver runs here: it honours requests with GIC_CONTROL_KEY when one is set
        control = ControlChannel(resolver, paths.storage, "word-count", key=ControlKey.from_env())
        request = control.request_savepoint("stop", "native", requested_by="gic demo")
        out.print(f"requested stop-with-savepoint {request.request_id}")
        outcome = control.wait(
            request.request_id, timeout_s=STEP_TIMEOUT_S, progress=background.check
        )
        background.thread.join(timeout=STEP_TIMEOUT_S)
        background.check()
        summary_a = background.summary
        if summary_a is None or outcome.path is None:
            raise GICError("job word-count did not stop with a savepoint")
        out.print(_batch_table("job word-count", summary_a.batches))
        out.print(
            f"savepoint at checkpoint {outcome.checkpoint_id}: {outcome.path} "
            f"({outcome.files} files, {outcome.size_bytes:,} bytes); job stopped: "
            f"{summary_a.stop_reason}"
        )

        # 2. job word-count-v2 from the savepoint, no-claim
        _write_input(paths.input, 6, 2)
        settings_b = _settings(
            paths,
            "word-count-v2",
            restore_source=outcome.path,
            restore_mode=RestoreMode.NO_CLAIM,
        )
        job_b = GICJob(spark, settings_b)
        query_b = job_b.keyed(_words(spark, paths.input), key="word").aggregate(count=count())
        summary_b = query_b.to_parquet(str(paths.output("word-count-v2"))).run(
            trigger="available-now"
        )
        out.print(_batch_table("job word-count-v2 (restored, no-claim)", summary_b.batches))
        retained = load_retained(resolver, paths.storage, "word-count-v2")
        lineage = retained[-1].manifest.restored_from
        released = lineage is not None and lineage.released
        leaked = sorted(
            u for s in retained for u in s.manifest.uris() if u.startswith(outcome.path)
        )

        # 3. checks against a reference computed from the input files
        reference: Counter[str] = Counter()
        for path in sorted(paths.input.glob("*.txt")):
            reference.update(path.read_text().split())
        table = read_file_sink(paths.output("word-count-v2").as_uri(), resolver)
        latest: dict[str, int] = {}
        if table is not None:
            for row in table.to_pylist():
                latest[row["word"]] = row["count"]
        v2_words = {
            w for i in (6, 7) for w in (paths.input / f"part-{i:03d}.txt").read_text().split()
        }
        carried = bool(v2_words) and all(latest.get(w) == reference[w] for w in v2_words)
        shutil.rmtree(outcome.path.removeprefix("file://"))
        summary_c = query_b.to_parquet(str(paths.output("word-count-v2"))).run(
            trigger="available-now"
        )
        resumed = summary_c.start.own and summary_c.start.resumed_after == summary_b.last_checkpoint

        checks = {
            "state carried over (v2 counts == reference over all 8 files)": carried,
            "savepoint released after v2's first checkpoint": released,
            "no v2 manifest references the savepoint": not leaked,
            "v2 resumes its own checkpoint after the savepoint was deleted": resumed,
        }
        out.print()
        for name, ok in checks.items():
            out.print(f"  {'[green]ok[/]' if ok else '[red]FAILED[/]'}  {name}")
        words = sum(reference.values())
        out.print(
            f"\n{words:,} words in 8 files; {summary_a.batches_run + summary_b.batches_run} "
            f"checkpointed batches over 2 jobs; storage: {paths.storage}"
        )
        out.print(
            f"inspect with: gic checkpoints --storage {paths.storage} --job-id word-count-v2",
            markup=False,
            soft_wrap=True,
        )
        return all(checks.values())
    finally:
        spark.stop()
