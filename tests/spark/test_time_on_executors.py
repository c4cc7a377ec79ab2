"""Event time, timers, TTL and windows on two executor JVMs: the sessions, dedup and
windowed-counts examples run one after another in one Spark application on
``local-cluster[2,1,M]`` (their functions shipped with ``addPyFile``, as a user
submitting them would), so registering, firing and expiry happen in the executors'
Python workers, with the watermark the barrier carries there. Each output equals what
the single-process tests check."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from gic_runtime.checkpoint.catalog import load_retained
from gic_runtime.storage.uri import StoreResolver

from . import test_timers, test_ttl, test_windows

REPO = Path(__file__).resolve().parents[2]
BUCKETS = 16

APP = """
import sys
from pyspark.sql import SparkSession
spark = (
    SparkSession.builder.master("local-cluster[2,1,1024]")
    .appName("time-on-executors")
    .config("spark.ui.enabled", "false")
    .config("spark.executor.memory", "768m")
    .config("spark.executorEnv.PYSPARK_PYTHON", sys.executable)
    .getOrCreate()
)
sys.path.insert(0, "examples")
for name in ("sessions", "dedup", "windowed_counts"):
    spark.sparkContext.addPyFile(f"examples/{name}.py")  # their functions run on executors
import dedup, sessions, windowed_counts
sessions.main(["--input", "clicks/", "--output", "sessions/"])
print("== dedup", flush=True)
dedup.main(["--input", "orders/", "--output", "unique/"])
windowed_counts.main(["--input", "views/", "--output", "minutes/"])
"""


def _write(directory: Path, texts: list[str]) -> None:
    directory.mkdir(parents=True)
    stamp = time.time_ns()
    for i, text in enumerate(texts):
        path = directory / f"f{i:02d}.json"
        path.write_text(text)
        os.utime(path, ns=(stamp + i * 10**9, stamp + i * 10**9))  # taken in this order


@pytest.mark.slow
def test_timers_ttl_and_windows_on_two_executors(tmp_path: Path, spark: SparkSession) -> None:
    work = tmp_path / "work"
    work.mkdir()
    (work / "examples").symlink_to(REPO / "examples")
    clicks = [test_timers.clicks(i) for i in range(test_timers.NUM_FILES)]
    _write(work / "clicks", [test_timers.file_text(f) for f in clicks])
    _write(work / "orders", [test_ttl.file_text(f) for f in test_ttl.FILES])
    _write(work / "views", [test_windows.file_text(f) for f in test_windows.FILES])
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("GIC_") and k not in ("PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON")
    }
    env |= {
        "GIC_STORAGE": (work / "gic-data").as_uri(),
        "GIC_NUM_BUCKETS": str(BUCKETS),
        "GIC_LOCAL_DIR": str(tmp_path / "local"),
        "SPARK_LOCAL_IP": "127.0.0.1",
        "PYSPARK_PYTHON": sys.executable,
    }
    done = subprocess.run(
        [sys.executable, "-c", APP],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-4000:]

    sessions = test_timers.written_sessions(work / "sessions")
    assert len(sessions) == len(set(sessions))
    assert set(sessions) == test_timers.reference_sessions(clicks)

    test_ttl.check(work / "unique", done.stdout.split("== dedup", 1)[1])
    root = (work / "gic-data").as_uri()
    assert test_ttl.remembered(root, "dedup") == 2

    windows = test_windows.written(work / "minutes")
    assert len(windows) == len(set(windows))
    assert set(windows) == test_windows.spark_reference(spark, None)

    stored = load_retained(StoreResolver(), root, "sessions")
    assert stored[-1].manifest.event_time.watermark_us is not None
