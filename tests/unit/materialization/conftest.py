"""Fixtures of the materialization tests: this process's materialization pool is idle
and shut down after every test (tests of :mod:`gic_runtime.materialization.background` run
their jobs on it; a later start creates a new thread pool)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from gic_runtime.materialization.pool import (
    shutdown_local_materializations,
    wait_local_materializations,
)


@pytest.fixture(autouse=True)
def _idle_process_pool() -> Iterator[None]:
    yield
    wait_local_materializations(30)
    shutdown_local_materializations(wait=True)
