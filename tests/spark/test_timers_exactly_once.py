"""Timers and state with a time to live exactly once across kill -9: the sessions
example (event-time timers) and the dedup example (a value state with an event-time
TTL) are killed at each step of the batch protocol, at random moments and in the batch
that runs after the input, and restarted each time. The written output equals what is
computed directly from the input: no timer lost or fired twice, no entry expired early,
late or twice (docs/architecture.md I3, I4)."""

from __future__ import annotations

import json
import os
import random
import signal
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from gic_runtime.checkpoint.catalog import list_checkpoints
from gic_runtime.sinks import read_file_sink
from gic_runtime.storage.uri import StoreResolver

from ..support.pod import PodLaunch
from .test_timers import clicks, file_text, reference_sessions, written_sessions

REPO = Path(__file__).resolve().parents[2]
NUM_FILES = 12

# One batch per file: batch NUM_FILES is the one without rows after the input.
PLAN: list[tuple[str, str | None]] = [
    ("crashpoint", "after_acks@{next}"),
    ("random", None),
    ("crashpoint", "in_task@{next}"),
    ("crashpoint", "after_manifest@{next}"),
    ("random", None),
    ("crashpoint", "before_publish@{next}"),
]


def write_files(src: Path, texts: list[str]) -> None:
    src.mkdir()
    stamp = time.time_ns()
    for i, text in enumerate(texts):
        path = src / f"f{i:02d}.json"
        path.write_text(text)
        os.utime(path, ns=(stamp + i * 10**9, stamp + i * 10**9))  # taken in this order


def crash_and_finish(
    tmp_path: Path, job: str, app: list[str], plan: list[tuple[str, str | None]]
) -> list[str]:
    """Run ``app`` over ``tmp_path/in`` into ``tmp_path/out``, crashing it as ``plan``
    says, then once to the end; returns what each attempt did."""
    root = (tmp_path / "store").as_uri()
    resolver = StoreResolver()
    env = {
        **os.environ,
        "GIC_STORAGE": root,
        "GIC_JOB_ID": job,
        "GIC_NUM_BUCKETS": "8",
        "GIC_LOCAL_DIR": str(tmp_path / "local"),
        "GIC_MATERIALIZATION_INTERVAL_S": "0.2",
        "GIC_CONTROL_POLL_S": "0.1",
        "SPARK_LOCAL_IP": "127.0.0.1",
        "PYSPARK_PYTHON": sys.executable,
    }
    rng = random.Random(20261128)
    log = tmp_path / "driver.log"
    argv = [sys.executable, str(REPO / "examples" / app[0])]
    argv += ["--input", str(tmp_path / "in"), "--output", str(tmp_path / "out"), *app[1:]]

    def last_id() -> int:
        ids = [c.checkpoint_id for c in list_checkpoints(resolver, root, job)]
        return max(ids, default=-1)

    outcomes: list[str] = []
    for kind, spec in plan:
        attempt_env = dict(env)
        if kind == "crashpoint" and spec:
            attempt_env["GIC_CRASHPOINTS"] = spec.format(next=last_id() + 1)
        before = last_id()
        attempt = PodLaunch(argv, attempt_env, log, cwd=REPO)
        if kind == "random":
            deadline = time.monotonic() + 120
            while last_id() <= before and attempt.proc.poll() is None:
                assert time.monotonic() < deadline, log.read_text()[-3000:]
                time.sleep(0.05)
            time.sleep(rng.uniform(0.0, 0.5))
            attempt.kill()
        code = attempt.wait(timeout=180)
        outcomes.append(f"{kind}:{spec}:{code}:{last_id()}")
        if spec is not None and spec.startswith("in_task"):
            assert code not in (0, None), outcomes
        else:
            assert code == -signal.SIGKILL, (outcomes, log.read_text()[-3000:])
    final = PodLaunch(argv, env, log, cwd=REPO)
    assert final.wait(timeout=240) == 0, log.read_text()[-4000:]
    outcomes.append(f"final:{last_id()}")
    return outcomes


@pytest.mark.slow
def test_kill_minus_nine_never_loses_or_doubles_a_timer(tmp_path: Path) -> None:
    files = [clicks(i) for i in range(NUM_FILES)]
    write_files(tmp_path / "in", [file_text(f) for f in files])
    plan = [*PLAN, ("crashpoint", f"before_publish@{NUM_FILES}")]  # the timers' batch
    outcomes = crash_and_finish(tmp_path, "sessions-crashy", ["sessions.py"], plan)
    assert outcomes[-2].endswith(f":{NUM_FILES}"), f"not killed in the timers' batch: {outcomes}"
    written = written_sessions(tmp_path / "out")
    assert len(written) == len(set(written)), f"a session was written twice ({outcomes})"
    assert set(written) == reference_sessions(files), outcomes


# --- dedup: a value per id with a TTL of 2 minutes of event time -------------------------

T0 = datetime(2026, 11, 28, 12, 0, 0, tzinfo=UTC)
TTL_S = 120
Order = tuple[str, int]  # id, seconds after T0


def orders(i: int) -> list[Order]:
    """File ``i``: six orders 30 s after the file before; ids come back after about
    seven files (3.5 minutes): some within the TTL, some after it."""
    return [(f"o{(3 * i + j) % 20}", 30 * i + j) for j in range(6)]


def order_text(events: list[Order]) -> str:
    rows = [{"id": o, "ts": (T0 + timedelta(seconds=s)).isoformat()} for o, s in events]
    return "".join(json.dumps(r) + "\n" for r in rows)


def reference_dedup(files: list[list[Order]]) -> set[tuple[int, str]]:
    """``(batch, id)`` of every first event, with the TTL semantics computed directly:
    batch ``n`` runs with the watermark before it (the latest event so far); an id is
    remembered until ``ttl`` after the watermark when it was last seen, and entries
    written before the first watermark count from it."""
    pending = -1
    deadline: dict[str, int] = {}
    watermark: int | None = None
    seen_max: int | None = None
    out: set[tuple[int, str]] = set()
    for batch, events in enumerate(files):
        live = [(o, s) for o, s in events if watermark is None or s >= watermark]
        for order in dict.fromkeys(o for o, _ in live):
            d = deadline.get(order)
            visible = d is not None and (d == pending or watermark is None or d > watermark)
            if not visible:
                out.add((batch, order))
            deadline[order] = pending if watermark is None else watermark + TTL_S
        if watermark is not None:  # the batch-end sweep
            deadline = {o: (watermark + TTL_S if d == pending else d) for o, d in deadline.items()}
            deadline = {o: d for o, d in deadline.items() if d > watermark}
        top = max(s for _, s in events)
        seen_max = top if seen_max is None else max(seen_max, top)
        watermark = seen_max
    return out


@pytest.mark.slow
def test_kill_minus_nine_never_expires_state_early_late_or_twice(tmp_path: Path) -> None:
    files = [orders(i) for i in range(NUM_FILES)]
    write_files(tmp_path / "in", [order_text(f) for f in files])
    app = ["dedup.py", "--ttl", f"{TTL_S} seconds"]
    outcomes = crash_and_finish(tmp_path, "dedup-crashy", app, PLAN)
    table = read_file_sink((tmp_path / "out").as_uri(), StoreResolver())
    assert table is not None
    got = [(r["batch_id"], r["id"]) for r in table.to_pylist()]
    assert len(got) == len(set(got)), f"an order was written twice ({outcomes})"
    expected = reference_dedup(files)
    assert len({o for _, o in expected}) < len(expected), "no id came back after its TTL"
    assert set(got) == expected, outcomes
