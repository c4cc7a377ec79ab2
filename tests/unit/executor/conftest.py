"""Fixtures of the executor tests: a barrier factory on local storage, a clean
per-process executor cache around every test, and spawn-ed worker processes."""

from __future__ import annotations

import multiprocessing
import sys
from collections.abc import Callable, Iterator
from concurrent.futures import ProcessPoolExecutor
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).parent))  # executor_helpers, also in spawned workers

from executor_helpers import QUIET

from gic_runtime.coordination.barrier import Barrier
from gic_runtime.executor.core import close_local_executor
from gic_runtime.storage.local import LocalObjectStore


@pytest.fixture(autouse=True)
def _clean_executor() -> Iterator[None]:
    yield
    close_local_executor(wait=True, timeout=30)


@pytest.fixture
def make_barrier(local_store: LocalObjectStore, tmp_path: Path) -> Callable[..., Barrier]:
    """``make_barrier(checkpoint_id, expected=..., **overrides)``: a barrier of job
    ``job`` on ``local_store`` (or under the storage root ``root=``) with 8 buckets,
    2 tasks, staging per batch."""

    def make(checkpoint_id: int, *, root: str = local_store.root_uri, **overrides: Any) -> Barrier:
        base = Barrier(
            job_id="job",
            root=root,
            epoch=1,
            checkpoint_id=checkpoint_id,
            num_buckets=8,
            num_tasks=2,
            local_dir=str(tmp_path / "local"),
            staging_uri=f"{root}/staging/{checkpoint_id}",
            settings=QUIET,
        )
        return replace(base, **overrides)

    return make


def _spawn_pool() -> ProcessPoolExecutor:
    return ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn"))


@pytest.fixture(scope="module")
def workers() -> Iterator[tuple[ProcessPoolExecutor, ProcessPoolExecutor]]:
    """Two long-lived worker processes (like two Python workers of one executor)."""
    import executor_helpers

    a, b = _spawn_pool(), _spawn_pool()
    try:
        yield a, b
    finally:
        for pool in (a, b):
            try:
                pool.submit(executor_helpers.worker_close).result(timeout=60)
            finally:
                pool.shutdown(wait=True)
