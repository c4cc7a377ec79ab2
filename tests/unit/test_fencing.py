"""Fencing epochs: claims are distinct and increasing; a superseded driver is fenced."""

from __future__ import annotations

import tempfile
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tests.support.stores import DelegatingStore, StorageRoot, lost_put_answers, storage_root

from gic_runtime.errors import (
    ConfigurationError,
    CorruptFileError,
    FencedError,
    ObjectExistsError,
    ObjectNotFoundError,
)
from gic_runtime.fencing import (
    EpochMarker,
    Fence,
    claim_epoch,
    epoch_marker_uri,
    highest_epoch,
    list_epochs,
    read_marker,
)
from gic_runtime.storage.local import LocalObjectStore
from gic_runtime.storage.object_store import ObjectInfo, ObjectStore
from gic_runtime.storage.uri import StoreResolver, join
from gic_runtime.testing.faulty_store import TestingFaultyStore

JOB = "job-a"


def claim(s: StorageRoot, by: str = "driver-1", epoch: int | None = None) -> int:
    return claim_epoch(s.resolver, s.root, JOB, epoch=epoch, claimed_by=by)


def test_auto_claims_count_up_from_one(storage: StorageRoot) -> None:
    assert highest_epoch(storage.resolver, storage.root, JOB) == 0
    assert [claim(storage, f"d{i}") for i in range(3)] == [1, 2, 3]
    assert list_epochs(storage.resolver, storage.root, JOB) == [1, 2, 3]
    marker = read_marker(storage.resolver, storage.root, JOB, 2)
    assert (marker.epoch, marker.claimed_by) == (2, "d1")


def test_a_superseded_driver_is_fenced(storage: StorageRoot) -> None:
    old = Fence(storage.resolver, storage.root, JOB, claim(storage, "old"))
    old.check()
    new_epoch = claim(storage, "new")
    new = Fence(storage.resolver, storage.root, JOB, new_epoch)
    new.check()
    assert old.highest() == new_epoch
    with pytest.raises(FencedError) as info:
        old.check()
    assert str(info.value).startswith(
        f"driver epoch 1 of job 'job-a' was superseded by epoch {new_epoch}; this driver stops"
    )


def test_a_check_in_the_background_lists_on_its_own_thread_and_hands_over_its_outcome(
    storage: StorageRoot,
) -> None:
    listed_on: list[str] = []

    class Watched(DelegatingStore):
        def list(self, prefix: str = "") -> Iterator[ObjectInfo]:
            listed_on.append(threading.current_thread().name)
            return super().list(prefix)

    watched = storage_root(Watched(storage.store))
    fence = Fence(watched.resolver, watched.root, JOB, claim(storage, "old"))
    assert fence.check_in_background().result(timeout=30) is None
    assert listed_on == ["gic-fence-job-a"]
    claim(storage, "new")
    superseded = fence.check_in_background()
    with pytest.raises(FencedError, match="superseded by epoch 2"):
        superseded.result(timeout=30)
    assert isinstance(superseded.exception(), FencedError)  # kept for every caller


def test_given_epoch_must_be_above_every_claim(storage: StorageRoot) -> None:
    assert claim(storage, "operator-launch-5", epoch=5) == 5
    with pytest.raises(FencedError, match=r"cannot claim epoch 4 .* epoch 5 was already claimed"):
        claim(storage, "late", epoch=4)
    with pytest.raises(FencedError, match=r"epoch 5 of job 'job-a' was already claimed by"):
        claim(storage, "other", epoch=5)
    # The same launch retrying its claim (its first answer was lost) keeps the epoch.
    assert claim(storage, "operator-launch-5", epoch=5) == 5
    assert claim(storage) == 6  # auto claims continue above
    with pytest.raises(ConfigurationError, match="start at 1"):
        claim(storage, epoch=0)
    with pytest.raises(ConfigurationError, match="claimed_by"):
        claim(storage, "")


def test_racing_claimers_get_distinct_epochs(
    storage: StorageRoot, local_store: LocalObjectStore
) -> None:
    n = 6
    barrier = threading.Barrier(n)
    results: list[int] = []
    lock = threading.Lock()

    def run(i: int) -> None:
        resolver = StoreResolver()  # each claimer its own client
        resolver.register(LocalObjectStore(local_store.root))
        barrier.wait()
        epoch = claim_epoch(resolver, storage.root, JOB, claimed_by=f"driver-{i}")
        with lock:
            results.append(epoch)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(results) == list(range(1, n + 1))
    fences = [Fence(storage.resolver, storage.root, JOB, e) for e in results]
    unfenced = []
    for fence in fences:
        try:
            fence.check()
            unfenced.append(fence.epoch)
        except FencedError:
            pass
    assert unfenced == [n]


def test_lost_response_on_the_marker_is_a_claim(storage: StorageRoot) -> None:
    lost = lost_put_answers(storage, lambda: ObjectExistsError("exists (retried request)"), 1)
    assert claim(lost, "d") == 1
    assert claim(storage, "e") == 2


def test_check_is_one_list_and_reads_nothing(storage: StorageRoot) -> None:
    for i in range(3):
        claim(storage, f"d{i}")
    faulty = TestingFaultyStore(storage.store)
    fence = Fence(storage_root(faulty).resolver, storage.root, JOB, 3)
    fence.check()
    assert (faulty.calls("list"), faulty.calls("get")) == (1, 0)


def test_foreign_files_in_the_epochs_directory_are_ignored(storage: StorageRoot) -> None:
    claim(storage)
    epochs = join("jobs", JOB, "epochs")
    storage.store.put(f"{epochs}/README", b"hello")
    storage.store.put(f"{epochs}/sub/epoch-000000000009", b"nested")
    storage.store.put(f"jobs/{JOB}/epochs-old/epoch-000000000007", b"sibling")
    assert list_epochs(storage.resolver, storage.root, JOB) == [1]


def test_damaged_markers(storage: StorageRoot) -> None:
    claim(storage)
    uri = epoch_marker_uri(storage.root, JOB, 1)
    store, key = storage.resolver.resolve(uri)
    store.put(key, store.get(key)[:-1])
    with pytest.raises(CorruptFileError, match="checksum mismatch") as info:
        read_marker(storage.resolver, storage.root, JOB, 1)
    assert uri in str(info.value)
    Fence(storage.resolver, storage.root, JOB, 1).check()  # names are the truth
    moved = epoch_marker_uri(storage.root, JOB, 2)
    store2, key2 = storage.resolver.resolve(moved)
    store2.put(key2, EpochMarker(3, 1.0, "x").encode())
    with pytest.raises(CorruptFileError, match="named 'epoch-000000000002' but holds epoch 3"):
        read_marker(storage.resolver, storage.root, JOB, 2)
    with pytest.raises(ObjectNotFoundError):
        read_marker(storage.resolver, storage.root, JOB, 9)


# --- interleavings ---------------------------------------------------------------------


class InterleavingStore(DelegatingStore):
    """Wraps a store; after a LIST has been answered and before the caller sees it, runs
    ``hook`` (which may claim epochs itself): the window between a claimer's LIST and
    its create, where races happen."""

    def __init__(self, inner: ObjectStore, hook: Callable[[], None]) -> None:
        super().__init__(inner)
        self._hook = hook

    def list(self, prefix: str = "") -> Iterator[ObjectInfo]:
        answer = list(self.inner.list(prefix))
        self._hook()
        return iter(answer)


@dataclass
class Claim:
    name: str
    given: int | None
    start: int
    end: int = -1
    epoch: int | None = None
    fenced: bool = False


@settings(max_examples=60, deadline=None)
@given(st.data())
def test_claims_are_distinct_and_increasing_under_interleavings(data: st.DataObject) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        inner = LocalObjectStore(tmp)
        plain = storage_root(inner)
        clock = [0]
        claims: list[Claim] = []
        budget = [data.draw(st.integers(2, 8), label="claims")]

        def tick() -> int:
            clock[0] += 1
            return clock[0]

        def run_claim(depth: int) -> None:
            budget[0] -= 1
            name = f"claimer-{len(claims)}"
            given_epoch = None
            if data.draw(st.booleans(), label=f"{name} gives an epoch"):
                highest = highest_epoch(plain.resolver, plain.root, JOB)
                given_epoch = max(1, highest + data.draw(st.integers(-1, 2), label="offset"))
            record = Claim(name, given_epoch, start=tick())
            claims.append(record)

            def hook() -> None:
                while budget[0] > 0 and depth < 3 and data.draw(st.booleans(), label="interlope"):
                    run_claim(depth + 1)

            s = storage_root(InterleavingStore(inner, hook))
            try:
                record.epoch = claim_epoch(
                    s.resolver, s.root, JOB, epoch=given_epoch, claimed_by=name
                )
            except FencedError:
                record.fenced = True
            record.end = tick()

        while budget[0] > 0:
            run_claim(0)

        won = [c for c in claims if c.epoch is not None]
        epochs = [c.epoch for c in won]
        assert len(set(epochs)) == len(epochs), "two claims got the same epoch"
        assert all(not c.fenced for c in claims if c.given is None), "auto claims never fail"
        for a in won:
            for b in won:
                if a.end < b.start:
                    assert a.epoch is not None and b.epoch is not None
                    assert a.epoch < b.epoch, f"{b.name} claimed below earlier {a.name}"
        markers = list_epochs(plain.resolver, plain.root, JOB)
        assert set(epochs) <= set(markers)
        top = max(markers)
        for c in won:
            assert c.epoch is not None
            fence = Fence(plain.resolver, plain.root, JOB, c.epoch)
            if c.epoch == top:
                fence.check()
            else:
                with pytest.raises(FencedError):
                    fence.check()
        for c in claims:
            if c.fenced:  # refused only because someone else holds that epoch or above
                assert c.given is not None
                assert any(
                    m >= c.given
                    and read_marker(plain.resolver, plain.root, JOB, m).claimed_by != c.name
                    for m in markers
                )
