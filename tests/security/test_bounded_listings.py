"""Listings of prefixes a driver fills are bounded.

A job's directory is written by its driver, which runs the tenant's code, so it may
hold any number of objects. The operator (on every reconcile), the orphan sweeps and
``gic gc`` list parts of it; a prefix with millions of keys must not make them spend
unbounded memory and time. Every such listing looks at no more than its limit plus one
object (on S3: fetches no page past it), then fails with ``TooManyObjectsError`` naming
the prefix, the limit and what to do, and nothing is deleted.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from botocore.stub import Stubber

from gic_operator.reconcile.problems import describe
from gic_operator.storage import job_storage
from gic_operator.storage.job_storage import JobStorage
from gic_runtime.checkpoint import catalog, claims, sweep
from gic_runtime.checkpoint.catalog import list_checkpoints, load_retained
from gic_runtime.checkpoint.live_sweep import LiveSweeper
from gic_runtime.checkpoint.ownership import OwnershipPolicy
from gic_runtime.checkpoint.sweep import sweep_orphans
from gic_runtime.errors import StorageError, TooManyObjectsError
from gic_runtime.fencing import claim_epoch, highest_epoch
from gic_runtime.storage import StoreResolver, count_bounded, list_bounded
from gic_runtime.storage.listing import UnorderedListing
from gic_runtime.storage.local import LocalObjectStore
from gic_runtime.storage.object_store import ObjectInfo
from gic_runtime.storage.s3 import S3ObjectStore
from gic_runtime.storage.s3_settings import S3Settings

JOB = "team.wc"


class SpyStore(LocalObjectStore):
    """A local store counting what its listings hand out."""

    def __init__(self, root: Path) -> None:
        super().__init__(root)
        self.ordered: list[str] = []
        self.taken = 0

    def list(self, prefix: str = "") -> Iterator[ObjectInfo]:
        self.ordered.append(prefix)
        for info in super().list(prefix):
            self.taken += 1
            yield info

    def list_unordered(self, prefix: str = "") -> Iterator[ObjectInfo]:
        for info in super().list_unordered(prefix):
            self.taken += 1
            yield info


def fill(root: Path, directory: str, count: int, name: str = "f-{:06d}") -> set[Path]:
    """``count`` small files in ``root/directory``."""
    where = root / directory
    where.mkdir(parents=True, exist_ok=True)
    made = set()
    for i in range(count):
        path = where / name.format(i)
        path.write_bytes(b"x")
        made.add(path)
    return made


def files_under(root: Path) -> set[Path]:
    return {p for p in root.rglob("*") if p.is_file()}


@pytest.fixture
def store(tmp_path: Path) -> SpyStore:
    return SpyStore(tmp_path / "store")


@pytest.fixture
def resolver(store: SpyStore) -> StoreResolver:
    resolver = StoreResolver()
    resolver.register(store)
    return resolver


# --- the helpers -------------------------------------------------------------------


def test_a_prefix_within_the_limit_is_listed_in_key_order(store: SpyStore) -> None:
    fill(store.root, "jobs/a/changelog/2", 3)
    fill(store.root, "jobs/a/changelog/10", 2)
    keys = [info.key for info in list_bounded(store, "jobs/a/changelog/", 5)]
    assert keys == sorted(keys) and len(keys) == 5
    assert count_bounded(store, "jobs/a/changelog/", 5) == 5
    assert list(list_bounded(store, "jobs/none/", 0)) == []


def test_an_oversized_prefix_is_refused_after_limit_plus_one(store: SpyStore) -> None:
    fill(store.root, "jobs/a/checkpoints", 50)
    with pytest.raises(TooManyObjectsError) as info:
        list(list_bounded(store, "jobs/a/checkpoints/", 7, hint="remove the strays"))
    error = info.value
    assert isinstance(error, StorageError) and error.limit == 7
    assert error.uri == store.uri_for("jobs/a/checkpoints/")
    assert f"more than 7 objects under {error.uri}" in str(error)
    assert "remove the strays" in str(error)
    assert store.taken == 8  # counted lazily: never the 50
    assert store.ordered == []  # the sorted listing (which collects) never ran


def test_the_count_stops_past_the_limit(store: SpyStore) -> None:
    fill(store.root, "p", 30)
    with pytest.raises(TooManyObjectsError, match="more than 4 objects"):
        count_bounded(store, "p/", 4)
    assert store.taken == 5
    with pytest.raises(ValueError, match="limit >= 0"):
        list_bounded(store, "p/", -1)


def test_the_local_store_lists_lazily_the_same_objects(store: SpyStore) -> None:
    assert isinstance(store, UnorderedListing)
    fill(store.root, "a/b", 3)
    fill(store.root, "a/c/d", 2)
    fill(store.root, "ab", 2)
    ordered = list(LocalObjectStore.list(store, "a/"))
    unordered = list(LocalObjectStore.list_unordered(store, "a/"))
    assert sorted(unordered, key=lambda i: i.key) == ordered and len(ordered) == 5


def s3_page(keys: list[str], token: str | None) -> dict[str, Any]:
    now = datetime(2030, 1, 1, tzinfo=UTC)
    page: dict[str, Any] = {
        "Contents": [{"Key": k, "Size": 1, "LastModified": now} for k in keys],
        "IsTruncated": token is not None,
        "KeyCount": len(keys),
    }
    if token is not None:
        page["NextContinuationToken"] = token
    return page


def test_on_s3_no_page_past_the_limit_is_fetched() -> None:
    settings = S3Settings(
        endpoint_url="http://127.0.0.1:9",
        region="us-east-1",
        access_key_id="a",
        secret_access_key="b",
        max_attempts=1,
    )
    store = S3ObjectStore("bkt", "root", settings=settings)
    client: Any = store._client
    pages = 5
    with Stubber(client) as stub:
        for n in range(pages):
            keys = [f"root/jobs/a/changelog/{n}-{i}" for i in range(3)]
            stub.add_response("list_objects_v2", s3_page(keys, f"t{n}" if n < pages - 1 else None))
        with pytest.raises(TooManyObjectsError) as info:
            list(list_bounded(store, "jobs/a/changelog/", 4))
        assert info.value.uri == "s3://bkt/root/jobs/a/changelog/"
        assert len(stub._queue) == pages - 2  # the 5th object is on the 2nd page


# --- the runtime's listings --------------------------------------------------------


def test_checkpoint_listing_is_bounded(
    store: SpyStore, resolver: StoreResolver, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(catalog, "MAX_CHECKPOINT_OBJECTS", 10)
    fill(store.root, f"jobs/{JOB}/checkpoints", 10, "chk-{:012d}.manifest")
    assert len(list_checkpoints(resolver, store.root_uri, JOB)) == 10
    fill(store.root, f"jobs/{JOB}/checkpoints", 1, "stray-{:06d}")
    store.taken = 0
    with pytest.raises(TooManyObjectsError, match="more than 10 objects under") as info:
        load_retained(resolver, store.root_uri, JOB)
    assert info.value.uri.endswith(f"jobs/{JOB}/checkpoints/")
    assert "a job keeps only a handful of manifests" in str(info.value)
    assert store.taken == 11


def test_epoch_listing_is_bounded(
    store: SpyStore, resolver: StoreResolver, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(claims, "MAX_EPOCH_OBJECTS", 6)
    for _ in range(3):  # a marker and a start record each
        claim_epoch(resolver, store.root_uri, JOB, claimed_by="test")
    assert highest_epoch(resolver, store.root_uri, JOB) == 3
    fill(store.root, f"jobs/{JOB}/epochs", 1, "junk-{:06d}")
    with pytest.raises(TooManyObjectsError, match="more than 6 objects") as info:
        claim_epoch(resolver, store.root_uri, JOB, claimed_by="test")
    assert "each launch of the job adds two files" in str(info.value)
    assert not (store.root / f"jobs/{JOB}/epochs/epoch-000000000004").exists()


@pytest.mark.parametrize("dry_run", [False, True])
def test_an_oversized_job_is_not_swept(
    store: SpyStore, resolver: StoreResolver, dry_run: bool
) -> None:
    fill(store.root, f"jobs/{JOB}/changelog/1", 4)
    fill(store.root, f"jobs/{JOB}/snapshots/0", 4)
    before = files_under(store.root)
    with pytest.raises(TooManyObjectsError) as info:
        sweep_orphans(resolver, store.root_uri, JOB, [], dry_run=dry_run, max_objects=7)
    message = str(info.value)
    assert f"more than 7 objects in changelog/, snapshots/, checkpoints/ of job {JOB!r}" in (
        message
    )
    assert "deleted nothing" in message
    assert files_under(store.root) == before
    # refused while counting: no sorted listing of the swept directories ran
    assert not [p for p in store.ordered if "/changelog/" in p or "/snapshots/" in p]


def test_a_job_within_the_bound_is_swept(store: SpyStore, resolver: StoreResolver) -> None:
    fill(store.root, f"jobs/{JOB}/changelog/1", 4)
    fill(store.root, f"jobs/{JOB}/snapshots/0", 4)
    result = sweep_orphans(resolver, store.root_uri, JOB, [], max_objects=8)
    assert result.deleted == 8 and files_under(store.root) == set()


def test_the_sweep_bound_defaults_to_the_module_limit(
    store: SpyStore, resolver: StoreResolver, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sweep, "MAX_SWEPT_OBJECTS", 3)
    made = fill(store.root, f"jobs/{JOB}/changelog/1", 4)
    with pytest.raises(TooManyObjectsError, match="more than 3 objects"):
        sweep_orphans(resolver, store.root_uri, JOB, [])
    assert files_under(store.root) == made


def test_the_live_sweep_is_bounded(
    store: SpyStore, resolver: StoreResolver, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sweep, "MAX_SWEPT_OBJECTS", 5)
    made = fill(store.root, f"jobs/{JOB}/changelog/1", 6)
    sweeper = LiveSweeper(resolver, store.root_uri, JOB, interval_s=1, epoch=1)
    policy = OwnershipPolicy.for_job(store.root_uri, JOB)
    with pytest.raises(TooManyObjectsError, match="changelog/, snapshots/ of job"):
        sweeper.sweep([], policy)
    assert files_under(store.root) == made


# --- the operator's own listings ---------------------------------------------------


def test_an_oversized_savepoint_is_not_disposed_of(
    store: SpyStore, resolver: StoreResolver, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(job_storage, "MAX_SAVEPOINT_OBJECTS", 5)
    storage = JobStorage(resolver, store.root_uri, JOB)
    path = f"{store.root_uri}/savepoints/{JOB}/gsp-a-0001"
    made = fill(store.root, f"savepoints/{JOB}/gsp-a-0001/files", 6)
    with pytest.raises(TooManyObjectsError, match="more than 5 objects") as info:
        storage.dispose_savepoint(path)
    assert "delete it by hand" in str(info.value)
    with pytest.raises(TooManyObjectsError):
        storage.savepoint_size(path)
    assert files_under(store.root) == made

    (store.root / f"savepoints/{JOB}/gsp-a-0001/files/f-000000").unlink()
    assert storage.savepoint_size(path) == (5, 5)
    assert storage.dispose_savepoint(path) == 5
    assert files_under(store.root) == set()


def test_the_operator_reports_it_with_its_own_reason() -> None:
    error = TooManyObjectsError("more than 5 objects under s3://b/p/ ...", uri="s3://b/p/", limit=5)
    problem = describe(error)
    assert problem.reason == "TooManyObjects" and not problem.bug
    assert problem.message == str(error)
