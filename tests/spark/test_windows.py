"""Windows on real Spark, the documented example run as documented:
``examples/windowed_counts.py`` writes each one-minute window (and each session) once,
with counts equal to Spark's own ``groupBy(window(...))`` / ``session_window`` over the
same rows, across a restart; the same on two executor JVMs."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from gic_runtime.sinks import read_file_sink
from gic_runtime.storage.uri import StoreResolver

from .cli_runner import clean_env, run_steps

REPO = Path(__file__).resolve().parents[2]
T0 = datetime(2026, 11, 28, 12, 0, 0, tzinfo=UTC)
PAGES = ["home", "cart", "help"]


def views(i: int) -> list[tuple[str, int]]:
    """File ``i``: views at ``25 i + j`` seconds; page j skips every third file."""
    return [(p, 25 * i + 7 * j) for j, p in enumerate(PAGES) if (i + j) % 3 != 2]


NUM_FILES = 10
FILES = [views(i) for i in range(NUM_FILES)]


def file_text(events: list[tuple[str, int]]) -> str:
    rows = [{"page": p, "ts": (T0 + timedelta(seconds=s)).isoformat()} for p, s in events]
    return "".join(json.dumps(r) + "\n" for r in rows)


def written(out: Path) -> list[tuple[Any, ...]]:
    table = read_file_sink(out.resolve().as_uri(), StoreResolver())
    assert table is not None
    return [
        (r["page"], r["window_start"], r["window_end"], r["views"], r["first_view"])
        for r in table.to_pylist()
    ]


def spark_reference(spark: SparkSession, gap: str | None) -> set[tuple[Any, ...]]:
    """Spark's own windows over the same rows, those the final watermark closed (the
    watermark is 10 s behind the latest view; no view is late here)."""
    rows = [(p, T0 + timedelta(seconds=s)) for f in FILES for p, s in f]
    df = spark.createDataFrame(rows, "page string, ts timestamp")
    window = F.session_window("ts", gap) if gap else F.window("ts", "1 minute")
    found = df.groupBy(window.alias("w"), "page").agg(
        F.count("*").alias("views"), F.min("ts").alias("first_view")
    )
    watermark = T0 + timedelta(seconds=max(s for f in FILES for _, s in f) - 10)
    # GIC writes a window once the watermark reaches its end, a session once past it
    limit = watermark if gap else watermark + timedelta(microseconds=1)
    return {
        (r["page"], r["w"]["start"].astimezone(UTC), r["w"]["end"].astimezone(UTC),
         r["views"], r["first_view"].astimezone(UTC))
        for r in found.collect()
        if r["w"]["end"].astimezone(UTC) < limit
    }  # fmt: skip


@pytest.mark.slow
def test_windows_equal_sparks_own_across_a_restart(tmp_path: Path, spark: SparkSession) -> None:
    work = tmp_path / "work"
    (work / "views").mkdir(parents=True)
    (work / "examples").symlink_to(REPO / "examples")

    def add(i: int) -> list[str]:
        return [str(work / "views" / f"f{i}.json"), file_text(FILES[i])]

    minute = ["run", "examples/windowed_counts.py", "--", "--input", "views/"]
    sessions = ["run", "examples/windowed_counts.py", "--job-id", "view-sessions", "--"]
    sessions += ["--input", "views/", "--output", "sessions/", "--session", "40 seconds"]
    steps = [
        {"argv": [*minute, "--output", "minutes/"], "before": [add(i) for i in range(5)]},
        {"argv": [*minute, "--output", "minutes/"], "before": [add(i) for i in range(5, 10)]},
        {"argv": sessions},
    ]
    done, results = run_steps(
        steps, cwd=work, scratch=tmp_path, env=clean_env(GIC_LOCAL_DIR=str(tmp_path / "local"))
    )
    assert done.returncode == 0, done.stderr[-4000:]
    assert [r["code"] for r in results] == [0, 0, 0], results
    for out, gap in (("minutes", None), ("sessions", "40 seconds")):
        got = written(work / out)
        assert len(got) == len(set(got)), f"a window was written twice ({out})"
        assert set(got) == spark_reference(spark, gap), out
