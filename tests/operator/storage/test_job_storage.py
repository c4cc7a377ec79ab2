"""The operator's view of a job's checkpoint storage, on local disk (file:// URIs) with
checkpoints written by the runtime core."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from gic_operator.models import GICJobSpec
from gic_operator.storage.job_storage import JobStorage, open_job_storage, resolver_for
from gic_runtime.checkpoint.manifest import RestoreMode, StoredManifest
from gic_runtime.checkpoint.registry import DEFAULT_RETAINED_CHECKPOINTS
from gic_runtime.control import ControlChannel, Outcome
from gic_runtime.control.auth import ControlKey
from gic_runtime.coordination import TaskSettings
from gic_runtime.driver import CheckpointTimeline, RestoreRequest
from gic_runtime.errors import ConfigurationError, RestoreError
from gic_runtime.executor import StateTask
from gic_runtime.executor.core import TaskContext
from gic_runtime.state.memory_store import InMemoryStore
from gic_runtime.status import JobState, JobStatus, status_uri, write_status
from gic_runtime.storage import StoreResolver

BUCKETS = 2
JOB = "prod.wc"


def count(ctx: TaskContext) -> None:
    """One batch of the keyed count: every key's count += 1."""
    counts = ctx.backend.value_state("count")
    for key in range(5):
        counts.set(f"k{key}", (counts.get(f"k{key}") or 0) + 1)


def run_job(
    storage: JobStorage, job_id: str, batches: range, restore: RestoreRequest | None = None
) -> list[StoredManifest]:
    """Checkpoint ``batches`` of a tiny keyed count of ``job_id`` (one checkpoint each)."""
    timeline = CheckpointTimeline(
        storage.resolver, storage.root, job_id, epoch=1, num_buckets=BUCKETS, restore=restore
    )
    task = StateTask(
        root=storage.root,
        job_id=job_id,
        epoch=1,
        num_buckets=BUCKETS,
        store=InMemoryStore(),
        resolver=storage.resolver,
        settings=TaskSettings(),
    )
    written = []
    try:
        task.restore(timeline.start.manifest)
        for n, batch in enumerate(batches):
            full = timeline.must_be_self_contained or (restore is None and n == 0)
            states = task.checkpoint(count, checkpoint_id=batch, self_contained=full).states
            stored, wait = timeline.commit(batch, states, engine={"batch": batch})
            wait()
            task.notify_checkpoint_complete(states)
            written.append(stored)
    finally:
        task.close()
        timeline.close()
    return written


@pytest.fixture
def root(tmp_path: Path) -> str:
    return (tmp_path / "store").as_uri()


@pytest.fixture
def storage(root: str) -> JobStorage:
    return JobStorage(StoreResolver(), root, JOB)


def put(storage: JobStorage, uri: str, data: bytes) -> str:
    store, key = storage.resolver.resolve(uri)
    store.put(key, data)
    return uri


def exists(storage: JobStorage, uri: str) -> bool:
    store, key = storage.resolver.resolve(uri)
    return store.exists(key)


def test_runtime_status_roundtrip(storage: JobStorage) -> None:
    assert storage.runtime_status() is None
    status = JobStatus(
        job_id=JOB, epoch=3, state=JobState.RUNNING, updated_at=20.0, started_at=10.0, batches=7
    )
    write_status(storage.resolver, storage.root, JOB, status)
    assert storage.runtime_status() == status


def test_corrupt_status_reads_as_none_with_a_warning(
    storage: JobStorage, caplog: pytest.LogCaptureFixture
) -> None:
    put(storage, status_uri(storage.root, JOB), b"GICT 1 garbage\n{")
    with caplog.at_level(logging.WARNING, logger="gic_operator.storage.job_storage"):
        assert storage.runtime_status() is None
    assert "unreadable" in caplog.text


def test_epochs(storage: JobStorage) -> None:
    assert storage.highest_epoch() == 0
    assert storage.claim_epoch("operator-a") == 1
    assert storage.claim_epoch("operator-a") == 2
    assert storage.highest_epoch() == 2


def test_checkpoints(storage: JobStorage) -> None:
    assert not storage.has_checkpoint()
    assert storage.latest_checkpoint_id() is None
    run_job(storage, JOB, range(3, 7))
    assert storage.has_checkpoint()
    assert storage.latest_checkpoint_id() == 6


KEY = ControlKey.from_text("operator-derived-control-key-of-prod-wc-0123")


def target(storage: JobStorage, rid: str) -> str:
    return f"{storage.root}/savepoints/{JOB}/{rid}"


def test_request_savepoint_is_idempotent(storage: JobStorage) -> None:
    first = storage.request_savepoint(
        "sp-upgrade-2",
        key=KEY,
        kind="terminal",
        format="native",
        requested_by="operator",
        target=target(storage, "sp-upgrade-2") + "/",
    )
    assert first == target(storage, "sp-upgrade-2")
    again = storage.request_savepoint(
        "sp-upgrade-2",
        key=KEY,
        kind="terminal",
        format="native",
        requested_by="operator-restarted",
        target=first,
    )
    assert again == first
    with pytest.raises(
        ConfigurationError, match="already names a different or unauthenticated request"
    ):
        storage.request_savepoint(
            "sp-upgrade-2",
            key=KEY,
            kind="intermediate",
            format="native",
            requested_by="operator",
            target=first,
        )
    with pytest.raises(
        ConfigurationError, match="already names a different or unauthenticated request"
    ):
        storage.request_savepoint(
            "sp-upgrade-2",
            key=KEY,
            kind="terminal",
            format="native",
            requested_by="operator",
            target=target(storage, "elsewhere"),
        )
    channel = ControlChannel(storage.resolver, storage.root, JOB)
    assert [r.request_id for r in channel.pending()] == ["sp-upgrade-2"]
    assert KEY.verifies(JOB, channel.pending()[0])
    # the same intent planted under the operator's next id without the job's MAC
    channel.request_savepoint("terminal", target=target(storage, "sp-3"), request_id="sp-3")
    with pytest.raises(ConfigurationError, match="unauthenticated request"):
        storage.request_savepoint(
            "sp-3",
            key=KEY,
            kind="terminal",
            format="native",
            requested_by="operator",
            target=target(storage, "sp-3"),
        )


def test_outcomes_of_savepoints_and_stops(storage: JobStorage) -> None:
    storage.request_savepoint(
        "sp-1",
        key=KEY,
        kind="intermediate",
        format="canonical",
        requested_by="op",
        target=target(storage, "sp-1"),
    )
    storage.request_stop("stop-1", requested_by="op", key=KEY)
    storage.request_stop("stop-1", requested_by="op", key=KEY)
    assert storage.outcome("sp-1") is None
    channel = ControlChannel(storage.resolver, storage.root, JOB)
    assert channel.pending_stop() is not None
    done = channel.complete(Outcome.completed("sp-1", path="x", checkpoint_id=3, finished_at=1.0))
    failed = channel.complete(Outcome.failed("stop-1", "driver gone", finished_at=2.0))
    assert storage.outcome("sp-1") == done
    assert storage.outcome("stop-1") == failed
    assert storage.outcome("never-asked") is None


def test_savepoint_size_and_disposal(storage: JobStorage) -> None:
    sp = f"{storage.root}/savepoints/sp-1"
    put(storage, f"{sp}/_savepoint.manifest", b"m" * 10)
    put(storage, f"{sp}/files/a", b"a" * 100)
    keep = put(storage, f"{storage.root}/savepoints/sp-10/files/a", b"b")
    assert storage.savepoint_size(sp + "/") == (2, 110)
    assert storage.dispose_savepoint(sp + "/") == 2
    assert storage.savepoint_size(sp) == (0, 0)
    assert exists(storage, keep)
    assert storage.dispose_savepoint(sp) == 0  # already gone: nothing to do


@pytest.mark.parametrize(
    "where",
    [
        "{root}/jobs/prod.wc",
        "{root}/savepoints",
        "{root}/savepoints/",
        "{root}/savepoints/../jobs/prod.wc",
        "{root}/other/savepoints/sp-1",
        "file:///elsewhere/savepoints/sp-1",
    ],
)
def test_disposal_refuses_anything_but_a_savepoint_directory(
    storage: JobStorage, where: str
) -> None:
    precious = put(storage, f"{storage.root}/jobs/prod.wc/checkpoints/x", b"x")
    with pytest.raises(ConfigurationError, match="refusing to delete savepoint files"):
        storage.dispose_savepoint(where.format(root=storage.root))
    assert exists(storage, precious)


def test_sweep_deletes_only_orphans_inside_the_job_directory(storage: JobStorage) -> None:
    written = run_job(storage, JOB, range(1, 5))
    orphan = put(storage, f"{storage.root}/jobs/{JOB}/changelog/1/lost.seg", b"o" * 50)
    other_job = put(storage, f"{storage.root}/jobs/prod.other/changelog/1/x.seg", b"x")
    savepoint = put(storage, f"{storage.root}/savepoints/sp-1/files/x.seg", b"x")
    control = storage.request_savepoint(
        "sp-2",
        key=KEY,
        kind="intermediate",
        format="native",
        requested_by="op",
        target=target(storage, "sp-2"),
    )
    referenced = set().union(*(s.manifest.uris() for s in written[-DEFAULT_RETAINED_CHECKPOINTS:]))

    result = storage.sweep_orphans(None)

    assert result.deleted >= 1 and result.deleted_bytes >= 50
    assert not exists(storage, orphan)
    assert all(exists(storage, uri) for uri in referenced)
    assert all(exists(storage, s.uri) for s in written[-DEFAULT_RETAINED_CHECKPOINTS:])
    assert exists(storage, other_job) and exists(storage, savepoint)
    assert control == target(storage, "sp-2")
    assert ControlChannel(storage.resolver, storage.root, JOB).request("sp-2") is not None
    assert storage.sweep_orphans(None).deleted == 0


def test_sweep_refuses_when_a_claimed_source_is_unreadable(root: str) -> None:
    source = JobStorage(StoreResolver(), root, "prod.source")
    source_manifests = run_job(source, "prod.source", range(1, 3))
    claimer = JobStorage(StoreResolver(), root, JOB)
    restore = RestoreRequest(source_manifests[-1].uri, RestoreMode.CLAIM)
    run_job(claimer, JOB, range(3, 4), restore=restore)
    orphan = put(claimer, f"{root}/jobs/{JOB}/changelog/1/lost.seg", b"o")
    store, key = source.resolver.resolve(source_manifests[-1].uri)
    store.delete_many([key])

    with pytest.raises(RestoreError, match="nothing was deleted"):
        claimer.sweep_orphans(source_manifests[-1].uri)
    assert exists(claimer, orphan)


def test_restore_paths(storage: JobStorage) -> None:
    assert storage.resolve_restore_path("s3://bucket/gic/savepoints/sp-1/") == (
        "s3://bucket/gic/savepoints/sp-1"
    )
    assert storage.resolve_restore_path("/data/sp-1/") == "file:///data/sp-1"
    with pytest.raises(ConfigurationError, match="relative"):
        storage.resolve_restore_path("sp-1")


def test_open_job_storage_shares_one_resolver_per_endpoint(root: str) -> None:
    spec = GICJobSpec.model_validate(
        {
            "application": {"image": "i", "mainFile": "/job.py"},
            "checkpointing": {"storage": root + "/", "s3EndpointUrl": "http://s3.local:8333"},
        }
    )
    opened = open_job_storage(spec, JOB)
    assert opened.root == root and opened.job_id == JOB
    assert opened.resolver is resolver_for("http://s3.local:8333")
    assert resolver_for(None) is resolver_for(None) is not opened.resolver


def test_restore_release_is_judged_from_the_manifests(root: str) -> None:
    source = JobStorage(StoreResolver(), root, "prod.source")
    source_manifest = run_job(source, "prod.source", range(1, 3))[-1].uri
    copier = JobStorage(StoreResolver(), root, JOB)
    assert not copier.restore_released(source_manifest, (1, 0)), "no checkpoint yet"
    restore = RestoreRequest(source_manifest, RestoreMode.NO_CLAIM)
    run_job(copier, JOB, range(3, 4), restore=restore)
    assert not copier.restore_released(source_manifest, (1, 0)), "judged once per progress"
    assert copier.restore_released(source_manifest, (1, 3))
    other = f"{root}/savepoints/prod.other/sp"
    assert not copier.restore_released(other, (1, 3)), "another source"
    claimer = JobStorage(StoreResolver(), root, "prod.claimer")
    claim = RestoreRequest(source_manifest, RestoreMode.CLAIM)
    run_job(claimer, "prod.claimer", range(3, 4), restore=claim)
    assert not claimer.restore_released(source_manifest, (1, 3)), (
        "a claimed source is never released"
    )
