"""End to end on a real S3 server: executor tasks (StateTask, running the task core of
Spark's executors) and the driver's timeline (CheckpointTimeline) checkpoint keyed state
to SeaweedFS through a fault-injecting proxy, then fresh tasks restore it. Every
scenario compares restored state with a reference model the test keeps beside the real
state; the model takes a batch's changes only once its checkpoint is committed.

The S3 client makes one attempt per request (botocore retries off), so every injected
fault reaches the runtime's own retry and hedging policy. Faults target changelog
segment PUTs: those go through the hedging uploader; snapshots and manifests do not.
The lost-response tests instead use a client that retries by itself, as a driver or a
task configured with botocore retries would: its create-if-absent retry of a PUT that
landed must count as success, not as a name collision.
"""

from __future__ import annotations

import random
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace
from typing import Any

import pytest
from tests.support.testing_proxy import TestingFaultProxy
from tests.support.testing_s3server import TestingS3Server

from gic_runtime.changelog.retrying import RetryPolicy
from gic_runtime.changelog.uploader import UploaderSettings
from gic_runtime.changelog.writer import WriterSettings
from gic_runtime.checkpoint.catalog import list_checkpoints, read_manifest
from gic_runtime.checkpoint.manifest import Manifest, RestoreMode, StoredManifest
from gic_runtime.clock import Clock
from gic_runtime.coordination import TaskSettings
from gic_runtime.driver import CheckpointTimeline, RestoreRequest
from gic_runtime.errors import CorruptFileError, ManifestExistsError, UploadError
from gic_runtime.executor import StateTask
from gic_runtime.executor.core import TaskContext
from gic_runtime.handles import BucketState
from gic_runtime.layout import job_dir, savepoint_dir
from gic_runtime.materialization import MaterializationSettings
from gic_runtime.state.backend import KeyedStateBackend
from gic_runtime.state.keys import bucket_for
from gic_runtime.state.memory_store import InMemoryStore
from gic_runtime.storage.s3 import S3ObjectStore
from gic_runtime.storage.uri import StoreResolver
from gic_runtime.testing import TestingClock

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
    interval_s=MAT_INTERVAL, jitter=0.0, max_in_flight=NUM_BUCKETS, max_sections=10_000
)
"""Only the (fake) clock makes buckets due, and every due bucket of a task starts at once."""
WAIT = 60.0
SMALL_SEGMENTS = WriterSettings(preemptive_upload_bytes=8 * 1024)


@dataclass(frozen=True)
class Change:
    """One random state change: ``kind`` on ``key`` (``value``, ``user_key`` as needed)."""

    kind: str
    key: str
    value: int
    user_key: int
    padding: int

    def apply(self, backend: KeyedStateBackend) -> None:
        kind, key, value, user_key = self.kind, self.key, self.value, self.user_key
        if kind == "set":
            backend.value_state("v").set(key, [value, "x" * self.padding])
        elif kind == "clear":
            backend.value_state("v").clear(key)
        elif kind == "put":
            backend.map_state("m").put(key, user_key, value)
        elif kind == "remove":
            backend.map_state("m").remove(key, user_key)
        elif kind == "clear_map":
            backend.map_state("m").clear(key)
        elif kind == "append":
            backend.list_state("l").append(key, value)
        elif kind == "extend":
            backend.list_state("l").extend(key, [value, -value])
        else:
            backend.list_state("l").clear(key)


class TestingModel:
    """The state the tasks should hold, kept by plain dict operations."""

    __test__ = False

    def __init__(self) -> None:
        self.values: dict[str, Any] = {}
        self.maps: dict[str, dict[int, Any]] = {}
        self.lists: dict[str, list[Any]] = {}

    def apply(self, changes: Sequence[Change]) -> None:
        for c in changes:
            if c.kind == "set":
                self.values[c.key] = [c.value, "x" * c.padding]
            elif c.kind == "clear":
                self.values.pop(c.key, None)
            elif c.kind == "put":
                self.maps.setdefault(c.key, {})[c.user_key] = c.value
            elif c.kind == "remove":
                self.maps.get(c.key, {}).pop(c.user_key, None)
            elif c.kind == "clear_map":
                self.maps.pop(c.key, None)
            elif c.kind == "append":
                self.lists.setdefault(c.key, []).append(c.value)
            elif c.kind == "extend":
                self.lists.setdefault(c.key, []).extend([c.value, -c.value])
            else:
                self.lists.pop(c.key, None)

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
        task_index: int = 0,
        num_tasks: int = 1,
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
            task_index=task_index,
            num_tasks=num_tasks,
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
    return next(t for t in tasks if bucket in t.bucket_range)


_KINDS = [
    (0.30, "set"),
    (0.35, "clear"),
    (0.55, "put"),
    (0.60, "remove"),
    (0.62, "clear_map"),
    (0.85, "append"),
    (0.95, "extend"),
    (1.00, "clear_list"),
]


def random_changes(rng: random.Random, ops: int) -> list[Change]:
    """Random value/map/list changes of one batch."""
    out = []
    for _ in range(ops):
        key = f"k{rng.randrange(KEYS)}"
        value, draw, user_key = rng.randrange(10_000), rng.random(), rng.randrange(8)
        kind = next(k for limit, k in _KINDS if draw < limit)
        out.append(Change(kind, key, value, user_key, rng.randrange(64)))
    return out


def run(task: StateTask, changes: Sequence[Change], **kw: Any) -> dict[int, BucketState]:
    """One batch of ``task`` applying its share of ``changes`` (through the task core);
    returns the bucket states of its ack. Not committed."""
    mine = [c for c in changes if bucket_for(c.key, NUM_BUCKETS) in task.bucket_range]

    def apply(ctx: TaskContext) -> None:
        for change in mine:
            change.apply(ctx.backend)

    return dict(task.checkpoint(apply, **kw).states)


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
    changes: Sequence[Change],
    model: TestingModel,
    *,
    self_contained: bool = False,
) -> StoredManifest:
    """Every task's batch, the driver's commit, the completion notice; then the model
    takes the batch's changes."""
    states: dict[int, BucketState] = {}
    for task in tasks:
        states.update(
            run(task, changes, checkpoint_id=checkpoint_id, self_contained=self_contained)
        )
    stored, _wait = timeline.commit(checkpoint_id, states)
    for task in tasks:
        task.notify_checkpoint_complete(states)
    model.apply(changes)
    return stored


def wait_materialized(tasks: list[StateTask]) -> None:
    """Wait for the background materializations the last batch started (each task must
    have started some) and check none failed; the next batch adopts them."""
    for task in tasks:
        assert task.wait_materializations(WAIT), "materialization did not finish"
        stats = task.materialization_stats()
        assert stats.failed == 0 and stats.completed > 0, stats


def assert_files_exist(env: TestingEnv, timeline: CheckpointTimeline) -> None:
    for stored in timeline.retained():
        assert env.exists(stored.uri)
        missing = [u for u in stored.manifest.uris() if not env.exists(u)]
        assert not missing, f"checkpoint {stored.checkpoint_id} lost {missing}"


# --- scenarios -----------------------------------------------------------------------


class TestHappyPath:
    def test_checkpoints_materialize_and_restore(self, env: TestingEnv) -> None:
        clock, rng, model = TestingClock(), random.Random(1), TestingModel()
        tasks = [env.task(1, 0, 2, clock=clock), env.task(1, 1, 2, clock=clock)]
        timeline = env.timeline(1, retain=2)
        for cid in range(1, 9):
            if cid in (3, 6):
                clock.advance(MAT_INTERVAL * 2)  # every bucket due after this batch
            stored = checkpoint(tasks, timeline, cid, random_changes(rng, 250), model)
            if cid in (3, 6):
                wait_materialized(tasks)  # the next batch adopts the snapshots
        timeline.registry.drain()
        assert read_state(tasks) == model.snapshot()

        latest = timeline.latest()
        assert latest is not None and latest == stored
        assert [s.checkpoint_id for s in timeline.retained()] == [7, 8]
        assert [r.checkpoint_id for r in list_checkpoints(env.resolver, env.root, JOB)] == [7, 8]
        for state in latest.manifest.buckets.values():
            assert state.snapshot is not None  # materialized after batch 6
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
            materialization=MaterializationSettings(interval_s=0.3),
            checkpoint_timeout_s=60.0,
        )
        rng, model = random.Random(2), TestingModel()
        task = env.task(1, settings=settings)  # real clock: hedges and timeouts fire
        timeline = env.timeline(1)
        for cid in range(1, 13):
            stored = checkpoint([task], timeline, cid, random_changes(rng, 300), model)
        proxy.clear()
        wait_materialized([task])
        stored = checkpoint([task], timeline, 13, random_changes(rng, 50), model)
        assert task.materialization_stats().failed == 0

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
        checkpoint([task], timeline, 1, random_changes(rng, 200), model)

        env.proxy.slowdown(method="PUT", path_contains=SEGMENTS)
        with pytest.raises(UploadError) as info:
            checkpoint([task], timeline, 2, random_changes(rng, 200), model)
        message = str(info.value)
        assert "SlowDown" in message and "changelog segment" in message
        assert "3 attempt(s)" in message
        assert [r.checkpoint_id for r in list_checkpoints(env.resolver, env.root, JOB)] == [1]
        assert timeline.latest() is not None and timeline.latest().checkpoint_id == 1

        env.proxy.clear()  # the failed batch is rolled back (the model never took it)
        stored = checkpoint([task], timeline, 3, random_changes(rng, 100), model)
        assert task.uploader.stats().failed > 0
        assert read_state([task]) == model.snapshot()
        assert env.restored_state(stored.manifest) == model.snapshot()


class TestCrashRecovery:
    def test_sweep_deletes_uncommitted_uploads_and_keeps_the_checkpoint(
        self, env: TestingEnv
    ) -> None:
        clock, rng, model = TestingClock(), random.Random(4), TestingModel()
        task = env.task(1, clock=clock)
        timeline = env.timeline(1)
        committed = checkpoint([task], timeline, 1, random_changes(rng, 200), model)
        clock.advance(MAT_INTERVAL * 2)
        committed = checkpoint([task], timeline, 2, random_changes(rng, 200), model)
        at_commit = model.snapshot()
        wait_materialized([task])  # snapshots nobody commits: the lost batch adopts them
        # durable segments, but the manifest is never written
        lost = run(task, random_changes(rng, 200), checkpoint_id=3)
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
        stored = checkpoint([successor], recovered, 3, random_changes(rng, 100), model)
        assert env.restored_state(stored.manifest) == model.snapshot()


class TestNativeSavepoint:
    def test_server_side_copy_and_no_claim_restore(self, env: TestingEnv) -> None:
        clock, rng, model = TestingClock(), random.Random(5), TestingModel()
        task = env.task(1, job="job-a", clock=clock)
        timeline = env.timeline(1, job="job-a")
        checkpoint([task], timeline, 1, random_changes(rng, 100), model)
        clock.advance(MAT_INTERVAL * 2)  # first due times count from the first batch
        checkpoint([task], timeline, 2, random_changes(rng, 100), model)
        wait_materialized([task])
        source = checkpoint([task], timeline, 3, random_changes(rng, 200), model)
        assert all(s.snapshot is not None for s in source.manifest.buckets.values())
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
        first = checkpoint(
            [task_b],
            job_b,
            1,
            random_changes(rng, 150),
            model,
            self_contained=job_b.must_be_self_contained,
        )
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
        second = checkpoint([task_b], job_b, 2, random_changes(rng, 100), model)
        assert env.restored_state(second.manifest, job="job-b") == model.snapshot()


class TestCorruption:
    @pytest.mark.parametrize("target", ["segment", "snapshot", "manifest"])
    def test_flipped_byte_is_reported_with_the_object_uri(
        self, env: TestingEnv, target: str
    ) -> None:
        clock, rng, model = TestingClock(), random.Random(6), TestingModel()
        task = env.task(1, clock=clock)
        timeline = env.timeline(1)
        checkpoint([task], timeline, 1, random_changes(rng, 100), model)
        clock.advance(MAT_INTERVAL * 2)  # first due times count from the first batch
        checkpoint([task], timeline, 2, random_changes(rng, 50), model)
        wait_materialized([task])
        stored = checkpoint([task], timeline, 3, random_changes(rng, 150), model)
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
        env.proxy.drop(method="PUT", path_contains="/checkpoints/", count=1, after_upstream=True)
        stored = checkpoint([task], timeline, 1, random_changes(rng, 100), model)
        assert env.proxy.faults_injected() == {"drop": 1}
        assert read_manifest(env.resolver, stored.uri) == stored.manifest
        assert env.restored_state(stored.manifest) == model.snapshot()

    def test_a_different_manifest_already_there_still_fences(self, env: TestingEnv) -> None:
        rng = random.Random(8)
        task = env.task(1, clock=TestingClock())
        states = run(task, random_changes(rng, 50))
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
        env.proxy.drop(method="PUT", path_contains=path, count=1, after_upstream=True)
        # self-contained: every bucket is snapshotted now, so snapshots are PUT too
        stored = checkpoint(
            [task], timeline, 1, random_changes(rng, 100), model, self_contained=path != SEGMENTS
        )
        assert env.proxy.faults_injected() == {"drop": 1}
        stats = task.uploader.stats()
        assert stats.failed == 0
        assert stats.own_writes_confirmed == (1 if path == SEGMENTS else 0)
        assert env.restored_state(stored.manifest) == model.snapshot()
