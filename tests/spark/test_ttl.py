"""State with a time to live on real Spark: ``examples/dedup.py`` (a value per id with
an event-time TTL) drops repeats while an id is remembered, accepts it again once its
TTL passed, counts what it forgot, and its last checkpoint holds only what is still
remembered -- across a restart, and on two executor JVMs."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from gic_runtime.checkpoint.catalog import load_retained
from gic_runtime.sinks import read_file_sink
from gic_runtime.state.backend import KeyedStateBackend
from gic_runtime.state.keys import KIND_VALUE_TTL
from gic_runtime.state.memory_store import InMemoryStore
from gic_runtime.storage.uri import StoreResolver
from gic_runtime.testing.changelog_fakes import TestingChangelogWriter

from .cli_runner import clean_env, run_steps

REPO = Path(__file__).resolve().parents[2]
BUCKETS = 16

# One file per batch, TTL 10 minutes of event time counted from the watermark of the
# batch that last saw the id; the watermark is the largest event time so far.
FILES = [
    [("a", "12:00:00"), ("b", "12:00:00"), ("a", "12:00:05")],  # no watermark yet
    [("c", "12:00:30")],  # wm 12:00:05: a, b remembered until 12:10:05
    [("a", "12:09:00")],  # wm 12:00:30: a repeats (now until 12:10:30)
    [("b", "12:09:30"), ("d", "12:09:30")],  # wm 12:09: b repeats (until 12:19)
    [("b", "12:21:00")],  # wm 12:09:30: b still remembered (12:19 > wm)
    [("b", "12:22:00"), ("e", "12:22:00")],  # wm 12:21: b forgotten, new again
]
NEW = [2, 1, 0, 1, 0, 2]
# forgotten at the end of each batch (its watermark): batch 5 (wm 12:21) forgets
# a (12:10:30), c (12:10:05), d (12:19:00); b was set again in the batch
FORGOTTEN = [0, 0, 0, 0, 0, 3]


def file_text(events: list[tuple[str, str]]) -> str:
    return "".join(json.dumps({"id": i, "ts": f"2026-11-28T{t}Z"}) + "\n" for i, t in events)


def remembered(root: str, job: str) -> int:
    """Ids the job's last checkpoint still stores (expired ones are removed)."""
    latest = load_retained(StoreResolver(), root, job)[-1].manifest
    backend = KeyedStateBackend(
        range(BUCKETS), BUCKETS, InMemoryStore(), TestingChangelogWriter(range(BUCKETS))
    )
    backend.restore(dict(latest.buckets), StoreResolver())
    count = 0
    for bucket in range(BUCKETS):
        with backend.store.snapshot_items(bucket) as view:
            count += sum(1 for k, _ in view if k[:1] == KIND_VALUE_TTL)
    return count


def check(out: Path, stdout: str) -> None:
    line = re.compile(r"batch (\d+): \d+ events, 0 late, (\d+) new, (\d+) forgotten")
    found = [(int(n), int(f)) for _, n, f in line.findall(stdout)]
    assert found == list(zip(NEW, FORGOTTEN, strict=True)), stdout
    table = read_file_sink(out.resolve().as_uri(), StoreResolver())
    assert table is not None
    assert sorted((r["batch_id"], r["id"]) for r in table.to_pylist()) == [
        (0, "a"), (0, "b"), (1, "c"), (3, "d"), (5, "b"), (5, "e"),
    ]  # fmt: skip


@pytest.mark.slow
def test_dedup_forgets_on_time_across_a_restart(tmp_path: Path) -> None:
    work = tmp_path / "work"
    (work / "orders").mkdir(parents=True)
    (work / "examples").symlink_to(REPO / "examples")

    def add(i: int) -> list[str]:
        return [str(work / "orders" / f"f{i}.json"), file_text(FILES[i])]

    run = ["run", "examples/dedup.py", "--", "--input", "orders/", "--output", "unique/"]
    steps = [{"argv": run, "before": [add(0), add(1), add(2)]}, {"argv": run, "before": [
        add(3), add(4), add(5)]}]  # fmt: skip
    env = clean_env(GIC_LOCAL_DIR=str(tmp_path / "local"), GIC_NUM_BUCKETS=str(BUCKETS))
    done, results = run_steps(steps, cwd=work, scratch=tmp_path, env=env)
    assert done.returncode == 0, done.stderr[-4000:]
    assert [r["code"] for r in results] == [0, 0], results
    check(work / "unique", "".join(r["stdout"] for r in results))
    assert remembered((work / "gic-data").resolve().as_uri(), "dedup") == 2  # b and e
