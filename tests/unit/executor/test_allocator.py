"""The worker's allocators: large buffers freed by a batch go back to the system once glibc
is tuned, Arrow's pool gives its freed pages back on release, and a user's environment
setting wins. Each case runs in a fresh interpreter, since glibc's options are
process-wide and take effect on later allocations only, and a pool's pages are the
process's."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest
from tests.support.memory_probe import REPO

from gic_runtime.executor import allocator

pytestmark = pytest.mark.skipif(
    allocator._LIBC is None, reason="needs glibc (mallopt); the runtime's images have it"
)

_CHURN = textwrap.dedent(
    """
    import json, sys
    from gic_runtime.executor import allocator
    from tests.support.memory_probe import anon_kib
    applied = allocator.tune() if sys.argv[1] == "tuned" else {}

    # One large block freed raises glibc's default mapping threshold above its size.
    first = bytearray(4 << 20)
    del first
    before = anon_kib()
    # A batch's worth of 2 MiB buffers, each followed by a small object that stays (a
    # state value, an index entry): freed, the buffers leave holes below the heap's top.
    blocks, pinned = [], []
    for _ in range(100):
        blocks.append(bytearray(2 << 20))
        pinned.append(bytearray(64 << 10))
    del blocks
    print(json.dumps({"applied": applied, "kept_kib": anon_kib() - before}))
    """
)


_ARROW_CHURN = textwrap.dedent(
    """
    import json
    import pyarrow as pa
    from gic_runtime.executor import allocator
    from tests.support.memory_probe import anon_kib

    before = anon_kib()
    # A task's Arrow work: three batches of 25,000 rows of 2 KB built, read and dropped.
    for _ in range(3):
        table = pa.table({"payload": pa.array([b"x" * 2000] * 25_000, pa.binary())})
        table.column("payload").to_pylist()[:10]
        del table
    kept = anon_kib() - before
    allocator.release()
    print(json.dumps({
        "allocated": pa.default_memory_pool().bytes_allocated(),
        "kept_kib": kept,
        "after_release_kib": anon_kib() - before,
    }))
    """
)


def _run(mode: str, **env: str) -> dict[str, object]:
    return _run_script(_CHURN, mode, **env)


def _run_script(script: str, mode: str, **env: str) -> dict[str, object]:
    out = subprocess.run(
        [sys.executable, "-c", script, mode],
        check=True,
        capture_output=True,
        text=True,
        env={**os.environ, **env},
        cwd=REPO,
        timeout=60,
    )
    result: dict[str, object] = json.loads(out.stdout)
    return result


def test_freed_large_buffers_return_to_the_system_only_when_tuned() -> None:
    default = _run("default")
    tuned = _run("tuned")
    assert tuned["applied"] == {
        "MALLOC_ARENA_MAX": allocator.ARENA_MAX,
        "MALLOC_MMAP_THRESHOLD_": allocator.MMAP_THRESHOLD_BYTES,
    }
    # 200 MiB were allocated and freed: glibc's defaults keep them on the heap, the tuned
    # allocator unmapped every block.
    assert isinstance(default["kept_kib"], int) and default["kept_kib"] > 150 * 1024
    assert isinstance(tuned["kept_kib"], int) and tuned["kept_kib"] < 16 * 1024


def test_release_returns_the_pages_arrows_pool_kept() -> None:
    # The pool the runtime's wheels default to, whatever this environment chose.
    result = _run_script(_ARROW_CHURN, "arrow", ARROW_DEFAULT_MEMORY_POOL="mimalloc")
    assert result["allocated"] == 0  # every buffer was freed
    kept, after = result["kept_kib"], result["after_release_kib"]
    assert isinstance(kept, int) and isinstance(after, int)
    # About 150 MiB of buffers were freed: the pool kept their pages until release.
    assert kept > 96 * 1024
    assert after < kept - 64 * 1024


def test_the_users_environment_wins() -> None:
    result = _run("tuned", MALLOC_ARENA_MAX="4")
    assert result["applied"] == {"MALLOC_MMAP_THRESHOLD_": allocator.MMAP_THRESHOLD_BYTES}


def test_tuning_happens_once_per_process() -> None:
    allocator.tune()
    assert allocator.tune() == {}
    assert isinstance(allocator.release(), bool)
