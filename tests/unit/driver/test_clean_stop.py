"""A clean stop leaves nothing unreferenced (docs/architecture.md I5): once the
attempt's background snapshots finished, ``CheckpointTimeline.sweep_after_stop``
deletes the attempt's own segments and snapshots no retained manifest references, and
nothing of another attempt."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from gic_runtime.checkpoint.catalog import load_retained
from gic_runtime.coordination import TaskSettings
from gic_runtime.driver import CheckpointTimeline
from gic_runtime.errors import FencedError
from gic_runtime.executor import StateTask
from gic_runtime.executor.core import TaskContext
from gic_runtime.fencing import claim_epoch
from gic_runtime.layout import job_dir, new_segment_uri, new_snapshot_uri
from gic_runtime.materialization import MaterializationSettings
from gic_runtime.state.memory_store import InMemoryStore
from gic_runtime.storage import LocalObjectStore, StoreResolver
from gic_runtime.storage.uri import join

JOB = "job"
BUCKETS = 8


def put(batch: int) -> Any:
    def apply(ctx: TaskContext) -> None:
        state = ctx.backend.value_state("v")
        for key in range(40):
            state.set(key, batch * 1000 + key)

    return apply


def run_and_stop(objects: LocalObjectStore, tmp_path: Path, batches: int) -> CheckpointTimeline:
    """Claim an epoch, run ``batches`` checkpoints (every changed bucket due for a
    background snapshot after each), stop the task cleanly; the timeline stays open."""
    resolver = StoreResolver()
    resolver.register(objects)
    root = objects.root_uri
    epoch = claim_epoch(resolver, root, JOB, claimed_by="test")
    timeline = CheckpointTimeline(resolver, root, JOB, epoch=epoch, num_buckets=BUCKETS)
    settings = TaskSettings(materialization=MaterializationSettings(max_sections=1))
    task = StateTask(
        root=root,
        job_id=JOB,
        epoch=epoch,
        num_buckets=BUCKETS,
        store=InMemoryStore(),
        resolver=resolver,
        local_dir=tmp_path / f"local-{epoch}",
        settings=settings,
    )
    try:
        task.restore(timeline.start.manifest)
        first = (timeline.start.checkpoint_id or 0) + 1
        for cid in range(first, first + batches):
            ack = task.checkpoint(put(cid), checkpoint_id=cid)
            timeline.commit(cid, ack.states)
            task.notify_checkpoint_complete(ack.states)
            assert task.wait_materializations(30)
        assert ack.stats.materializations_started > 0
    finally:
        task.close()
    # what the commits subsumed is deleted in the background: let it finish, so what
    # the tests see unreferenced is exactly what the stop's sweep is for
    timeline.registry.drain()
    return timeline


def data_objects(objects: LocalObjectStore) -> set[str]:
    out: set[str] = set()
    for sub in ("changelog", "snapshots"):
        out |= {objects.uri_for(i.key) for i in objects.list(f"jobs/{JOB}/{sub}/")}
    return out


def referenced(objects: LocalObjectStore) -> set[str]:
    resolver = StoreResolver()
    resolver.register(objects)
    uris: set[str] = set()
    for stored in load_retained(resolver, objects.root_uri, JOB):
        uris |= stored.manifest.uris()
    return uris


@pytest.fixture
def objects(tmp_path: Path) -> LocalObjectStore:
    return LocalObjectStore(tmp_path / "objects")


def test_a_clean_stop_deletes_the_snapshots_no_batch_adopted(
    objects: LocalObjectStore, tmp_path: Path
) -> None:
    timeline = run_and_stop(objects, tmp_path, batches=4)
    try:
        left = data_objects(objects) - referenced(objects)
        assert any("/snapshots/" in u for u in left)  # the last batch's, never adopted
        result = timeline.sweep_after_stop()
    finally:
        timeline.close()
    assert result.deleted == len(left)
    assert data_objects(objects) <= referenced(objects)


def test_only_the_attempts_own_objects_are_deleted(
    objects: LocalObjectStore, tmp_path: Path
) -> None:
    root = objects.root_uri
    older = [
        new_snapshot_uri(root, JOB, 0, epoch=0),  # an older attempt's
        join(job_dir(root, JOB), "snapshots", "0", "ab" * 16 + ".snap"),  # an older runtime's
        new_segment_uri(root, JOB, 0),
    ]
    for uri in older:
        objects.put(uri.removeprefix(root + "/"), b"x")
    timeline = run_and_stop(objects, tmp_path, batches=3)
    try:
        result = timeline.sweep_after_stop()
    finally:
        timeline.close()
    assert result.deleted > 0 and result.deferred == len(older)
    assert data_objects(objects) - referenced(objects) == set(older)


def test_a_newer_claim_stops_the_sweep_before_it_deletes(
    objects: LocalObjectStore, tmp_path: Path
) -> None:
    timeline = run_and_stop(objects, tmp_path, batches=3)
    resolver = StoreResolver()
    resolver.register(objects)
    before = data_objects(objects)
    claim_epoch(resolver, objects.root_uri, JOB, claimed_by="a newer launch")
    try:
        with pytest.raises(FencedError):
            timeline.sweep_after_stop()
    finally:
        timeline.close()
    assert data_objects(objects) == before


def test_the_next_attempt_resumes_from_what_the_stop_kept(
    objects: LocalObjectStore, tmp_path: Path
) -> None:
    first = run_and_stop(objects, tmp_path, batches=3)
    first.sweep_after_stop()
    first.close()
    second = run_and_stop(objects, tmp_path, batches=2)
    try:
        assert second.start.checkpoint_id == 3
        second.sweep_after_stop()
    finally:
        second.close()
    assert data_objects(objects) <= referenced(objects)
