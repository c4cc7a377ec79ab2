"""Workload and worker-process helpers of the executor tests.

Importable by plain name (the directory's conftest puts it on ``sys.path``), so
functions here can run in ``spawn``-ed worker processes.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from gic_runtime.coordination.barrier import Barrier, TaskAck
from gic_runtime.coordination.task_settings import TaskSettings
from gic_runtime.executor.core import (
    TaskContext,
    close_local_executor,
    local_stats,
    run_task,
    wait_local_materializations,
)
from gic_runtime.handles import BucketState
from gic_runtime.materialization.scheduler import MaterializationSettings
from gic_runtime.state.keys import KIND_VALUE, bucket_for, decode_key, decode_value, state_prefix
from gic_runtime.state.memory_store import InMemoryStore
from gic_runtime.state.restore import restore_bucket
from gic_runtime.storage.uri import StoreResolver

__all__ = ["bucket_for"]  # re-exported for the tests

QUIET = TaskSettings(materialization=MaterializationSettings(interval_s=3600.0, jitter=0.0))
"""Settings whose background materialization never comes due within a test."""

EAGER = TaskSettings(materialization=MaterializationSettings(interval_s=1e-6, jitter=0.0))
"""Settings whose background materialization is due right after every batch."""

STATE = "count"
OUTPUT_SCHEMA = pa.schema([("key", pa.string()), ("count", pa.int64())])


class InjectedFailureError(RuntimeError):
    """The callback failed on purpose, after writing some state."""


def counting(keys: Sequence[str], *, fail_after: int | None = None) -> Any:
    """A keyed count over ``keys``: each key's count += 1, output ``(key, new count)``.
    With ``fail_after``, raises after that many updates."""

    def process(ctx: TaskContext) -> Iterator[pa.Table]:
        ctx.count_rows_in(len(keys))
        counts = ctx.backend.value_state(STATE)
        out_keys: list[str] = []
        out_counts: list[int] = []
        for i, key in enumerate(keys):
            if fail_after is not None and i == fail_after:
                raise InjectedFailureError(f"injected failure after {i} updates")
            value = counts.get(key, 0) + 1
            counts.set(key, value)
            out_keys.append(key)
            out_counts.append(value)
        yield pa.table({"key": out_keys, "count": out_counts}, schema=OUTPUT_SCHEMA)

    return process


def keys_of_task(barrier: Barrier, task_index: int, keys: Sequence[str]) -> list[str]:
    """The keys (in order) that route into task ``task_index``'s buckets."""
    owned = barrier.bucket_range(task_index)
    return [k for k in keys if bucket_for(k, barrier.num_buckets) in owned]


def run_batch(
    barrier: Barrier, keys: Sequence[str], *, fail_task: int | None = None, fail_after: int = 0
) -> list[TaskAck]:
    """Run every task of ``barrier`` on its share of ``keys`` in this process."""
    acks = []
    for i in range(barrier.num_tasks):
        fail = fail_after if i == fail_task else None
        process = counting(keys_of_task(barrier, i, keys), fail_after=fail)
        acks.append(run_task(barrier, i, process, output_schema=OUTPUT_SCHEMA))
    return acks


def states_of(acks: Sequence[TaskAck]) -> dict[int, BucketState]:
    out: dict[int, BucketState] = {}
    for ack in acks:
        out.update(ack.states)
    return out


def counts_from_storage(
    states: Mapping[int, BucketState], resolver: StoreResolver | None = None
) -> dict[str, int]:
    """The counts the bucket states describe, rebuilt from storage into memory."""
    resolver = resolver or StoreResolver()
    prefix = state_prefix(KIND_VALUE, STATE)
    out: dict[str, int] = {}
    for bucket, state in states.items():
        store = InMemoryStore()
        try:
            restore_bucket(store, state, resolver)
            for skey, raw in store.scan(bucket, prefix):
                out[decode_key(skey[len(prefix) :])] = decode_value(raw)
        finally:
            store.close()
    return out


def staged_rows(acks: Sequence[TaskAck]) -> dict[str, int]:
    """Output rows of the acks' staged files, as ``key -> count``."""
    out: dict[str, int] = {}
    for ack in acks:
        for staged in ack.outputs:
            table = pq.read_table(Path(staged.uri.removeprefix("file://")))
            for row in table.to_pylist():
                out[row["key"]] = row["count"]
    return out


def expected_counts(*batches: Sequence[str]) -> dict[str, int]:
    out: dict[str, int] = {}
    for keys in batches:
        for key in keys:
            out[key] = out.get(key, 0) + 1
    return out


# --- entry points of worker processes -----------------------------------------------------


def worker_run_task(
    barrier: Barrier, task_index: int, keys: Sequence[str], fail_after: int | None = None
) -> tuple[bytes | None, str | None]:
    """Run one task here; answer ``(ack bytes, None)`` or ``(None, error text)``."""
    process = counting(keys, fail_after=fail_after)
    try:
        ack = run_task(barrier, task_index, process, output_schema=OUTPUT_SCHEMA)
    except InjectedFailureError as exc:
        return None, str(exc)
    return ack.to_bytes(), None


def worker_wait_materializations(timeout: float) -> tuple[bool, int]:
    """Wait for this process's background materializations; answer (done, completed)."""
    done = wait_local_materializations(timeout)
    return done, local_stats().completed


def worker_close() -> None:
    close_local_executor(wait=True, timeout=30)
