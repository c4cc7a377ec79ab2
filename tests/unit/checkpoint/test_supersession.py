"""Superseded manifests: a driver's manifest that lands after a newer launch claimed the
job never counts, whatever order the writes land in.

* the selection rule on its own (``superseding_claim``);
* the claim protocol: start records, starts recorded for unfinished claims, retries;
* the real code (``claim_epoch``, ``CheckpointTimeline``, ``sweep``, the catalog) run by
  several drivers as threads whose every storage request is a scheduling point chosen
  by hypothesis: any interleaving of claims, sweeps and manifest writes. Afterwards the
  restore point is complete, never a manifest that landed after a claim above its
  epoch recorded its start, and the newest unfenced driver's last checkpoint.
"""

from __future__ import annotations

import tempfile
import threading
import uuid
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tests.support.stores import DelegatingStore, StorageRoot, storage_root

from gic_runtime.checkpoint.catalog import (
    find_latest_checkpoint,
    list_checkpoints,
    load_retained,
    read_manifest,
    write_manifest,
)
from gic_runtime.checkpoint.claims import (
    NO_CHECKPOINT,
    Claims,
    EpochStart,
    read_start,
    superseding_claim,
)
from gic_runtime.checkpoint.live_sweep import LiveSweeper
from gic_runtime.checkpoint.manifest import Manifest
from gic_runtime.checkpoint.ownership import OwnershipPolicy
from gic_runtime.checkpoint.sweep import sweep_orphans
from gic_runtime.driver.timeline import CheckpointTimeline
from gic_runtime.errors import (
    CorruptFileError,
    FencedError,
    ManifestExistsError,
)
from gic_runtime.fencing import EpochMarker, Fence, claim_epoch
from gic_runtime.formats import crc32c
from gic_runtime.handles import BucketState, ChangelogHandle
from gic_runtime.layout import (
    alternate_manifest_uri,
    epoch_marker_uri,
    epoch_start_uri,
    job_dir,
    manifest_uri,
)
from gic_runtime.storage.local import LocalObjectStore
from gic_runtime.storage.object_store import ObjectInfo, ObjectStore
from gic_runtime.storage.uri import join
from gic_runtime.testing import TestingClock

JOB = "job-z"


# --- the rule ------------------------------------------------------------------------------


def test_rule_a_claim_above_that_started_lower_supersedes() -> None:
    starts = {2: 5, 4: 9, 6: 12}
    assert superseding_claim(1, 5, starts) is None  # present when epoch 2 listed
    assert superseding_claim(1, 6, starts) == 2  # landed after epoch 2 listed
    assert superseding_claim(2, 9, starts) is None
    assert superseding_claim(2, 10, starts) == 4
    assert superseding_claim(3, 13, starts) == 4  # the lowest superseding claim is named
    assert superseding_claim(4, 12, starts) is None
    assert superseding_claim(6, 100, starts) is None  # nothing above: the newest launch
    assert superseding_claim(1, 0, {2: NO_CHECKPOINT}) == 2


@given(
    st.dictionaries(st.integers(1, 12), st.integers(-1, 30)),
    st.integers(0, 12),
    st.integers(0, 30),
)
def test_rule_matches_its_definition(starts: dict[int, int], epoch: int, n: int) -> None:
    above = sorted(e for e, s in starts.items() if e > epoch and n > s)
    assert superseding_claim(epoch, n, starts) == (above[0] if above else None)


# --- storage helpers -------------------------------------------------------------------------


@pytest.fixture
def env(local_store: LocalObjectStore) -> StorageRoot:
    return storage_root(local_store)


def segment(env: StorageRoot, epoch: int, n: int) -> ChangelogHandle:
    """Upload a one-section segment for checkpoint ``n`` of ``epoch``."""
    uri = join(job_dir(env.root, JOB), "changelog", str(epoch), f"{uuid.uuid4().hex}.seg")
    store, key = env.resolver.resolve(uri)
    data = f"epoch {epoch} checkpoint {n}".encode().ljust(24, b".")
    store.put(key, data, if_absent=True)
    return ChangelogHandle(uri, 8, 16, 0, n, n + 1, crc32c(data[8:]))


def chain(handles: Iterable[ChangelogHandle]) -> dict[int, BucketState]:
    hs = tuple(handles)
    token = hs[-1].uri if hs else ""
    return {0: BucketState(0, len(hs), None, hs, token)}


def handles_of(manifest: Manifest | None) -> tuple[ChangelogHandle, ...]:
    return () if manifest is None else manifest.buckets[0].changelog


def complete(env: StorageRoot, manifest: Manifest) -> bool:
    for uri in manifest.uris():
        store, key = env.resolver.resolve(uri)
        if not store.exists(key):
            return False
    return True


def plain_manifest(n: int, epoch: int, handles: tuple[ChangelogHandle, ...]) -> Manifest:
    return Manifest(
        job_id=JOB,
        checkpoint_id=n,
        epoch=epoch,
        created_at=1.0,
        num_buckets=1,
        buckets=chain(handles),
    )


# --- the claim protocol ------------------------------------------------------------------


def test_a_claim_records_the_newest_counting_checkpoint(env: StorageRoot) -> None:
    assert claim_epoch(env.resolver, env.root, JOB, claimed_by="d1") == 1
    assert read_start(env.resolver, env.root, JOB, 1).start_checkpoint == NO_CHECKPOINT
    handles: tuple[ChangelogHandle, ...] = ()
    for n in range(3):
        handles += (segment(env, 1, n),)
        write_manifest(env.resolver, manifest_uri(env.root, JOB, n), plain_manifest(n, 1, handles))
    assert claim_epoch(env.resolver, env.root, JOB, claimed_by="d2") == 2
    start = read_start(env.resolver, env.root, JOB, 2)
    assert (start.start_checkpoint, start.recorded_by) == (2, "d2")
    # The zombie of epoch 1 lands checkpoint 3 now: it does not count.
    handles += (segment(env, 1, 3),)
    write_manifest(env.resolver, manifest_uri(env.root, JOB, 3), plain_manifest(3, 1, handles))
    assert [s.checkpoint_id for s in load_retained(env.resolver, env.root, JOB)] == [0, 1, 2]
    latest = find_latest_checkpoint(env.resolver, env.root, JOB)
    assert latest is not None and latest.stored.checkpoint_id == 2
    assert [r.checkpoint_id for r in list_checkpoints(env.resolver, env.root, JOB)] == [0, 1, 2, 3]
    # The next claim starts from 2 as well, and epoch 2's own checkpoints count.
    assert claim_epoch(env.resolver, env.root, JOB, claimed_by="d3") == 3
    assert read_start(env.resolver, env.root, JOB, 3).start_checkpoint == 2


def test_a_lower_claim_without_start_gets_one_from_the_next_claimer(env: StorageRoot) -> None:
    # Epoch 1's claimer created its marker and died before recording its start.
    store, key = env.resolver.resolve(epoch_marker_uri(env.root, JOB, 1))
    store.put(key, EpochMarker(1, 1.0, "dead").encode(), if_absent=True)
    handles = (segment(env, 0, 0),)
    write_manifest(env.resolver, manifest_uri(env.root, JOB, 0), plain_manifest(0, 0, handles))
    assert claim_epoch(env.resolver, env.root, JOB, claimed_by="d2") == 2
    one, two = (read_start(env.resolver, env.root, JOB, e) for e in (1, 2))
    assert (one.start_checkpoint, two.start_checkpoint) == (0, 0)
    assert one.recorded_by.startswith("d2") and two.recorded_by == "d2"
    # Epoch 1's claimer wakes up and retries: its start stays the one recorded for it.
    with pytest.raises(FencedError):
        claim_epoch(env.resolver, env.root, JOB, epoch=1, claimed_by="dead")
    assert read_start(env.resolver, env.root, JOB, 1) == one


def test_a_slow_lower_claimer_wins_or_loses_its_record_consistently(env: StorageRoot) -> None:
    """Epoch 2's claimer finds epoch 1 without a start record and is about to record
    one for it when epoch 1's own claimer records first: epoch 2 lists again, so its
    start is computed knowing epoch 1's."""
    claim_epoch(env.resolver, env.root, JOB, epoch=1, claimed_by="d1")
    store, key = env.resolver.resolve(epoch_start_uri(env.root, JOB, 1))
    own = store.get(key)
    store.delete_many([key])  # as if epoch 1's claimer had not recorded yet
    handles = (segment(env, 0, 0),)
    write_manifest(env.resolver, manifest_uri(env.root, JOB, 0), plain_manifest(0, 0, handles))
    late = (*handles, segment(env, 0, 1))

    def slow_claimer_records(key_put: str) -> None:
        if key_put.endswith("epoch-000000000001.start") and not store.exists(key):
            store.put(key, own, if_absent=True)  # epoch 1 records S = -1 first
            write_manifest(  # and epoch 0's zombie lands checkpoint 1 after that
                env.resolver, manifest_uri(env.root, JOB, 1), plain_manifest(1, 0, late)
            )

    hooked = storage_root(HookedStore(env.store, on_put=slow_claimer_records))
    assert claim_epoch(hooked.resolver, hooked.root, JOB, claimed_by="d2") == 2
    assert read_start(env.resolver, env.root, JOB, 1).start_checkpoint == NO_CHECKPOINT
    # Under epoch 1's record both manifests of epoch 0 are superseded; epoch 2 knew it.
    assert read_start(env.resolver, env.root, JOB, 2).start_checkpoint == NO_CHECKPOINT
    assert find_latest_checkpoint(env.resolver, env.root, JOB) is None


def test_racing_auto_claims_all_succeed_and_record_their_starts(env: StorageRoot) -> None:
    higher = {"done": False}

    def hook() -> None:  # a launch with epoch 5 appears right after epoch 1's marker
        if not higher["done"] and len(Claims(env.resolver, env.root, JOB).markers) == 1:
            higher["done"] = True
            claim_epoch(env.resolver, env.root, JOB, epoch=5, claimed_by="d5")

    hooked = storage_root(HookedStore(env.store, on_list=hook))
    assert claim_epoch(hooked.resolver, hooked.root, JOB, claimed_by="auto") == 1
    claims = Claims(env.resolver, env.root, JOB)
    assert claims.recorded == claims.markers == {1, 5}
    assert not claims.pending


def test_a_retried_given_claim_keeps_its_start(env: StorageRoot) -> None:
    assert claim_epoch(env.resolver, env.root, JOB, epoch=3, claimed_by="pod-3") == 3
    assert claim_epoch(env.resolver, env.root, JOB, epoch=3, claimed_by="pod-3") == 3
    assert read_start(env.resolver, env.root, JOB, 3).recorded_by == "pod-3"


def test_start_records_are_checked(env: StorageRoot) -> None:
    claim_epoch(env.resolver, env.root, JOB, claimed_by="d1")
    uri = epoch_start_uri(env.root, JOB, 1)
    store, key = env.resolver.resolve(uri)
    good = store.get(key)
    assert EpochStart.decode(good, uri).epoch == 1
    store.put(key, good[:-2])
    with pytest.raises(CorruptFileError, match="checksum"):
        read_start(env.resolver, env.root, JOB, 1)
    other = epoch_start_uri(env.root, JOB, 2)
    with pytest.raises(CorruptFileError, match="holds epoch 1"):
        EpochStart.decode(good, other)


def test_a_manifest_landing_between_marker_and_listing_counts_and_its_writer_stops(
    env: StorageRoot,
) -> None:
    """The one window a check cannot close: epoch 1 passed its check, then epoch 2's
    marker appears, then epoch 1's manifest lands, then epoch 2 lists the checkpoints.
    Epoch 2 starts from that manifest (it is complete), and its writer is stopped by
    the check after the write, before registering (so subsuming) anything for it."""
    claim_epoch(env.resolver, env.root, JOB, epoch=1, claimed_by="d1")

    def marker_first(key: str) -> None:
        if key.endswith("chk-000000000001.manifest"):
            store, mkey = env.resolver.resolve(epoch_marker_uri(env.root, JOB, 2))
            store.put(mkey, EpochMarker(2, 1.0, "d2").encode(), if_absent=True)

    hooked = storage_root(HookedStore(env.store, on_put=marker_first))
    zombie = CheckpointTimeline(hooked.resolver, hooked.root, JOB, epoch=1, num_buckets=1, retain=1)
    first = (segment(env, 1, 0),)
    zombie.commit(0, chain(first))
    with pytest.raises(FencedError, match="superseded by epoch 2"):
        zombie.commit(1, chain((*first, segment(env, 1, 1))))
    assert [s.checkpoint_id for s in zombie.retained()] == [0]  # nothing subsumed
    # Epoch 2's claimer goes on: it lists the checkpoints and starts from 1.
    assert claim_epoch(env.resolver, env.root, JOB, epoch=2, claimed_by="d2") == 2
    assert read_start(env.resolver, env.root, JOB, 2).start_checkpoint == 1
    latest = find_latest_checkpoint(env.resolver, env.root, JOB)
    assert latest is not None and latest.stored.checkpoint_id == 1
    assert complete(env, latest.stored.manifest)
    zombie.close()


def test_a_fence_check_started_during_the_batch_stands_for_the_one_before_the_write(
    env: StorageRoot,
) -> None:
    """``commit(fence_checked=...)`` awaits a check started earlier (the driver starts it
    beside the batch's stage) instead of listing the epochs again: one LIST per commit
    on the critical path, the one after the write. A driver superseded after that check
    passed writes its manifest, which does not count, and stops before registering it;
    one superseded before the check writes nothing."""
    claim_epoch(env.resolver, env.root, JOB, epoch=1, claimed_by="d1")
    listed_by: list[str] = []

    def count_lists() -> None:
        listed_by.append(threading.current_thread().name)

    hooked = storage_root(HookedStore(env.store, on_list=count_lists))
    timeline = CheckpointTimeline(
        hooked.resolver, hooked.root, JOB, epoch=1, num_buckets=1, retain=1
    )
    first = (segment(env, 1, 0),)
    checked = timeline.fence.check_in_background()
    checked.result()
    listed_by.clear()
    timeline.commit(0, chain(first), fence_checked=checked)
    assert listed_by == [threading.current_thread().name]  # only the check after the write

    checked = timeline.fence.check_in_background()
    checked.result()  # passed; then a newer launch claims the job
    claim_epoch(env.resolver, env.root, JOB, epoch=2, claimed_by="d2")
    with pytest.raises(FencedError, match="superseded by epoch 2"):
        timeline.commit(1, chain((*first, segment(env, 1, 1))), fence_checked=checked)
    assert exists(env, manifest_uri(env.root, JOB, 1))  # landed, but does not count
    latest = find_latest_checkpoint(env.resolver, env.root, JOB)
    assert latest is not None and latest.stored.checkpoint_id == 0
    assert [s.checkpoint_id for s in timeline.retained()] == [0]

    late = timeline.fence.check_in_background()  # started after the claim: fails
    with pytest.raises(FencedError, match="superseded by epoch 2"):
        timeline.commit(2, chain((*first, segment(env, 1, 2))), fence_checked=late)
    assert not exists(env, manifest_uri(env.root, JOB, 2))
    timeline.close()


def test_the_sweep_keeps_a_superseded_manifest_file_and_deletes_what_only_it_references(
    env: StorageRoot,
) -> None:
    claim_epoch(env.resolver, env.root, JOB, claimed_by="d1")
    old = CheckpointTimeline(env.resolver, env.root, JOB, epoch=1, num_buckets=1, retain=2)
    handles = (segment(env, 1, 0),)
    old.commit(0, chain(handles))
    claim_epoch(env.resolver, env.root, JOB, claimed_by="d2")
    own = segment(env, 1, 1)
    late = manifest_uri(env.root, JOB, 1)
    write_manifest(env.resolver, late, plain_manifest(1, 1, (*handles, own)))
    new = CheckpointTimeline(env.resolver, env.root, JOB, epoch=2, num_buckets=1, retain=2)
    assert new.start.checkpoint_id == 0
    result = new.sweep()
    assert (result.deleted, result.superseded) == (1, 1)  # its own segment; the file stays
    assert complete(env, read_manifest(env.resolver, manifest_uri(env.root, JOB, 0)))
    assert env.store.exists(late[len(env.root) + 1 :])
    assert not env.store.exists(own.uri[len(env.root) + 1 :])
    # The new driver writes checkpoint 1 under its alternate name; that one counts.
    stored, _ = new.commit(1, chain((*handles, segment(env, 2, 1))))
    assert stored.uri == alternate_manifest_uri(env.root, JOB, 1, 2)
    latest = find_latest_checkpoint(env.resolver, env.root, JOB)
    assert latest is not None and latest.stored.uri == stored.uri
    # Once the retained checkpoints moved past it, the superseded file goes too.
    new.commit(2, chain((*handles, segment(env, 2, 2))))
    new.commit(3, chain((*handles, segment(env, 2, 3))))
    new.registry.drain()
    assert new.sweep().deleted >= 1
    assert not env.store.exists(late[len(env.root) + 1 :])
    old.close()
    new.close()


def test_a_name_held_by_a_superseded_manifest_is_written_under_the_alternate_name(
    env: StorageRoot,
) -> None:
    claim_epoch(env.resolver, env.root, JOB, claimed_by="d1")
    claim_epoch(env.resolver, env.root, JOB, claimed_by="d2")
    zombie = (segment(env, 1, 0),)
    write_manifest(env.resolver, manifest_uri(env.root, JOB, 0), plain_manifest(0, 1, zombie))
    new = CheckpointTimeline(env.resolver, env.root, JOB, epoch=2, num_buckets=1)
    assert new.start.checkpoint_id is None
    stored, _ = new.commit(0, chain((segment(env, 2, 0),)))
    assert stored.uri == alternate_manifest_uri(env.root, JOB, 0, 2)
    assert [s.uri for s in load_retained(env.resolver, env.root, JOB)] == [stored.uri]
    # A manifest that counts is never written over, under either name.
    with pytest.raises(ManifestExistsError):
        new.commit(0, chain((segment(env, 2, 0),)))
    new.close()
    # A restart starts from it.
    restart = CheckpointTimeline(env.resolver, env.root, JOB, epoch=3, num_buckets=1)
    assert restart.start.manifest is not None and restart.start.manifest.epoch == 2
    restart.close()


def test_an_alternate_name_must_match_the_epoch_inside(env: StorageRoot) -> None:
    uri = alternate_manifest_uri(env.root, JOB, 4, 7)
    write_manifest(env.resolver, uri, plain_manifest(4, 6, (segment(env, 6, 4),)))
    with pytest.raises(CorruptFileError, match="named for epoch 7 but was written by epoch 6"):
        read_manifest(env.resolver, uri)


def test_a_sweep_stops_when_a_newer_launch_claims_the_job(env: StorageRoot) -> None:
    """A sweeper that lists, is paused while a newer launch claims the job and uploads,
    and then resumes deletes nothing: the check before each deletion batch sees the
    newer claim, and everything it would delete was listed before that check."""
    assert claim_epoch(env.resolver, env.root, JOB, claimed_by="d1") == 1
    orphans = [segment(env, 1, n).uri for n in range(3)]
    newer: list[str] = []

    def newer_launch() -> None:  # runs right after the sweeper's listing of changelog/
        if not newer:
            claim_epoch(env.resolver, env.root, JOB, claimed_by="d2")
            newer.append(segment(env, 2, 0).uri)

    def on_list_changelog() -> None:
        if hooked_store.listing.endswith("changelog/"):
            newer_launch()

    hooked_store = ListingHook(env.store, on_list_changelog)
    hooked = storage_root(hooked_store)
    with pytest.raises(FencedError, match="epoch 2 claimed the job while it ran"):
        sweep_orphans(hooked.resolver, hooked.root, JOB, [], epoch=1)
    assert all(exists(env, uri) for uri in [*orphans, *newer])
    # Without a caller's epoch the sweep runs for the highest epoch at its start.
    assert sweep_orphans(env.resolver, env.root, JOB, []).deleted == 4


def test_a_live_sweep_deletes_only_its_own_epochs_segments(env: StorageRoot) -> None:
    older = segment(env, 1, 0).uri
    own = segment(env, 2, 0).uri
    sweeper = LiveSweeper(env.resolver, env.root, JOB, interval_s=1.0, epoch=2)
    result = sweeper.sweep((), OwnershipPolicy.for_job(env.root, JOB))
    assert (result.deleted, result.deferred) == (1, 1)
    assert exists(env, older) and not exists(env, own)


def exists(env: StorageRoot, uri: str) -> bool:
    store, key = env.resolver.resolve(uri)
    return store.exists(key)


class ListingHook:
    """Runs ``hook`` after each LIST was answered; ``listing`` is the prefix listed."""

    def __init__(self, inner: ObjectStore, hook: Callable[[], None]) -> None:
        self._inner = inner
        self._hook = hook
        self.listing = ""

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    @property
    def root_uri(self) -> str:
        return self._inner.root_uri

    def list(self, prefix: str = "") -> Iterator[ObjectInfo]:
        answer = list(self._inner.list(prefix))
        self.listing = prefix
        self._hook()
        return iter(answer)


class HookedStore(DelegatingStore):
    """Passes everything to ``inner``; runs ``on_list`` after a LIST was answered (before
    the caller sees it) and ``on_put(key)`` before a PUT: where another party's request
    can land in between."""

    def __init__(
        self,
        inner: ObjectStore,
        *,
        on_list: Callable[[], None] | None = None,
        on_put: Callable[[str], None] | None = None,
    ) -> None:
        super().__init__(inner)
        self._on_list = on_list
        self._on_put = on_put

    def put(self, key: str, data: bytes, *, if_absent: bool = False) -> None:
        if self._on_put is not None:
            self._on_put(key)
        super().put(key, data, if_absent=if_absent)

    def list(self, prefix: str = "") -> Iterator[ObjectInfo]:
        answer = list(self.inner.list(prefix))
        if self._on_list is not None:
            self._on_list()
        return iter(answer)


# --- any interleaving, real code ---------------------------------------------------------


class Scheduler:
    """Runs actor threads one storage request at a time, in the order the test picks.

    Every request an actor thread makes through :class:`ScheduledStore` first waits for
    the actor's turn; any other thread (the test itself) passes through.
    """

    def __init__(self) -> None:
        self._cv = threading.Condition()
        self._turn: str | None = None
        self.waiting: set[str] = set()
        self.finished: set[str] = set()
        self.actors: set[str] = set()
        self.next_request: dict[str, str] = {}
        """What each waiting actor asks next (``"<method> <key>"``)."""
        self.tick = 0

    def gate(self, request: str) -> None:
        name = threading.current_thread().name
        if name not in self.actors:
            return
        with self._cv:
            self.next_request[name] = request
            self.waiting.add(name)
            self._cv.notify_all()
            self._cv.wait_for(lambda: self._turn == name)
            self._turn = None
            self.waiting.discard(name)
            self.tick += 1

    def start(self, name: str, body: Callable[[], None]) -> None:
        def run() -> None:
            try:
                body()
            finally:
                with self._cv:
                    self.finished.add(name)
                    self._cv.notify_all()

        with self._cv:
            self.actors.add(name)
        threading.Thread(target=run, name=name, daemon=True).start()
        self._settle(name)

    def step(self, name: str) -> None:
        with self._cv:
            self._turn = name
            self._cv.notify_all()
        self._settle(name)

    def _settle(self, name: str) -> None:
        with self._cv:
            ok = self._cv.wait_for(
                lambda: self._turn is None and (name in self.waiting or name in self.finished),
                timeout=30,
            )
            assert ok, f"actor {name} neither reached a request nor finished"


class ScheduledStore(HookedStore):
    """A store whose every request by an actor thread is a scheduling point; records
    when manifests and start records landed (the scheduler's tick)."""

    def __init__(self, inner: ObjectStore, scheduler: Scheduler) -> None:
        super().__init__(inner)
        self._s = scheduler
        self.landed: dict[str, list[tuple[int, bytes]]] = {}

    def _gate(self, request: str) -> None:
        self._s.gate(request)

    def put(self, key: str, data: bytes, *, if_absent: bool = False) -> None:
        self._gate(f"put {key}")
        super().put(key, data, if_absent=if_absent)
        self.landed.setdefault(key, []).append((self._s.tick, data))

    def get(self, key: str, *, start: int = 0, length: int | None = None) -> bytes:
        self._gate(f"get {key}")
        return super().get(key, start=start, length=length)

    def size(self, key: str) -> int:
        self._gate(f"size {key}")
        return super().size(key)

    def exists(self, key: str) -> bool:
        self._gate(f"exists {key}")
        return super().exists(key)

    def list(self, prefix: str = "") -> Iterator[ObjectInfo]:
        self._gate(f"list {prefix}")
        return super().list(prefix)

    def delete_many(self, keys: Iterable[str]) -> int:
        keys = list(keys)
        self._gate(f"delete {' '.join(keys)}")
        return super().delete_many(keys)

    def copy(self, src_key: str, dst_key: str) -> None:
        self._gate(f"copy {src_key}")
        super().copy(src_key, dst_key)


def is_manifest_put(request: str) -> bool:
    return request.startswith("put ") and request.endswith(".manifest")


@dataclass
class Driver:
    name: str
    batches: int
    epoch: int | None = None
    start: int | None = None
    committed: list[int] = field(default_factory=list)
    error: BaseException | None = None


def run_driver(env: StorageRoot, d: Driver) -> None:
    """What a driver does: claim, open the timeline, sweep, then per batch a fence check,
    an upload and a commit (which checks the fence around the manifest write)."""
    timeline: CheckpointTimeline | None = None
    try:
        clock = TestingClock()  # fixed times: equal record sizes in every run
        d.epoch = claim_epoch(env.resolver, env.root, JOB, claimed_by=d.name, clock=clock)
        timeline = CheckpointTimeline(
            env.resolver, env.root, JOB, epoch=d.epoch, num_buckets=1, retain=1000, clock=clock
        )
        d.start = timeline.start.checkpoint_id
        handles = handles_of(timeline.start.manifest)
        timeline.sweep()
        fence = Fence(env.resolver, env.root, JOB, d.epoch)
        n = -1 if d.start is None else d.start
        for _ in range(d.batches):
            n += 1
            fence.check()
            handles = (*handles, segment(env, d.epoch, n))
            timeline.commit(n, chain(handles))
            d.committed.append(n)
    except (FencedError, ManifestExistsError) as exc:
        d.error = exc
    except BaseException as exc:  # anything else fails the test below
        d.error = exc
    finally:
        if timeline is not None:
            timeline.close()


@settings(max_examples=60, deadline=None)
@given(st.data())
def test_any_interleaving_restores_a_complete_counting_checkpoint(data: st.DataObject) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        inner = LocalObjectStore(tmp)
        plain = storage_root(inner)
        scheduler = Scheduler()
        scheduled = ScheduledStore(inner, scheduler)
        env = storage_root(scheduled)
        plans = data.draw(st.lists(st.integers(0, 3), min_size=2, max_size=4), label="batches")
        drivers = [Driver(f"driver-{i}", b) for i, b in enumerate(plans)]
        pending = list(drivers)
        for _ in range(5000):
            live = sorted(scheduler.waiting)
            if not live and not pending:
                break
            if pending and (not live or data.draw(st.booleans(), label="start another")):
                d = pending.pop(0)
                scheduler.start(d.name, lambda d=d: run_driver(env, d))
                continue
            name = data.draw(st.sampled_from(live), label="actor")
            if data.draw(st.booleans(), label="up to its next manifest write"):
                # Stop an actor right before a manifest PUT: it has passed its checks,
                # and others may now do anything before the PUT lands.
                scheduler.step(name)
                while name in scheduler.waiting and not is_manifest_put(
                    scheduler.next_request[name]
                ):
                    scheduler.step(name)
                continue
            for _ in range(data.draw(st.integers(1, 40), label="requests")):
                if name not in scheduler.waiting:
                    break
                scheduler.step(name)
        assert not scheduler.waiting and not pending, "drivers still running"

        for d in drivers:
            if d.error is not None:
                assert isinstance(d.error, FencedError | ManifestExistsError), repr(d.error)
        check_final_state(plain, scheduled, drivers)


def check_final_state(plain: StorageRoot, scheduled: ScheduledStore, drivers: list[Driver]) -> None:
    latest = find_latest_checkpoint(plain.resolver, plain.root, JOB)
    retained = load_retained(plain.resolver, plain.root, JOB)
    assert (latest is None) == (not retained)
    claims = Claims(plain.resolver, plain.root, JOB)
    if latest is not None:
        manifest = latest.stored.manifest
        assert retained[-1].checkpoint_id == latest.stored.checkpoint_id
        assert complete(plain, manifest), "the restore point references deleted objects"
        # When did the restore point land, and which claims recorded their start then?
        key = latest.stored.uri[len(plain.root) + 1 :]
        current = plain.store.get(key)
        landed = max(t for t, data in scheduled.landed[key] if data == current)
        for epoch in claims.recorded:
            if epoch > manifest.epoch:
                start_key = epoch_start_uri(plain.root, JOB, epoch)[len(plain.root) + 1 :]
                recorded_at = min(t for t, _ in scheduled.landed[start_key])
                assert landed < recorded_at, (
                    f"checkpoint {manifest.checkpoint_id} of epoch {manifest.epoch} landed "
                    f"after epoch {epoch} recorded its start"
                )
    # The newest launch that ran unfenced: its last checkpoint is the restore point.
    ran = [d for d in drivers if d.epoch is not None and d.error is None]
    if ran:
        top = max(ran, key=lambda d: d.epoch or 0)
        if top.epoch == claims.highest and top.committed:
            assert latest is not None
            assert latest.stored.checkpoint_id == top.committed[-1]
            assert latest.stored.manifest.epoch == top.epoch
    # A restart claims, opens and sweeps: it starts from the same complete checkpoint.
    restart = Driver("restart", 1)
    run_driver(plain, restart)
    assert restart.error is None, repr(restart.error)
    assert restart.start == (None if latest is None else latest.stored.checkpoint_id)
    after = find_latest_checkpoint(plain.resolver, plain.root, JOB)
    assert after is not None and complete(plain, after.stored.manifest)
    assert after.stored.manifest.epoch == restart.epoch
