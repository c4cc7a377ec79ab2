"""Event time on real Spark: the documented example drops exactly the late events,
records the watermark in every checkpoint, and continues from it after a restart and
after a restore from a canonical savepoint (docs/architecture.md §13.11).

The events are built so that each continuation matters: the resumed run's first file
holds events that are late only against the watermark the first run stored, and the
restored job's file events late only against the watermark the savepoint carries. A
start from zero would keep them and the sums would differ from the reference.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from gic_runtime.checkpoint.catalog import load_retained
from gic_runtime.sinks import read_file_sink
from gic_runtime.storage.uri import StoreResolver

from .cli_runner import clean_env, run_steps

REPO = Path(__file__).resolve().parents[2]
T0 = datetime(2026, 11, 28, 12, 0, 0, tzinfo=UTC)
DELAY = timedelta(seconds=10)
Event = tuple[str, int, int]  # user, seconds after T0, amount


def file_text(events: list[Event]) -> str:
    rows = [
        {"user": u, "ts": (T0 + timedelta(seconds=s)).isoformat(), "amount": a}
        for u, s, a in events
    ]
    return "".join(json.dumps(r) + "\n" for r in rows)


# One file per batch. Batch n runs with the watermark of batches < n: max seen - 10 s.
FILES: list[list[Event]] = [
    [("a", 0, 1), ("b", 5, 2), ("a", 20, 4)],  # wm after: 10
    [("a", 30, 8), ("b", 5, 16), ("c", 50, 32)],  # b@5 late (wm 10); wm after: 40
    [("a", 35, 64), ("b", 45, 128)],  # after a restart: a@35 late (wm 40); wm after: 40
    [("c", 39, 256), ("a", 70, 512)],  # restored job: c@39 late (wm 40); wm after: 60
]


def reference(files: list[list[Event]]) -> tuple[dict[str, int], list[int], list[int | None]]:
    """Sums without late events, late events per batch, watermark (s after T0) after
    each batch, computed independently of the runtime."""
    sums: dict[str, int] = {}
    late: list[int] = []
    marks: list[int | None] = []
    watermark: int | None = None
    seen: int | None = None
    for events in files:
        late.append(sum(1 for _, s, _ in events if watermark is not None and s < watermark))
        for user, s, amount in events:
            if watermark is None or s >= watermark:
                sums[user] = sums.get(user, 0) + amount
        top = max(s for _, s, _ in events)
        seen = top if seen is None else max(seen, top)
        candidate = seen - int(DELAY.total_seconds())
        watermark = candidate if watermark is None else max(watermark, candidate)
        marks.append(watermark)
    return sums, late, marks


def last_sums(out: Path) -> dict[str, int]:
    table = read_file_sink(out.resolve().as_uri(), StoreResolver())
    assert table is not None
    latest: dict[str, tuple[int, int]] = {}
    for row in table.to_pylist():
        if row["user"] not in latest or row["batch_id"] > latest[row["user"]][0]:
            latest[row["user"]] = (row["batch_id"], row["spent"])
    return {user: spent for user, (_, spent) in latest.items()}


def us(seconds: int) -> int:
    return int((T0 + timedelta(seconds=seconds)).timestamp() * 1_000_000)


@pytest.mark.slow
def test_late_events_are_dropped_and_the_watermark_survives_restart_and_restore(
    tmp_path: Path,
) -> None:
    work = tmp_path / "work"
    (work / "events").mkdir(parents=True)
    (work / "examples").symlink_to(REPO / "examples")
    for i in range(2):
        (work / "events" / f"f{i}.json").write_text(file_text(FILES[i]))
    run = ["run", "examples/late_events.py", "--"]
    steps = [
        {"argv": [*run, "--input", "events/", "--output", "spend/"]},
        {  # a restart: the stored watermark makes a@35 late
            "argv": [*run, "--input", "events/", "--output", "spend/"],
            "before": [[str(work / "events" / "f2.json"), file_text(FILES[2])]],
        },
        {"argv": ["savepoint", "--job-id", "late-events", "--format", "canonical"]},
        {  # a new job from the canonical savepoint: its watermark makes c@39 late
            "argv": [
                "run",
                "examples/late_events.py",
                "--job-id",
                "late-events-v2",
                "--restore",
                "{savepoint}",
                "--",
                "--input",
                "events/",
                "--output",
                "spend2/",
            ],
            "before": [[str(work / "events" / "f3.json"), file_text(FILES[3])]],
        },
    ]
    done, results = run_steps(
        steps, cwd=work, scratch=tmp_path, env=clean_env(GIC_LOCAL_DIR=str(tmp_path / "local"))
    )
    assert done.returncode == 0, done.stderr[-4000:]
    assert [r["code"] for r in results] == [0, 0, 0, 0], results

    sums, late, marks = reference(FILES)
    line = re.compile(r"batch (\d+): \d+ events, (\d+) late")
    printed = [(int(n), int(k)) for r in results for n, k in line.findall(r["stdout"])]
    # first run: batches 0, 1; restart: batch 2; restored job: its first batch (id 3)
    assert [k for _, k in printed] == late, printed

    root = (work / "gic-data").resolve().as_uri()
    resolver = StoreResolver()
    stored = load_retained(resolver, root, "late-events")
    assert [s.manifest.event_time.watermark_us for s in stored][-1] == us(marks[2] or 0)
    restored = load_retained(resolver, root, "late-events-v2")
    assert restored[-1].manifest.event_time.watermark_us == us(marks[3] or 0)
    assert restored[-1].manifest.event_time.max_event_time_us == us(70)

    first_job = reference(FILES[:3])[0]
    assert last_sums(work / "spend") == first_job
    # the restored job's output: only the users its batch updated
    assert last_sums(work / "spend2") == {"a": sums["a"]}
    assert sums["c"] == 32  # c@39 was late for the restored job


TWO_EXECUTORS = """
import sys
from pyspark.sql import SparkSession
spark = (
    SparkSession.builder.master("local-cluster[2,1,1024]")
    .appName("late-events")
    .config("spark.ui.enabled", "false")
    .config("spark.sql.shuffle.partitions", "4")
    .config("spark.executor.memory", "768m")
    .config("spark.executorEnv.PYSPARK_PYTHON", sys.executable)
    .getOrCreate()
)
sys.path.insert(0, "examples")
import late_events
late_events.main(["--input", "events/", "--output", "spend/"])
"""


@pytest.mark.slow
def test_late_events_are_dropped_on_two_executors(tmp_path: Path) -> None:
    """The same job on two executor JVMs: the split runs in their Python workers, with
    the watermark the barrier carries there."""
    work = tmp_path / "work"
    (work / "events").mkdir(parents=True)
    (work / "examples").symlink_to(REPO / "examples")
    stamp = time.time_ns()
    for i, events in enumerate(FILES):
        path = work / "events" / f"f{i}.json"
        path.write_text(file_text(events))
        os.utime(path, ns=(stamp + i * 10**9, stamp + i * 10**9))  # taken in this order
    env = clean_env(
        GIC_STORAGE=(work / "gic-data").as_uri(),
        GIC_NUM_BUCKETS="16",
        GIC_LOCAL_DIR=str(tmp_path / "local"),
        SPARK_LOCAL_IP="127.0.0.1",
        PYSPARK_PYTHON=sys.executable,  # the workers' interpreter must import gic_runtime
    )
    done = subprocess.run(
        [sys.executable, "-c", TWO_EXECUTORS],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
        timeout=420,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    sums, late, marks = reference(FILES)
    line = re.compile(r"batch (\d+): \d+ events, (\d+) late")
    assert [int(k) for _, k in line.findall(done.stdout)] == late, done.stdout
    stored = load_retained(StoreResolver(), (work / "gic-data").as_uri(), "late-events")
    assert stored[-1].manifest.event_time.watermark_us == us(marks[-1] or 0)
    assert last_sums(work / "spend") == sums
