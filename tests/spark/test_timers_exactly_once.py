"""Timers exactly once across kill -9: the sessions example (event-time timers) is
killed at each step of the batch protocol, at random moments and in the batch that
fires timers after the input, and restarted each time. Every session is written
exactly once and equals the sessions computed from the input: no timer lost, none
fired twice (docs/architecture.md I3, I4)."""

from __future__ import annotations

import os
import random
import signal
import sys
import time
from pathlib import Path

import pytest

from gic_runtime.checkpoint.catalog import list_checkpoints
from gic_runtime.storage.uri import StoreResolver

from ..support.pod import PodLaunch
from .test_timers import clicks, file_text, reference_sessions, written_sessions

REPO = Path(__file__).resolve().parents[2]
APP = REPO / "examples" / "sessions.py"
NUM_FILES = 12
JOB = "sessions-crashy"


@pytest.mark.slow
def test_kill_minus_nine_never_loses_or_doubles_a_timer(tmp_path: Path) -> None:
    src, out, root_dir = tmp_path / "clicks", tmp_path / "sessions", tmp_path / "store"
    src.mkdir()
    files = [clicks(i) for i in range(NUM_FILES)]
    stamp = time.time_ns()
    for i, events in enumerate(files):
        path = src / f"f{i:02d}.json"
        path.write_text(file_text(events))
        os.utime(path, ns=(stamp + i * 10**9, stamp + i * 10**9))
    root = root_dir.as_uri()
    resolver = StoreResolver()
    base_env = {
        **os.environ,
        "GIC_STORAGE": root,
        "GIC_JOB_ID": JOB,
        "GIC_NUM_BUCKETS": "8",
        "GIC_LOCAL_DIR": str(tmp_path / "local"),
        "GIC_MATERIALIZATION_INTERVAL_S": "0.2",
        "GIC_CONTROL_POLL_S": "0.1",
        "SPARK_LOCAL_IP": "127.0.0.1",
        "PYSPARK_PYTHON": sys.executable,
    }
    rng = random.Random(20261128)
    log = tmp_path / "driver.log"
    argv = [sys.executable, str(APP), "--input", str(src), "--output", str(out)]

    def last_id() -> int:
        ids = [c.checkpoint_id for c in list_checkpoints(resolver, root, JOB)]
        return max(ids, default=-1)

    # One batch per file: batch NUM_FILES is the one without rows after the input.
    plan: list[tuple[str, str | None]] = [
        ("crashpoint", "after_acks@{next}"),
        ("random", None),
        ("crashpoint", "in_task@{next}"),
        ("crashpoint", "after_manifest@{next}"),
        ("random", None),
        ("crashpoint", "before_publish@{next}"),
        ("crashpoint", f"before_publish@{NUM_FILES}"),
    ]
    outcomes: list[str] = []
    for kind, spec in plan:
        env = dict(base_env)
        if kind == "crashpoint" and spec:
            env["GIC_CRASHPOINTS"] = spec.format(next=last_id() + 1)
        before = last_id()
        attempt = PodLaunch(argv, env, log, cwd=REPO)
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
    assert last_id() == NUM_FILES, f"the last crash was not in the timers' batch: {outcomes}"

    final = PodLaunch(argv, dict(base_env), log, cwd=REPO)
    assert final.wait(timeout=240) == 0, log.read_text()[-4000:]

    written = written_sessions(out)
    assert len(written) == len(set(written)), f"a session was written twice ({outcomes})"
    assert set(written) == reference_sessions(files), outcomes
