"""End to end on a real S3 server: executor tasks (StateTask) and the driver's timeline
(CheckpointTimeline) checkpoint keyed state to SeaweedFS through a fault-injecting proxy,
then fresh tasks restore it. Every scenario compares restored state with a reference
model the test keeps beside the real state.

The S3 client makes one attempt per request (botocore retries off), so every injected
fault reaches the runtime's own retry and hedging policy. Faults target changelog
segment PUTs: those go through the hedging uploader; snapshots and manifests do not.
The lost-response tests instead use a client that retries by itself, as a driver or a
task configured with botocore retries would: its create-if-absent retry of a PUT that
landed must count as success, not as a name collision.
"""

from __future__ import annotations

import random
import time
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import pytest

from gic_runtime.changelog.retrying import RetryPolicy
from gic_runtime.changelog.uploader import UploaderSettings
from gic_runtime.changelog.writer import WriterSettings
from gic_runtime.checkpoint.catalog import list_checkpoints, read_manifest
from gic_runtime.checkpoint.manifest import Manifest, RestoreMode, StoredManifest
from gic_runtime.clock import Clock
from gic_runtime.coordination import CheckpointTimeline, RestoreRequest, StateTask, TaskSettings
from gic_runtime.errors import CorruptFileError, ManifestExistsError, UploadError
from gic_runtime.layout import job_dir, savepoint_dir
from gic_runtime.materialization.scheduler import MaterializationSettings
from gic_runtime.state.keys import bucket_for
from gic_runtime.state.memory_store import InMemoryStore
from gic_runtime.storage.s3 import S3ObjectStore
from gic_runtime.storage.uri import StoreResolver
from gic_runtime.testing import TestingClock
from gic_runtime.testing_proxy import TestingFaultProxy
from gic_runtime.testing_s3server import TestingS3Server

pytestmark = pytest.mark.s3

NUM_BUCKETS = 8
KEYS = 120
JOB = "job-e2e"
SEGMENTS = "/changelog/"
"""Path part of every changelog segment object (what fault rules target)."""
MAT_INTERVAL = 60.0

FAST_UPLOADER = UploaderSettings(
    hedge_after_s=0.25,
    retry=RetryPolicy(max_attempts=10, delay_s=0.02, backoff=1.5, timeout_s=1.0),
    tick_s=0.01,
)
FAKE_TIME_MATERIALIZATION = MaterializationSettings(
    interval_s=MAT_INTERVAL, jitter=0.0, max_in_flight=2, seed=7
)
SMALL_SEGMENTS = WriterSettings(preemptive_upload_bytes=8 * 1024)


class TestingModel:
    """The state the tasks should hold, kept by plain dict operations."""

    __test__ = False

    def __init__(self) -> None:
        self.values: dict[str, Any] = {}
        self.maps: dict[str, dict[int, Any]] = {}
        self.lists: dict[str, list[Any]] = {}

    def snapshot(self) -> dict[str, Any]:
        return {
            "value": dict(self.values),
            "map": {k: dict(m) for k, m in self.maps.items() if m},
            "list": {k: list(v) for k, v in self.lists.items() if v},
        }


class TestingEnv:
    """One bucket on SeaweedFS behind the fault proxy, and the job parts made on it."""

    __test__ = False

    def __init__(self, server: TestingS3Server, proxy: TestingFaultProxy, bucket: str) -> None:
        self.proxy = proxy
        self.settings = replace(
            server.settings,
            endpoint_url=proxy.endpoint_url,
            max_attempts=1,
            connect_timeout_s=2.0,
            read_timeout_s=3.0,
        )
        self.store = S3ObjectStore(bucket, "gic", settings=self.settings)
        self.resolver = StoreResolver(self.settings)
        self.resolver.register(self.store)
        self.root = f"s3://{bucket}/gic"
        self._open: list[StateTask | CheckpointTimeline] = []

    def task(
        self,
        epoch: int,
        buckets: range = range(NUM_BUCKETS),
        *,
        job: str = JOB,
        clock: Clock | None = None,
        settings: TaskSettings | None = None,
        resolver: StoreResolver | None = None,
    ) -> StateTask:
        task = StateTask(
            root=self.root,
            job_id=job,
            epoch=epoch,
            bucket_range=buckets,
            num_buckets=NUM_BUCKETS,
            store=InMemoryStore(),
            resolver=resolver or self.resolver,
            clock=clock,
            settings=settings
            or TaskSettings(
                writer=SMALL_SEGMENTS,
                uploader=FAST_UPLOADER,
                materialization=FAKE_TIME_MATERIALIZATION,
                checkpoint_timeout_s=60.0,
            ),
        )
        self._open.append(task)
        return task

    def timeline(
        self,
        epoch: int,
        *,
        job: str = JOB,
        retain: int = 3,
        restore: RestoreRequest | None = None,
        resolver: StoreResolver | None = None,
    ) -> CheckpointTimeline:
        timeline = CheckpointTimeline(
            resolver or self.resolver,
            self.root,
            job,
            epoch=epoch,
            num_buckets=NUM_BUCKETS,
            retain=retain,
            restore=restore,
        )
        self._open.append(timeline)
        return timeline

    def retrying_resolver(self, attempts: int = 3) -> StoreResolver:
        """A resolver whose S3 client retries requests itself (botocore)."""
        settings = replace(self.settings, max_attempts=attempts)
        resolver = StoreResolver(settings)
        resolver.register(S3ObjectStore(self.store.bucket, "gic", settings=settings))
        return resolver

    def restored_state(self, manifest: Manifest, *, epoch: int = 99, job: str = JOB) -> Any:
        """State of a fresh task (fresh in-memory store) restored from ``manifest``."""
        task = self.task(epoch, job=job, clock=TestingClock())
        summary = task.restore(manifest)
        assert not summary.local_hits
        state = read_state([task])
        task.close()
        return state

    def keys_under(self, uri: str) -> dict[str, int]:
        """``{uri: size}`` of every object below the directory ``uri``."""
        store, key = self.resolver.resolve(uri)
        return {store.uri_for(o.key): o.size for o in store.list(key.rstrip("/") + "/")}

    def exists(self, uri: str) -> bool:
        store, key = self.resolver.resolve(uri)
        return store.exists(key)

    def flip_byte(self, uri: str, offset: int) -> None:
        store, key = self.resolver.resolve(uri)
        data = bytearray(store.get(key))
        data[offset] ^= 0x40
        store.put(key, bytes(data))

    def close(self) -> None:
        for part in reversed(self._open):
            part.close()


@pytest.fixture
def env(
    s3_server: TestingS3Server, fault_proxy: TestingFaultProxy, s3_bucket: str
) -> Iterator[TestingEnv]:
    environment = TestingEnv(s3_server, fault_proxy, s3_bucket)
    yield environment
    fault_proxy.clear()
    environment.close()


# --- workload and checks -------------------------------------------------------------


def owner(tasks: list[StateTask], key: str) -> StateTask:
    bucket = bucket_for(key, NUM_BUCKETS)
    return next(t for t in tasks if bucket in t.backend.bucket_range)


def run_batch(tasks: list[StateTask], model: TestingModel, rng: random.Random, ops: int) -> None:
    """Random value/map/list changes, applied to the tasks and to the model alike."""
    for _ in range(ops):
        key = f"k{rng.randrange(KEYS)}"
        backend = owner(tasks, key).backend
        value, kind, user_key = rng.randrange(10_000), rng.random(), rng.randrange(8)
        if kind < 0.30:
            payload = [value, "x" * rng.randrange(64)]
            backend.value_state("v").set(key, payload)
            model.values[key] = payload
        elif kind < 0.35:
            backend.value_state("v").clear(key)
            model.values.pop(key, None)
        elif kind < 0.55:
            backend.map_state("m").put(key, user_key, value)
            model.maps.setdefault(key, {})[user_key] = value
        elif kind < 0.60:
            backend.map_state("m").remove(key, user_key)
            model.maps.get(key, {}).pop(user_key, None)
        elif kind < 0.62:
            backend.map_state("m").clear(key)
            model.maps.pop(key, None)
        elif kind < 0.85:
            backend.list_state("l").append(key, value)
            model.lists.setdefault(key, []).append(value)
        elif kind < 0.95:
            backend.list_state("l").extend(key, [value, -value])
            model.lists.setdefault(key, []).extend([value, -value])
        else:
            backend.list_state("l").clear(key)
            model.lists.pop(key, None)
    for task in tasks:
        task.poll()


def read_state(tasks: list[StateTask]) -> dict[str, Any]:
    """Every key's value, map and list as the tasks hold them (model's shape)."""
    out: dict[str, Any] = {"value": {}, "map": {}, "list": {}}
    for i in range(KEYS):
        key = f"k{i}"
        backend = owner(tasks, key).backend
        value = backend.value_state("v").get(key)
        if value is not None:
            out["value"][key] = value
        if items := backend.map_state("m").items(key):
            out["map"][key] = dict(items)
        if values := backend.list_state("l").get(key):
            out["list"][key] = values
    return out


def checkpoint(
    tasks: list[StateTask],
    timeline: CheckpointTimeline,
    checkpoint_id: int,
    *,
    self_contained: bool = False,
) -> StoredManifest:
    """Every task's checkpoint, the driver's commit, then the completion notice."""
    states = {}
    for task in tasks:
        states.update(task.checkpoint(self_contained=self_contained))
    stored, _wait = timeline.commit(checkpoint_id, states)
    for task in tasks:
        task.notify_checkpoint_complete(states)
    return stored


def materialize_all(tasks: list[StateTask], clock: TestingClock) -> None:
    """Make every bucket due (fake clock) and poll until each task's materializer is idle
    with nothing due; then every changed bucket has a fresh snapshot as its base."""
    clock.advance(MAT_INTERVAL * 2)
    deadline = time.monotonic() + 60
    for task in tasks:
        mat = task.materializer
        while True:
            task.poll()
            idle = not mat.in_flight()
            if idle and all(mat.due_at(b) > clock.monotonic() for b in task.backend.bucket_range):
                break
            assert time.monotonic() < deadline, "materialization did not finish in 60 s"
            time.sleep(0.005)
        assert mat.stats.failures == 0
        for b in task.backend.bucket_range:
            snapshot = task.backend.snapshot_of(b)
            assert (snapshot.seq if snapshot else 0) == task.backend.seq(b)


def assert_files_exist(env: TestingEnv, timeline: CheckpointTimeline) -> None:
    for stored in timeline.retained():
        assert env.exists(stored.uri)
        missing = [u for u in stored.manifest.uris() if not env.exists(u)]
        assert not missing, f"checkpoint {stored.checkpoint_id} lost {missing}"


# --- scenarios -----------------------------------------------------------------------


class TestHappyPath:
    def test_checkpoints_materialize_and_restore(self, env: TestingEnv) -> None:
        clock, rng, model = TestingClock(), random.Random(1), TestingModel()
        tasks = [env.task(1, range(0, 4), clock=clock), env.task(1, range(4, 8), clock=clock)]
        timeline = env.timeline(1, retain=2)
        for cid in range(1, 9):
            run_batch(tasks, model, rng, 250)
            if cid in (3, 6):
                materialize_all(tasks, clock)
            stored = checkpoint(tasks, timeline, cid)
        timeline.registry.drain()
        assert read_state(tasks) == model.snapshot()

        latest = timeline.latest()
        assert latest is not None and latest == stored
        assert [s.checkpoint_id for s in timeline.retained()] == [7, 8]
        assert [r.checkpoint_id for r in list_checkpoints(env.resolver, env.root, JOB)] == [7, 8]
        for state in latest.manifest.buckets.values():
            assert state.snapshot is not None  # materialized at batch 6
            assert all(h.to_seq > state.snapshot.seq for h in state.changelog)
        stats = timeline.registry.stats()
        assert stats.manifests_deleted == 6 and stats.objects_deleted > 0
        assert_files_exist(env, timeline)

        assert env.restored_state(latest.manifest) == model.snapshot()
        recovered = env.timeline(2)
        assert recovered.start.own and recovered.start.checkpoint_id == 8
        assert recovered.start.manifest == latest.manifest
        assert sum(t.uploader.stats().failed for t in tasks) == 0


class TestFaults:
    def test_slowdowns_delays_and_drops_lose_nothing(self, env: TestingEnv) -> None:
        proxy = env.proxy
        # Rules fire in order: the first segment PUTs are slowed beyond the attempt
        # timeout, then connections drop (before and after the server stored the
        # object), then a seeded random mix of 503s and drops.
        proxy.delay(1.3, method="PUT", path_contains=SEGMENTS, count=4)
        proxy.drop(method="PUT", path_contains=SEGMENTS, count=2)
        proxy.drop(method="PUT", path_contains=SEGMENTS, count=2, after_upstream=True)
        proxy.slowdown(method="PUT", path_contains=SEGMENTS, probability=0.25)
        proxy.drop(method="PUT", path_contains=SEGMENTS, probability=0.05, after_upstream=True)
        settings = TaskSettings(
            writer=WriterSettings(preemptive_upload_bytes=4 * 1024),
            uploader=FAST_UPLOADER,
            materialization=MaterializationSettings(interval_s=0.3, seed=3),
            checkpoint_timeout_s=60.0,
        )
        rng, model = random.Random(2), TestingModel()
        task = env.task(1, settings=settings)  # real clock: hedges and timeouts fire
        timeline = env.timeline(1)
        for cid in range(1, 13):
            run_batch([task], model, rng, 300)
            stored = checkpoint([task], timeline, cid)
        proxy.clear()
        deadline = time.monotonic() + 30
        while task.materializer.stats.materialized == 0:
            assert time.monotonic() < deadline
            time.sleep(0.01)
            task.poll()
        run_batch([task], model, rng, 50)
        stored = checkpoint([task], timeline, 13)

        faults = proxy.faults_injected()
        assert faults["delay"] == 4 and faults["drop"] >= 4 and faults["slowdown"] > 0
        stats = task.uploader.stats()
        assert stats.failed == 0 and stats.succeeded == stats.submitted
        assert stats.attempt_failures > 0  # 503s and drops were retried
        assert stats.hedges > 0 and stats.timeouts > 0  # delayed attempts were raced
        assert stats.losers_deleted > 0
        assert any(s.snapshot is not None for s in stored.manifest.buckets.values())
        assert_files_exist(env, timeline)
        assert env.restored_state(stored.manifest) == model.snapshot()

        task.close()  # every attempt ended, every loser deleted
        timeline.close()
        # Losing and lost-response attempts were deleted: no segment is left over. (A
        # snapshot finished after the last checkpoint may be; the sweep owns those.)
        leftovers = env.timeline(2).sweep(dry_run=True)
        assert not [u for u in leftovers.orphans if SEGMENTS in u]

    def test_persistent_slowdown_fails_the_checkpoint_and_loses_nothing(
        self, env: TestingEnv
    ) -> None:
        settings = TaskSettings(
            writer=SMALL_SEGMENTS,
            uploader=replace(FAST_UPLOADER, retry=RetryPolicy(max_attempts=3, delay_s=0.01)),
            materialization=FAKE_TIME_MATERIALIZATION,
            checkpoint_timeout_s=60.0,
        )
        rng, model = random.Random(3), TestingModel()
        task = env.task(1, settings=settings)  # real clock: retry delays elapse
        timeline = env.timeline(1)
        run_batch([task], model, rng, 200)
        checkpoint([task], timeline, 1)

        env.proxy.slowdown(method="PUT", path_contains=SEGMENTS)
        run_batch([task], model, rng, 200)
        with pytest.raises(UploadError) as info:
            checkpoint([task], timeline, 2)
        message = str(info.value)
        assert "SlowDown" in message and "changelog segment" in message
        assert "3 attempt(s)" in message
        assert [r.checkpoint_id for r in list_checkpoints(env.resolver, env.root, JOB)] == [1]
        assert timeline.latest() is not None and timeline.latest().checkpoint_id == 1

        env.proxy.clear()
        run_batch([task], model, rng, 100)
        stored = checkpoint([task], timeline, 3)
        assert task.uploader.stats().failed > 0
        assert env.restored_state(stored.manifest) == model.snapshot()


class TestCrashRecovery:
    def test_sweep_deletes_uncommitted_uploads_and_keeps_the_checkpoint(
        self, env: TestingEnv
    ) -> None:
        clock, rng, model = TestingClock(), random.Random(4), TestingModel()
        task = env.task(1, clock=clock)
        timeline = env.timeline(1)
        for cid in (1, 2):
            run_batch([task], model, rng, 200)
            committed = checkpoint([task], timeline, cid)
        at_commit = model.snapshot()
        run_batch([task], model, rng, 200)
        materialize_all([task], clock)  # snapshots nobody commits
        run_batch([task], model, rng, 200)
        lost = task.checkpoint()  # durable segments, but the manifest is never written
        lost_uris = {u for s in lost.values() for u in s.uris()} - committed.manifest.uris()
        assert any("/snapshots/" in u for u in lost_uris)
        assert any(SEGMENTS in u for u in lost_uris)
        task.close(wait=False)
        timeline.close()

        recovered = env.timeline(2)
        assert recovered.start.own and recovered.start.manifest == committed.manifest
        referenced = committed.manifest.uris()
        listed = {
            **env.keys_under(f"{job_dir(env.root, JOB)}/changelog"),
            **env.keys_under(f"{job_dir(env.root, JOB)}/snapshots"),
        }
        orphans = {u: n for u, n in listed.items() if u not in referenced}
        assert lost_uris <= orphans.keys()

        dry = recovered.sweep(dry_run=True)
        assert set(dry.orphans) == orphans.keys() and dry.deleted == 0
        result = recovered.sweep()
        assert result.orphaned == result.deleted == len(orphans)
        assert result.deleted_bytes == sum(orphans.values()) > 0
        assert result.referenced == len(referenced) + 2  # both manifests
        assert not any(env.exists(u) for u in orphans)
        assert_files_exist(env, recovered)

        assert env.restored_state(committed.manifest) == at_commit
        model = TestingModel()
        model.values, model.maps, model.lists = (
            dict(at_commit["value"]),
            {k: dict(v) for k, v in at_commit["map"].items()},
            {k: list(v) for k, v in at_commit["list"].items()},
        )
        successor = env.task(2, clock=clock)
        successor.restore(recovered.start.manifest)
        run_batch([successor], model, rng, 100)
        stored = checkpoint([successor], recovered, 3)
        assert env.restored_state(stored.manifest) == model.snapshot()


class TestNativeSavepoint:
    def test_server_side_copy_and_no_claim_restore(self, env: TestingEnv) -> None:
        clock, rng, model = TestingClock(), random.Random(5), TestingModel()
        task = env.task(1, job="job-a", clock=clock)
        timeline = env.timeline(1, job="job-a")
        run_batch([task], model, rng, 200)
        checkpoint([task], timeline, 1)
        materialize_all([task], clock)
        run_batch([task], model, rng, 200)
        source = checkpoint([task], timeline, 2)
        directory = savepoint_dir(env.root, "sp-1")
        savepoint = timeline.native_savepoint(directory)
        assert savepoint.files == len(source.manifest.uris())
        assert savepoint.server_side_copies == savepoint.files > 0
        assert savepoint.streamed_copies == 0
        assert all(u.startswith(directory + "/") for u in savepoint.stored.manifest.uris())
        at_savepoint = model.snapshot()
        task.close()
        timeline.close()

        job_b = env.timeline(1, job="job-b", restore=RestoreRequest(directory))
        assert job_b.start.manifest is not None and not job_b.start.own
        assert job_b.lineage is not None and job_b.lineage.mode is RestoreMode.NO_CLAIM
        assert job_b.must_be_self_contained
        task_b = env.task(1, job="job-b", clock=clock)
        task_b.restore(job_b.start.manifest)
        assert read_state([task_b]) == at_savepoint
        run_batch([task_b], model, rng, 150)
        first = checkpoint([task_b], job_b, 1, self_contained=job_b.must_be_self_contained)
        lineage = first.manifest.restored_from
        assert lineage is not None and lineage.released
        assert read_manifest(env.resolver, first.uri).restored_from == lineage
        assert not job_b.must_be_self_contained
        own = job_dir(env.root, "job-b") + "/"
        assert all(u.startswith(own) for u in first.manifest.uris())

        saved = env.keys_under(directory)
        assert len(saved) == savepoint.files + 1  # the copies and the manifest
        env.store.delete_many([u.removeprefix(env.store.root_uri + "/") for u in saved])
        assert not env.keys_under(directory)
        assert env.restored_state(first.manifest, job="job-b") == model.snapshot()
        run_batch([task_b], model, rng, 100)
        second = checkpoint([task_b], job_b, 2)
        assert env.restored_state(second.manifest, job="job-b") == model.snapshot()


class TestCorruption:
    @pytest.mark.parametrize("target", ["segment", "snapshot", "manifest"])
    def test_flipped_byte_is_reported_with_the_object_uri(
        self, env: TestingEnv, target: str
    ) -> None:
        clock, rng, model = TestingClock(), random.Random(6), TestingModel()
        task = env.task(1, clock=clock)
        timeline = env.timeline(1)
        run_batch([task], model, rng, 150)
        checkpoint([task], timeline, 1)
        materialize_all([task], clock)
        run_batch([task], model, rng, 150)
        stored = checkpoint([task], timeline, 2)
        task.close()
        timeline.close()
        assert env.restored_state(stored.manifest) == model.snapshot()

        states = [s for s in stored.manifest.buckets.values() if s.changelog and s.snapshot]
        if target == "segment":
            handle = states[0].changelog[-1]
            uri, offset = handle.uri, handle.offset + handle.length // 2
        elif target == "snapshot":
            assert states[0].snapshot is not None
            uri, offset = states[0].snapshot.uri, states[0].snapshot.size // 2
        else:
            uri, offset = stored.uri, 40
        env.flip_byte(uri, offset)

        with pytest.raises(CorruptFileError) as info:
            restart = env.timeline(2)
            assert restart.start.manifest is not None
            env.restored_state(restart.start.manifest)
        assert info.value.uri == uri
        assert uri in str(info.value)


class TestManifestWrite:
    def test_lost_response_to_a_retried_manifest_put_still_commits(self, env: TestingEnv) -> None:
        """The driver's store may let botocore retry; the first PUT of the manifest lands
        but its response is lost, so the retry finds the object: that is our manifest."""
        rng, model = random.Random(7), TestingModel()
        task = env.task(1, clock=TestingClock())
        timeline = env.timeline(1, resolver=env.retrying_resolver())
        run_batch([task], model, rng, 100)
        env.proxy.drop(method="PUT", path_contains="/checkpoints/", count=1, after_upstream=True)
        stored = checkpoint([task], timeline, 1)
        assert env.proxy.faults_injected() == {"drop": 1}
        assert read_manifest(env.resolver, stored.uri) == stored.manifest
        assert env.restored_state(stored.manifest) == model.snapshot()

    def test_a_different_manifest_already_there_still_fences(self, env: TestingEnv) -> None:
        rng, model = random.Random(8), TestingModel()
        task = env.task(1, clock=TestingClock())
        run_batch([task], model, rng, 50)
        states = task.checkpoint()
        env.timeline(1).commit(1, states)
        with pytest.raises(ManifestExistsError, match=r"chk-000000000001\.manifest"):
            env.timeline(2).commit(1, states)


class TestLostResponses:
    """A store whose client retries (botocore) sees its own landed PUT as 'exists'."""

    @pytest.mark.parametrize("path", [SEGMENTS, "/snapshots/"])
    def test_retried_put_that_landed_is_a_success(self, env: TestingEnv, path: str) -> None:
        rng, model = random.Random(9), TestingModel()
        settings = TaskSettings(
            writer=SMALL_SEGMENTS,
            uploader=replace(FAST_UPLOADER, max_hedges=0),  # no hedge may win instead
            materialization=FAKE_TIME_MATERIALIZATION,
        )
        task = env.task(1, settings=settings, resolver=env.retrying_resolver())
        timeline = env.timeline(1)
        run_batch([task], model, rng, 100)
        env.proxy.drop(method="PUT", path_contains=path, count=1, after_upstream=True)
        # self-contained: every bucket is snapshotted now, so snapshots are PUT too
        stored = checkpoint([task], timeline, 1, self_contained=path != SEGMENTS)
        assert env.proxy.faults_injected() == {"drop": 1}
        stats = task.uploader.stats()
        assert stats.failed == 0
        assert stats.own_writes_confirmed == (1 if path == SEGMENTS else 0)
        assert env.restored_state(stored.manifest) == model.snapshot()
