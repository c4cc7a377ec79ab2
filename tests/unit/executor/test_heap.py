"""The worker's object heap after a task: survivors frozen so PySpark's collection after the
task visits only new objects, garbage cycles still freed (at the latest by the next full
pass), nothing done outside a reused worker. Each case runs in a fresh interpreter: the
garbage collector's generations are process-wide."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

from tests.support.memory_probe import REPO

from gic_runtime.executor import heap

_PRELUDE = textwrap.dedent(
    """
    import gc, json, os, sys, weakref
    import pyarrow  # a worker's long-lived objects: modules, the runtime's code
    from gic_runtime.executor import core, heap

    class Node:
        def __init__(self):
            self.other = self  # a cycle: only the collector frees it
    """
)


def _run(script: str, **env: str) -> dict[str, object]:
    environ = {k: v for k, v in os.environ.items() if k != heap.REUSE_ENV}
    out = subprocess.run(
        [sys.executable, "-c", _PRELUDE + textwrap.dedent(script)],
        check=True,
        capture_output=True,
        text=True,
        env={**environ, **env},
        cwd=REPO,
        timeout=60,
    )
    result: dict[str, object] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def test_outside_a_reused_worker_nothing_is_frozen() -> None:
    result = _run(
        """
        print(json.dumps({"result": heap.settle(), "frozen": gc.get_freeze_count()}))
        """
    )
    assert result == {"result": None, "frozen": 0}


def test_after_a_task_the_collection_visits_only_new_objects() -> None:
    result = _run(
        """
        before = len(gc.get_objects())
        settled = heap.settle()
        young = [dict(a=i) for i in range(100)]  # what the next task leaves behind
        print(json.dumps({
            "before": before, "full": settled.full, "frozen": settled.frozen,
            "tracked_after": len(gc.get_objects()),
        }))
        """,
        SPARK_REUSE_WORKER="1",
    )
    assert result["full"] is True  # a worker's first call collects everything first
    assert isinstance(result["before"], int) and result["before"] > 20_000
    assert isinstance(result["frozen"], int) and result["frozen"] >= result["before"] // 2
    # A collection now visits only what was created since: the hundred dicts and a few
    # objects of the interpreter's own.
    assert isinstance(result["tracked_after"], int) and result["tracked_after"] < 1_000


def test_a_full_pass_comes_first_and_then_every_full_every_calls() -> None:
    result = _run(
        """
        fulls = [i for i in range(2 * heap.FULL_EVERY + 1) if heap.settle(force=True).full]
        print(json.dumps({"fulls": fulls}))
        """
    )
    assert result["fulls"] == [0, heap.FULL_EVERY, 2 * heap.FULL_EVERY]


def test_garbage_cycles_are_freed_new_ones_at_once_frozen_ones_by_the_next_full_pass() -> None:
    result = _run(
        """
        kept = Node()
        old = weakref.ref(kept)
        heap.settle(force=True)  # full pass; `kept` survives and is frozen
        del kept  # now a frozen garbage cycle

        young = Node()
        new = weakref.ref(young)
        del young  # a garbage cycle created after the freeze
        heap.settle(force=True)
        new_freed, old_after_one = new() is None, old() is not None
        gc.collect()  # what PySpark's daemon runs: it skips frozen objects
        old_after_daemon = old() is not None
        calls = 2
        while old() is not None and calls <= heap.FULL_EVERY:
            heap.settle(force=True)
            calls += 1
        print(json.dumps({
            "new_freed": new_freed, "old_after_one": old_after_one,
            "old_after_daemon": old_after_daemon, "old_freed_at_call": calls,
        }))
        """
    )
    assert result["new_freed"] is True
    assert result["old_after_one"] is True and result["old_after_daemon"] is True
    # call FULL_EVERY + 1 (number FULL_EVERY counting from 0) thaws and frees it
    assert result["old_freed_at_call"] == heap.FULL_EVERY + 1


def test_a_forked_child_starts_with_a_full_pass() -> None:
    result = _run(
        """
        heap.settle(force=True)
        heap.settle(force=True)
        read, write = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.write(write, b"1" if heap.settle(force=True).full else b"0")
            os._exit(0)
        os.waitpid(pid, 0)
        child_full = os.read(read, 1) == b"1"
        print(json.dumps({"child_full": child_full, "parent_full": heap.settle(force=True).full}))
        """
    )
    assert result == {"child_full": True, "parent_full": False}
