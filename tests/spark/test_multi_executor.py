"""State tasks on a real multi-executor Spark cluster (``local-cluster[2,1,1024]``: two
executor JVMs, each with its own scratch directory, as separate pods would have).

Each test runs ``cluster_scenario.py`` in its own process and checks what it did:
the word counts published per batch equal an independent reference (exactly once),
tasks stay on their executor batch after batch (every non-empty bucket a local hit),
and after an executor is SIGKILLed -- mid-batch or between batches -- Spark reruns its
tasks elsewhere, the moved ranges restore from storage, and then stick again.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from .test_word_count import sink_batches
from .words import reference_counts

pytestmark = pytest.mark.slow

SCENARIO = Path(__file__).with_name("cluster_scenario.py")
BATCHES = 8


def run_scenario(tmp_path: Path, *args: str, batches: int = BATCHES) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, str(SCENARIO), "--dir", str(tmp_path), "--batches", str(batches), *args],
        capture_output=True,
        text=True,
        timeout=420,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    result: dict[str, Any] = json.loads((tmp_path / "result.json").read_text())
    return result


def assert_exactly_once(tmp_path: Path, batches: int = BATCHES) -> None:
    expected = dict(enumerate(reference_counts(tmp_path / "in", batches)))
    assert sink_batches(tmp_path / "out") == expected


def test_tasks_stick_to_their_executor_and_each_executor_keeps_its_own_copy(
    tmp_path: Path,
) -> None:
    result = run_scenario(tmp_path)
    assert_exactly_once(tmp_path)
    batches = result["batches"]
    assert [b["batch_id"] for b in batches] == list(range(BATCHES))
    assert all(b["pinned"] and b["executors"] == 2 for b in batches)
    # a first task on a busy machine may outlast spark.locality.wait (Python worker
    # start-up) and run on the other executor once; after that nothing moves
    assert sum(len(b["moved_ranges"]) for b in batches) <= 1
    for b in batches[-4:]:
        assert b["restored"] == 0 and b["local_hits"] > 0, b
        assert b["moved_ranges"] == [], b
    # two executors, two private local directories, none shared
    assert len(result["local_dirs"]) == 2
    assert len({Path(d).parents[3] for d in result["local_dirs"]}) == 2


def test_tasks_stick_on_a_standalone_cluster_started_from_pysparks_jars(tmp_path: Path) -> None:
    from bench import cluster  # the standalone launcher the benchmarks use

    base = tmp_path / "cluster"
    with cluster.running_cluster(workers=2, cores=1, memory_mib=1024, base_dir=base) as c:
        result = run_scenario(
            tmp_path, "--master", c.master_url, "--local-root", str(base), batches=6
        )
    assert_exactly_once(tmp_path, 6)
    batches = result["batches"]
    assert all(b["pinned"] and b["executors"] == 2 for b in batches)
    # a first task on a busy machine may outlast spark.locality.wait (Python worker
    # start-up) and run on the other executor once; after that nothing moves
    assert sum(len(b["moved_ranges"]) for b in batches) <= 1
    for b in batches[-3:]:
        assert b["restored"] == 0 and b["local_hits"] > 0 and b["moved_ranges"] == [], b
    assert len(result["local_dirs"]) == 2


@pytest.mark.parametrize("kill", ["mid-batch", "between-batches"])
def test_an_executor_killed_loses_nothing_and_its_ranges_stick_to_their_new_executor(
    tmp_path: Path, kill: str
) -> None:
    # 10 batches: batch 4 runs without the lost executor, batch 5 rebalances onto its
    # replacement, whose first task may be slow enough (Python worker start) that the
    # scheduler runs another one elsewhere once; the last batches must be settled
    result = run_scenario(tmp_path, "--kill", kill, "--kill-batch", "3", batches=10)
    assert_exactly_once(tmp_path, 10)
    if kill == "mid-batch":
        assert result["mid_batch_killed"]
    else:
        assert len(result["killed"]) == 1
    batches = result["batches"]
    assert [b["batch_id"] for b in batches] == list(range(10))
    # the killed executor's ranges moved and were restored from storage
    assert sum(b["restored"] for b in batches[3:]) > 0
    assert any(b["moved_ranges"] for b in batches[3:])
    # ... then stayed put: the last batches are all local hits, nothing moves
    for b in batches[-2:]:
        assert b["pinned"] and b["restored"] == 0 and b["moved_ranges"] == [], b


def test_a_restart_on_empty_local_directories_restores_in_the_background_exactly_once(
    tmp_path: Path,
) -> None:
    """Four batches, then a restart (a new driver and new executors) on empty executor
    directories with the background restore, then another with the eager one, then one
    restoring ahead of the first batch (a job of its own, pinned like the tasks): each
    publishes exactly the reference counts, so the three paths rebuild the same state."""
    run_scenario(tmp_path, batches=4)
    for first, mode in ((4, "background"), (8, "eager"), (12, "ahead")):
        result = run_scenario(
            tmp_path, "--restore", mode, "--wipe-local", "--first-file", str(first), batches=4
        )
        assert_exactly_once(tmp_path, first + 4)
        batches = result["batches"]
        assert [b["batch_id"] for b in batches] == list(range(first, first + 4))
        head = batches[0]
        if mode == "ahead":
            ahead = result["restore_ahead"]
            assert ahead["error"] is None and ahead["restored"] > 0, ahead
            # a task the scheduler ran on the other executor restores there itself
            assert head["local_hits"] > 0, head
            continue
        assert result["restore_ahead"] is None
        assert head["restored"] > 0 and head["local_hits"] == 0, (mode, head)
        assert head["selected"] == 0, (mode, head)
        if mode == "eager":
            assert all(b["restore_pending"] == 0 and b["restore_bytes"] == 0 for b in batches)
        else:
            assert sum(b["restore_bytes"] for b in batches) > 0, batches
        # ... and settled: no bucket waits for its restore at the end
        assert batches[-1]["restore_pending"] == 0, (mode, batches)
        assert batches[-1]["restored"] == 0, (mode, batches)


def test_a_restart_runs_its_first_batch_on_the_keys_it_names_on_both_executors(
    tmp_path: Path,
) -> None:
    """An aggregate (whose batches name their state keys) runs four batches, then
    restarts on empty executor directories with ``restore_select_keys``: no restore
    ahead (though ``restore_at_start`` is on), the first batch's tasks run on the keys
    they name, read from storage, on both executors, the buckets are restored behind
    it, and the output is exactly the reference counts."""
    run_scenario(tmp_path, "--restore", "select", batches=4)
    result = run_scenario(
        tmp_path, "--restore", "select", "--wipe-local", "--first-file", "4", batches=4
    )
    assert_exactly_once(tmp_path, 8)
    assert result["restore_ahead"] is None
    head, *rest = result["batches"]
    assert head["executors"] == 2 and head["pinned"], head
    assert head["selected"] > 0 and head["restored"] == head["selected"], head
    assert head["local_hits"] == 0, head
    assert all(b["selected"] == 0 for b in rest), rest
    # restored to the first batch's lineage: the last batch reuses every local copy
    assert rest[-1]["restored"] == 0 and rest[-1]["restore_pending"] == 0, rest
    assert rest[-1]["local_hits"] == head["selected"], rest
