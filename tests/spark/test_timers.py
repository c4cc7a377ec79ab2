"""Timers on real Spark, with the documented examples run as documented.

* ``examples/sessions.py`` (per-key style, event-time timers): over three runs of the
  job (two restarts), every session closes exactly once, equal to sessions computed
  independently from the input; the batch each run adds after its input fired what
  the final watermark passed. The same on two executor JVMs.
* ``examples/silent_users.py`` (vectorized style, processing-time timers): a user
  silent for longer than the bound gets one alert per silence, never before it.
"""

from __future__ import annotations

import json
import re
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from gic_runtime.checkpoint.catalog import load_retained
from gic_runtime.sinks import read_file_sink
from gic_runtime.storage.uri import StoreResolver

from .cli_runner import clean_env, run_steps

REPO = Path(__file__).resolve().parents[2]
T0 = datetime(2026, 11, 28, 9, 0, 0, tzinfo=UTC)
GAP_S = 30
USERS = [f"u{j}" for j in range(6)]
NUM_FILES = 8


def clicks(i: int) -> list[tuple[str, int]]:
    """File ``i``: user j clicks at ``20 i + j`` seconds when ``(i + j) % 5 < 2``: two
    files with a click, then three without, so the watermark passes a session's end
    plus the gap before its user comes back (its timer fires)."""
    return [(u, 20 * i + j) for j, u in enumerate(USERS) if (i + j) % 5 < 2]


def file_text(events: list[tuple[str, int]]) -> str:
    rows = [{"user": u, "ts": (T0 + timedelta(seconds=s)).isoformat()} for u, s in events]
    return "".join(json.dumps(r) + "\n" for r in rows)


def reference_sessions(files: list[list[tuple[str, int]]]) -> set[tuple[str, int, int, int]]:
    """Sessions (user, start s, end s, events) closed by the final watermark (the
    latest click: the stream's lateness bound is 0), computed directly."""
    times: dict[str, list[int]] = {}
    for events in files:
        for user, s in events:
            times.setdefault(user, []).append(s)
    watermark = max(s for events in files for _, s in events)
    found: set[tuple[str, int, int, int]] = set()
    for user, ts in times.items():
        ts.sort()
        start = prev = ts[0]
        n = 0
        for t in ts:
            if t > prev + GAP_S:
                found.add((user, start, prev, n))
                start, n = t, 0
            prev, n = t, n + 1
        if prev + GAP_S <= watermark:
            found.add((user, start, prev, n))
    return found


def written_sessions(out: Path) -> list[tuple[str, int, int, int]]:
    table = read_file_sink(out.resolve().as_uri(), StoreResolver())
    assert table is not None
    return [
        (r["user"], int((r["start"] - T0).total_seconds()), int((r["end"] - T0).total_seconds()),
         r["events"])
        for r in table.to_pylist()
    ]  # fmt: skip


def run_args(out: str = "sessions/") -> list[str]:
    return ["run", "examples/sessions.py", "--", "--input", "clicks/", "--output", out]


@pytest.mark.slow
def test_sessions_close_exactly_once_across_restarts(tmp_path: Path) -> None:
    work = tmp_path / "work"
    (work / "clicks").mkdir(parents=True)
    (work / "examples").symlink_to(REPO / "examples")
    files = [clicks(i) for i in range(NUM_FILES)]

    def add(i: int) -> list[str]:
        return [str(work / "clicks" / f"f{i}.json"), file_text(files[i])]

    steps = [
        {"argv": run_args(), "before": [add(0), add(1), add(2)]},
        {"argv": run_args(), "before": [add(3), add(4), add(5)]},
        {"argv": run_args(), "before": [add(6), add(7)]},
    ]
    done, results = run_steps(
        steps, cwd=work, scratch=tmp_path, env=clean_env(GIC_LOCAL_DIR=str(tmp_path / "local"))
    )
    assert done.returncode == 0, done.stderr[-4000:]
    assert [r["code"] for r in results] == [0, 0, 0], results

    written = written_sessions(work / "sessions")
    assert len(written) == len(set(written)), "a session was written twice"
    assert set(written) == reference_sessions(files)

    line = re.compile(r"batch (\d+): (\d+) events, 0 late, (\d+) timers fired")
    batches = [[tuple(map(int, m)) for m in line.findall(r["stdout"])] for r in results]
    # each run: one batch per new file, then one without rows that fires timers
    sizes = [len(f) for f in files]
    assert [[(b, n) for b, n, _ in run] for run in batches] == [
        [(0, sizes[0]), (1, sizes[1]), (2, sizes[2]), (3, 0)],
        [(4, sizes[3]), (5, sizes[4]), (6, sizes[5]), (7, 0)],
        [(8, sizes[6]), (9, sizes[7]), (10, 0)],
    ]
    fired = [f for run in batches for _, n, f in run if n]
    at_end = [f for run in batches for _, n, f in run if not n]
    assert sum(fired) > 0, "no timer fired in a batch with input"
    assert sum(at_end) > 0, "no timer fired in a batch after the input"

    # the timers of the sessions still open are part of the last checkpoint
    stored = load_retained(StoreResolver(), (work / "gic-data").resolve().as_uri(), "sessions")
    assert stored[-1].checkpoint_id == 10
    assert stored[-1].manifest.event_time.watermark_us == int(
        (T0 + timedelta(seconds=max(s for f in files for _, s in f))).timestamp() * 1_000_000
    )


SILENCE_S = 3.0


@pytest.mark.slow
def test_silent_users_are_alerted_once_per_silence(tmp_path: Path) -> None:
    work = tmp_path / "work"
    (work / "events").mkdir(parents=True)
    (work / "examples").symlink_to(REPO / "examples")
    args = ["run", "examples/silent_users.py", "--", "--input", "events/", "--output", "alerts/"]
    args += ["--silence", f"{SILENCE_S} seconds"]
    env = clean_env(GIC_LOCAL_DIR=str(tmp_path / "local"))

    def run(before: list[list[str]]) -> list[dict[str, Any]]:
        done, results = run_steps(
            [{"argv": args, "before": before}], cwd=work, scratch=tmp_path, env=env
        )
        assert done.returncode == 0, done.stderr[-4000:]
        assert [r["code"] for r in results] == [0], results
        return results

    def events(name: str, users: list[str]) -> list[str]:
        return [str(work / "events" / name), "".join(json.dumps({"user": u}) + "\n" for u in users)]

    run([events("f0.json", ["a", "b", "c", "a"])])
    time.sleep(SILENCE_S + 0.5)
    run([events("f1.json", ["a"])])  # b and c are silent by now; a speaks again
    time.sleep(SILENCE_S + 0.5)
    run([])  # no new input: only the batch that fires timers runs

    table = read_file_sink((work / "alerts").resolve().as_uri(), StoreResolver())
    assert table is not None
    alerts = [(r["user"], r["last_seen"], r["alerted_at"]) for r in table.to_pylist()]
    assert len({(u, s) for u, s, _ in alerts}) == len(alerts), "a silence alerted twice"
    assert all(at - seen >= timedelta(seconds=SILENCE_S) for _, seen, at in alerts), alerts
    by_user: dict[str, list[datetime]] = {}
    for user, seen, _ in sorted(alerts, key=lambda a: a[1]):
        by_user.setdefault(user, []).append(seen)
    assert sorted(by_user) == ["a", "b", "c"]
    assert len(by_user["b"]) == len(by_user["c"]) == 1
    assert by_user["b"] == by_user["c"]  # both last seen in the first batch
    assert by_user["a"][-1] > by_user["b"][0]  # a's last silence began in the second run
    assert len(by_user["a"]) in (1, 2)  # a first silence alerts only if it lasted long enough
