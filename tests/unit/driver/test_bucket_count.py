"""The bucket count is fixed for a state lineage: a launch configured with another
count is refused as a settings error (a relaunch meets it again), naming both counts
and the ways out, before it writes anything."""

from __future__ import annotations

from pathlib import Path

import pytest

from gic_runtime.coordination import TaskSettings
from gic_runtime.driver import CheckpointTimeline
from gic_runtime.errors import BucketCountMismatchError, ConfigurationError, RestoreError
from gic_runtime.executor import StateTask
from gic_runtime.executor.core import TaskContext
from gic_runtime.state.memory_store import InMemoryStore
from gic_runtime.status import FailureReason, failure_reason
from gic_runtime.storage import LocalObjectStore, StoreResolver

JOB = "job"


def count(ctx: TaskContext) -> None:
    state = ctx.backend.value_state("n")
    for key in range(10):
        state.set(key, (state.get(key) or 0) + 1)


def test_another_bucket_count_is_an_invalid_setting(tmp_path: Path) -> None:
    objects = LocalObjectStore(tmp_path / "store")
    resolver = StoreResolver()
    resolver.register(objects)
    root = objects.root_uri
    timeline = CheckpointTimeline(resolver, root, JOB, epoch=1, num_buckets=8)
    task = StateTask(
        root=root,
        job_id=JOB,
        epoch=1,
        num_buckets=8,
        store=InMemoryStore(),
        resolver=resolver,
        settings=TaskSettings(),
    )
    try:
        task.restore(timeline.start.manifest)
        ack = task.checkpoint(count, checkpoint_id=1, self_contained=True)
        _, wait = timeline.commit(1, ack.states)
        wait()
    finally:
        task.close()
    before = {i.key: i.size for i in objects.list("")}

    with pytest.raises(BucketCountMismatchError, match=r"8 buckets.*configured with 16") as err:
        CheckpointTimeline(resolver, root, JOB, epoch=2, num_buckets=16)

    assert "set it to 8" in str(err.value)
    assert isinstance(err.value, RestoreError) and isinstance(err.value, ConfigurationError)
    assert failure_reason(err.value) is FailureReason.INVALID_SETTINGS
    assert {i.key: i.size for i in objects.list("")} == before
