"""Property test: random job timelines against a simple reference model.

Hypothesis drives a job through random sequences of state changes, checkpoints,
batches that fail or whose manifest is never written, time passing and background
materializations completing, savepoints (native and canonical), crashes (with and
without uploads of an unfinished checkpoint) followed by recovery and orphan sweep,
retention changes, and new jobs restored from savepoints or checkpoints in claim and
no-claim mode. The reference model is a plain dict per committed checkpoint.

Every batch runs through the task core Spark's executors run
(:class:`~gic_runtime.executor.state_task.StateTask` ->
:func:`~gic_runtime.executor.core.execute`): restore or reuse of the expected
lineage, adoption of background snapshots through the executor-local records, durable
changelog, due materializations started through the production scheduler. Time is a
:class:`~gic_runtime.testing.TestingClock` and background jobs run only when a rule says
so (:class:`~gic_runtime.testing.TestingManualExecutor`), so every interleaving is
reproducible. The executor-local directory survives crashes and job switches, as an
executor's does.

Pinned invariants (docs/architecture.md §15):

* I1 -- no file referenced by a retained checkpoint, a savepoint or a no-claim restore
  source is ever deleted (checked after every step);
* I3 -- restored state always equals the reference of the checkpoint restored from: at
  every job start, and every committed manifest restored from storage into a fresh
  store;
* I6 -- after the first checkpoint of a no-claim restore the manifest references nothing
  of the source, and deleting the source breaks nothing;
* I10 -- an orphan sweep leaves exactly the referenced objects in the job's directory.
"""

from __future__ import annotations

import copy
import shutil
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, event, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
)

from gic_runtime.checkpoint import RestoreMode, read_manifest
from gic_runtime.coordination import TaskSettings
from gic_runtime.driver import CheckpointTimeline, RestoreRequest
from gic_runtime.executor import StateTask
from gic_runtime.executor.core import TaskContext
from gic_runtime.handles import BucketState
from gic_runtime.layout import job_dir, manifest_uri, savepoint_dir
from gic_runtime.materialization import MaterializationSettings
from gic_runtime.savepoint.canonical import write_canonical_from_states
from gic_runtime.state.backend import KeyedStateBackend
from gic_runtime.state.memory_store import InMemoryStore
from gic_runtime.storage import LocalObjectStore, StoreResolver
from gic_runtime.testing import TestingClock, TestingManualExecutor
from gic_runtime.testing.changelog_fakes import TestingChangelogWriter

BUCKETS = 4
KEYS = st.integers(min_value=0, max_value=24)
CHANGE = st.tuples(st.sampled_from(["set", "del", "app"]), KEYS, st.integers(-(2**31), 2**31))
CHANGES = st.lists(CHANGE, min_size=1, max_size=12)
FEW_CHANGES = st.lists(CHANGE, min_size=1, max_size=4)
INTERVAL = 60.0

Ref = dict[str, dict[int, Any]]
Change = tuple[str, int, int]


class InjectedFailureError(RuntimeError):
    """A batch that fails on purpose, after applying its changes."""


def apply_to_ref(ref: Ref, changes: list[Change]) -> None:
    for op, key, val in changes:
        if op == "set":
            ref["value"][key] = val
        elif op == "del":
            ref["value"].pop(key, None)
        else:
            ref["list"].setdefault(key, []).append(val)


def batch(changes: list[Change], *, fail: bool = False) -> Any:
    """The task-core callback applying ``changes`` (then failing, with ``fail``)."""

    def apply(ctx: TaskContext) -> None:
        values = ctx.backend.value_state("v")
        lists = ctx.backend.list_state("l")
        for op, key, val in changes:
            if op == "set":
                values.set(key, val)
            elif op == "del":
                values.clear(key)
            else:
                lists.append(key, val)
        if fail:
            raise InjectedFailureError("injected failure inside a batch")

    return apply


def empty_ref() -> Ref:
    return {"value": {}, "list": {}}


@dataclass
class Savepoint:
    uri: str
    ref: Ref
    claimed: bool = False


@dataclass
class Job:
    job_id: str
    epoch: int
    restore: RestoreRequest | None
    task: StateTask
    executor: TestingManualExecutor
    timeline: CheckpointTimeline
    store: InMemoryStore
    committed: dict[int, Ref] = field(default_factory=dict)


class TimelineMachine(RuleBasedStateMachine):
    """One storage root; one running job at a time; the dict reference beside it."""

    @initialize(max_sections=st.sampled_from([1, 1, 3, 32]), max_in_flight=st.sampled_from([1, 2]))
    def setup(self, max_sections: int, max_in_flight: int) -> None:
        # max_sections=1: every changed bucket is growth-due after each checkpoint;
        # 32: only time makes buckets due within an example.
        self.materialization = MaterializationSettings(
            interval_s=INTERVAL, max_in_flight=max_in_flight, max_sections=max_sections
        )
        self.dir = Path(tempfile.mkdtemp(prefix="gic-prop-"))
        self.store = LocalObjectStore(self.dir)
        self.root = self.store.root_uri
        self.resolver = StoreResolver()
        self.resolver.register(self.store)
        self.clock = TestingClock()
        self.local_dir = self.dir / "executor-local"
        self.jobs = 0
        self.next_checkpoint = 1
        self.savepoints: list[Savepoint] = []
        self.savepoints_taken = 0
        self._checkpoint_refs: dict[str, Ref] = {}
        # Manifests that must stay fully readable: no-claim sources (docs/architecture.md I1).
        self.protected_sources: list[str] = []
        self.ref: Ref = empty_ref()
        self.job = self._start_job(restore=None, source_ref=empty_ref())

    def teardown(self) -> None:
        job = getattr(self, "job", None)
        if job is not None:
            job.task.close(wait=False)
            job.timeline.close()
        shutil.rmtree(self.dir, ignore_errors=True)

    # --- helpers -----------------------------------------------------------------------

    def _new_task(
        self, job_id: str, epoch: int, store: InMemoryStore, executor: TestingManualExecutor
    ) -> StateTask:
        return StateTask(
            root=self.root,
            job_id=job_id,
            epoch=epoch,
            num_buckets=BUCKETS,
            store=store,
            resolver=self.resolver,
            local_dir=self.local_dir,
            clock=self.clock,
            materialization_executor=executor,
            settings=TaskSettings(materialization=self.materialization),
        )

    def _start_job(
        self,
        *,
        restore: RestoreRequest | None,
        source_ref: Ref,
        job_id: str | None = None,
        epoch: int = 1,
        store: InMemoryStore | None = None,
        committed: dict[int, Ref] | None = None,
    ) -> Job:
        if job_id is None:
            self.jobs += 1
            job_id = f"job-{self.jobs}"
        timeline = CheckpointTimeline(
            self.resolver,
            self.root,
            job_id,
            epoch=epoch,
            num_buckets=BUCKETS,
            retain=2,
            restore=restore,
            clock=self.clock,
        )
        store = store or InMemoryStore()
        executor = TestingManualExecutor()
        task = self._new_task(job_id, epoch, store, executor)
        start = timeline.start
        if start.canonical_uri is not None:
            task.restore_canonical(start.canonical_uri)
        else:
            task.restore(start.manifest)
        job = Job(job_id, epoch, restore, task, executor, timeline, store, committed or {})
        if start.own:
            assert start.checkpoint_id is not None
            self.ref = copy.deepcopy(job.committed[start.checkpoint_id])
        else:
            self.ref = copy.deepcopy(source_ref)
        self._assert_state_equals_ref(job)
        return job

    def _assert_state_equals_ref(self, job: Job) -> None:
        self._assert_backend_equals_ref(job.task.backend)

    def _assert_backend_equals_ref(self, backend: KeyedStateBackend) -> None:
        values = backend.value_state("v")
        lists = backend.list_state("l")
        for key in range(25):
            assert values.get(key) == self.ref["value"].get(key), f"value of key {key}"
            assert lists.get(key) == self.ref["list"].get(key, []), f"list of key {key}"

    def _assert_restores_to_ref(self, states: Mapping[int, BucketState]) -> None:
        """The states, restored from storage alone into a fresh store, equal the model."""
        fresh = KeyedStateBackend(
            range(BUCKETS), BUCKETS, InMemoryStore(), TestingChangelogWriter()
        )
        summary = fresh.restore(states, self.resolver)
        assert not summary.local_hits
        self._assert_backend_equals_ref(fresh)

    def _checkpoint(self, changes: list[Change]) -> int:
        """A batch applying ``changes``, committed: manifest, completion, model."""
        job = self.job
        cid = self.next_checkpoint
        self.next_checkpoint += 1
        ack = job.task.checkpoint(
            batch(changes),
            checkpoint_id=cid,
            self_contained=job.timeline.must_be_self_contained,
        )
        apply_to_ref(self.ref, changes)
        event(f"checkpoint adopted background snapshots: {ack.stats.materializations_adopted > 0}")
        event(f"checkpoint started materializations: {ack.stats.materializations_started > 0}")
        _stored, wait = job.timeline.commit(cid, ack.states, engine={"offsets": cid})
        job.task.notify_checkpoint_complete(ack.states)
        wait()
        job.committed[cid] = copy.deepcopy(self.ref)
        self._assert_state_equals_ref(job)
        self._assert_restores_to_ref(ack.states)
        lineage = job.timeline.lineage
        if lineage is not None and lineage.mode is RestoreMode.NO_CLAIM:
            assert lineage.released, "first checkpoint after a no-claim restore not released"
        return cid

    def _abandoned_checkpoint(self, changes: list[Change]) -> None:
        """A batch made durable whose manifest is never written: its changes are lost,
        and the next batch starts from the last committed checkpoint (same attempt)."""
        self.job.task.checkpoint(batch(changes), checkpoint_id=self.next_checkpoint)

    def _uris_exist(self, uris: frozenset[str]) -> None:
        for uri in uris:
            store, key = self.resolver.resolve(uri)
            assert store.exists(key), f"referenced object was deleted: {uri}"

    # --- rules -------------------------------------------------------------------------

    @rule(changes=CHANGES)
    def checkpoint(self, changes: list[Change]) -> None:
        self._checkpoint(changes)

    @rule(changes=FEW_CHANGES, finish=st.booleans())
    def checkpoint_never_committed(self, changes: list[Change], finish: bool) -> None:
        """With ``finish``, the background materializations it started (of a lineage
        nobody continues) finish right away."""
        self._abandoned_checkpoint(changes)
        if finish:
            self.job.executor.run_all()

    @rule(changes=CHANGES)
    def failed_batch(self, changes: list[Change]) -> None:
        try:
            self.job.task.checkpoint(batch(changes, fail=True))
        except InjectedFailureError:
            pass
        else:  # pragma: no cover - the callback always raises
            raise AssertionError("a failing batch did not fail")

    @rule(intervals=st.sampled_from([0.25, 0.5, 1.0, 1.5, 4.0]), finish=st.booleans())
    def time_passes(self, intervals: float, finish: bool) -> None:
        """Time passes; with ``finish`` every background materialization ends meanwhile."""
        self.clock.advance(INTERVAL * intervals)
        if finish:
            self.job.executor.run_all()

    @rule(jobs=st.sampled_from([1, 2]))
    def background_jobs_run(self, jobs: int) -> None:
        """The oldest ``jobs`` background materializations finish (write their snapshots
        and records)."""
        for _ in range(jobs):
            self.job.executor.run_next()

    @rule(retain=st.integers(min_value=1, max_value=3))
    def change_retention(self, retain: int) -> None:
        self.job.timeline.set_retention(retain)

    @precondition(lambda self: self.job.timeline.latest() is not None)
    @rule(canonical=st.booleans())
    def savepoint(self, canonical: bool) -> None:
        job = self.job
        latest = job.timeline.latest()
        assert latest is not None
        self.savepoints_taken += 1
        directory = savepoint_dir(self.root, f"sp-{self.savepoints_taken}")
        if canonical:
            write_canonical_from_states(latest.manifest.buckets, BUCKETS, directory, self.resolver)
        else:
            job.timeline.native_savepoint(directory)
        ref = job.committed[latest.checkpoint_id]
        self.savepoints.append(Savepoint(directory, copy.deepcopy(ref)))

    @rule(upload_first=st.booleans(), reuse_store=st.booleans(), changes=CHANGES)
    def crash_and_recover(
        self, upload_first: bool, reuse_store: bool, changes: list[Change]
    ) -> None:
        job = self.job
        if upload_first:
            # Uploads of a checkpoint whose manifest is never written: future orphans.
            self._abandoned_checkpoint(changes)
        job.task.close(wait=False)
        job.timeline.close()
        self.job = self._start_job(
            restore=job.restore,
            # A job with a committed checkpoint resumes its own timeline.
            source_ref=empty_ref() if job.committed else self._source_ref(job),
            job_id=job.job_id,
            epoch=job.epoch + 1,
            store=job.store if reuse_store else None,
            committed=job.committed,
        )
        result = self.job.timeline.sweep()
        self._assert_no_orphans(self.job)
        assert result.deleted == result.orphaned

    @precondition(lambda self: any(not sp.claimed for sp in self.savepoints))
    @rule(data=st.data(), claim=st.booleans())
    def restore_from_savepoint(self, data: st.DataObject, claim: bool) -> None:
        candidates = [sp for sp in self.savepoints if not sp.claimed]
        if claim:
            # Claiming consumes a savepoint: only one no protected source still needs
            # (docs/operations.md §4: a no-claim restore must have released it first).
            claimable = [sp for sp in candidates if not self._still_needed(sp)]
            claim = bool(claimable)
            candidates = claimable or candidates
        sp = data.draw(st.sampled_from(candidates))
        mode = RestoreMode.CLAIM if claim else RestoreMode.NO_CLAIM
        self._switch_job(RestoreRequest(sp.uri, mode), sp.ref)
        if claim:
            sp.claimed = True  # the new job owns its files from now on
        elif self.job.timeline.start.manifest is not None:
            self.protected_sources.append(self.job.timeline.lineage.source_uri)  # type: ignore[union-attr]

    @precondition(lambda self: self.job.timeline.latest() is not None)
    @rule()
    def restore_from_retained_checkpoint_no_claim(self) -> None:
        latest = self.job.timeline.latest()
        assert latest is not None
        ref = self.job.committed[latest.checkpoint_id]
        self._switch_job(RestoreRequest(latest.uri, RestoreMode.NO_CLAIM), ref)
        self.protected_sources.append(latest.uri)

    @precondition(
        lambda self: (
            self.job.timeline.lineage is not None
            and self.job.timeline.lineage.released
            and self.job.timeline.lineage.mode is RestoreMode.NO_CLAIM
            and any(sp.uri in self.job.timeline.lineage.source_uri for sp in self.savepoints)
        )
    )
    @rule()
    def delete_released_no_claim_savepoint(self) -> None:
        lineage = self.job.timeline.lineage
        assert lineage is not None
        sp = next(sp for sp in self.savepoints if sp.uri in lineage.source_uri)
        store, key = self.resolver.resolve(sp.uri)
        store.delete_many([info.key for info in store.list(key + "/")])
        self.savepoints.remove(sp)
        self.protected_sources = [u for u in self.protected_sources if sp.uri not in u]

    # --- invariants ----------------------------------------------------------------------

    @invariant()
    def referenced_files_exist(self) -> None:
        job = getattr(self, "job", None)
        if job is None:
            return
        job.timeline.registry.drain()
        for stored in job.timeline.retained():
            self._uris_exist(stored.manifest.uris())
        for sp in self.savepoints:
            if not sp.claimed and not sp.uri.endswith("/"):
                store, key = self.resolver.resolve(sp.uri)
                names = {info.key.rsplit("/", 1)[-1] for info in store.list(key + "/")}
                assert names & {"_savepoint.manifest", "_canonical.json"}, sp.uri
                if "_savepoint.manifest" in names:
                    manifest = read_manifest(self.resolver, f"{sp.uri}/_savepoint.manifest")
                    self._uris_exist(manifest.uris())
        for uri in self.protected_sources:
            self._uris_exist(read_manifest(self.resolver, uri).uris())

    # --- more helpers ------------------------------------------------------------------

    def _still_needed(self, sp: Savepoint) -> bool:
        """Whether a protected source references files of ``sp``."""
        inside = sp.uri.rstrip("/") + "/"
        return any(
            uri.startswith(inside)
            for source in self.protected_sources
            for uri in read_manifest(self.resolver, source).uris()
        )

    def _source_ref(self, job: Job) -> Ref:
        if job.restore is None:
            return empty_ref()
        for sp in self.savepoints:
            if job.restore.source.startswith(sp.uri):
                return sp.ref
        return self._checkpoint_refs[job.restore.source]

    def _switch_job(self, request: RestoreRequest, source_ref: Ref) -> None:
        old = self.job
        old.task.close()
        old.timeline.close()
        for cid, ref in old.committed.items():
            self._checkpoint_refs[manifest_uri(self.root, old.job_id, cid)] = ref
        self.job = self._start_job(restore=request, source_ref=source_ref)
        # The first checkpoint of the new job: self-contained when no-claim.
        self._checkpoint([])
        lineage = self.job.timeline.lineage
        latest = self.job.timeline.latest()
        assert lineage is not None and latest is not None
        if request.mode is RestoreMode.NO_CLAIM:
            assert lineage.released
            assert not self.job.timeline.policy.source_references(latest.manifest)

    def _assert_no_orphans(self, job: Job) -> None:
        referenced: set[str] = set()
        for stored in job.timeline.retained():
            referenced |= stored.manifest.uris()
            referenced.add(stored.uri)
        prefix = job_dir(self.root, job.job_id) + "/"
        store, key = self.resolver.resolve(prefix)
        present = {store.uri_for(info.key) for info in store.list(key)}
        swept = {
            u for u in present if "/changelog/" in u or "/snapshots/" in u or "/checkpoints/" in u
        }
        assert swept == {u for u in referenced if u.startswith(prefix)}


TimelineMachine.TestCase.settings = settings(
    max_examples=300,
    stateful_step_count=30,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
test_random_timelines_keep_the_invariants = TimelineMachine.TestCase
