"""``read_state`` on real Spark shows timers and TTL deadlines as the jobs left them:
``examples/sessions.py``'s open sessions with their event-time timers at ``end + gap``,
and ``examples/dedup.py``'s remembered ids with their event-time deadlines; the index
entries beside them (timers' time index, the expiry index) never appear. Sessions and
timers written back with ``write_state`` (one session changed) start a new sessions job
whose timers fire and close the written sessions."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from gic_runtime.sinks import read_file_sink
from gic_runtime.spark import read_state, to_micros, write_state
from gic_runtime.storage.uri import StoreResolver

from .cli_runner import clean_env, run_steps
from .test_ttl import FILES, file_text

REPO = Path(__file__).resolve().parents[2]
T0 = datetime(2026, 11, 28, 9, 0, 0, tzinfo=UTC)


@pytest.mark.slow
def test_timers_and_ttl_deadlines_are_rows(spark: SparkSession, tmp_path: Path) -> None:
    work = tmp_path / "work"
    (work / "clicks").mkdir(parents=True)
    (work / "orders").mkdir()
    (work / "examples").symlink_to(REPO / "examples")
    clicks = [
        {"user": "u0", "ts": T0.isoformat()},
        {"user": "u1", "ts": (T0 + timedelta(seconds=5)).isoformat()},
    ]
    before = [[str(work / "clicks" / "c0.json"), "".join(json.dumps(c) + "\n" for c in clicks)]]
    before += [[str(work / "orders" / f"f{i}.json"), file_text(f)] for i, f in enumerate(FILES)]
    steps = [
        {"argv": ["run", "examples/sessions.py", "--", "--input", "clicks/", "--output", "s/"],
         "before": before},
        {"argv": ["run", "examples/dedup.py", "--", "--input", "orders/", "--output", "u/"]},
    ]  # fmt: skip
    env = clean_env(GIC_LOCAL_DIR=str(tmp_path / "local"), GIC_NUM_BUCKETS="4")
    done, results = run_steps(steps, cwd=work, scratch=tmp_path, env=env)
    assert done.returncode == 0, done.stderr[-4000:]
    assert [r["code"] for r in results] == [0, 0], results
    root = (work / "gic-data").resolve().as_uri()

    sessions = read_state(spark, root, job_id="sessions", key_type="string").collect()
    timers = sorted((r.key, r.state, int(r.user_key)) for r in sessions if r.kind == "timer")
    gap = 30_000_000
    assert timers == [
        ("u0", "event", to_micros(T0) + gap),
        ("u1", "event", to_micros(T0) + 5_000_000 + gap),
    ]
    kinds = {(r.state, r.kind) for r in sessions}
    assert kinds == {("session", "value"), ("event", "timer")}

    dedup = read_state(spark, root, job_id="dedup", states=["seen"], key_type="string").collect()
    deadline = to_micros(datetime(2026, 11, 28, 12, 31, tzinfo=UTC))
    assert sorted((r.key, r.kind, r.expires_us, r.ttl_by, r.ttl_us) for r in dedup) == [
        ("b", "value", deadline, "event", 600_000_000),
        ("e", "value", deadline, "event", 600_000_000),
    ]

    # u0's session written back with 5 events; a click at T0+60s moves the watermark past
    # both timers, so the new job closes both written sessions.
    t0 = to_micros(T0)
    state = read_state(spark, root, job_id="sessions", key_type="string")
    changed = state.withColumn(
        "value",
        F.when(
            (F.col("key") == "u0") & (F.col("kind") == "value"), F.lit(json.dumps([t0, t0, 5]))
        ).otherwise(F.col("value")),
    ).drop("value_msgpack")
    write_state(changed, str(tmp_path / "sp"), num_buckets=3, typed=["key"])
    (work / "clicks2").mkdir()
    later = {"user": "u2", "ts": (T0 + timedelta(seconds=60)).isoformat()}
    run = [
        "run",
        "examples/sessions.py",
        "--job-id",
        "sessions2",
        "--restore",
        str(tmp_path / "sp"),
    ]
    steps = [
        {"argv": [*run, "--", "--input", "clicks2/", "--output", "s2/"],
         "before": [[str(work / "clicks2" / "c.json"), json.dumps(later) + "\n"]]},
    ]  # fmt: skip
    done, results = run_steps(steps, cwd=work, scratch=tmp_path, env=env)
    assert done.returncode == 0 and [r["code"] for r in results] == [0], (
        done.stderr[-3000:],
        results,
    )
    table = read_file_sink((work / "s2").resolve().as_uri(), StoreResolver())
    assert table is not None
    closed = sorted((r["user"], to_micros(r["start"]), r["events"]) for r in table.to_pylist())
    assert closed == [("u0", t0, 5), ("u1", t0 + 5_000_000, 1)]
