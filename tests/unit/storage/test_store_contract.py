"""The ObjectStore contract, checked against every implementation (local disk and S3)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from gic_runtime.errors import ObjectExistsError, ObjectNotFoundError, StorageError
from gic_runtime.storage.object_store import MAX_DELETE_BATCH, ObjectStore


@pytest.fixture(params=["local", pytest.param("s3", marks=pytest.mark.s3)])
def store(request: pytest.FixtureRequest) -> ObjectStore:
    name = "local_store" if request.param == "local" else "s3_store"
    found: ObjectStore = request.getfixturevalue(name)
    return found


def _parallel(fn: Callable[[int], None], count: int) -> None:
    with ThreadPoolExecutor(max_workers=32) as pool:
        for _ in pool.map(fn, range(count)):
            pass


class TestProtocol:
    def test_implements_protocol(self, store: ObjectStore) -> None:
        assert isinstance(store, ObjectStore)

    def test_uri_for_is_under_root(self, store: ObjectStore) -> None:
        assert store.uri_for("a/b.bin") == f"{store.root_uri}/a/b.bin"


class TestPutGet:
    def test_roundtrip(self, store: ObjectStore) -> None:
        store.put("a/b/c.bin", b"hello world")
        assert store.get("a/b/c.bin") == b"hello world"

    def test_empty_object(self, store: ObjectStore) -> None:
        store.put("empty", b"")
        assert store.get("empty") == b""
        assert store.size("empty") == 0

    def test_binary_payload_of_several_megabytes(self, store: ObjectStore) -> None:
        data = bytes(range(256)) * (3 * 4096 + 7)
        store.put("big.bin", data)
        assert store.get("big.bin") == data

    def test_plain_put_overwrites(self, store: ObjectStore) -> None:
        store.put("k", b"one")
        store.put("k", b"two")
        assert store.get("k") == b"two"

    @pytest.mark.parametrize("size", [0, 11, 3 * (1 << 20) + 5])
    def test_put_file_writes_the_whole_file_from_its_start(
        self, store: ObjectStore, tmp_path: Path, size: int
    ) -> None:
        data = bytes(range(256)) * (size // 256) + bytes(size % 256)
        with (tmp_path / "spool").open("w+b") as f:
            f.write(data)  # left at its end: put_file reads from the start anyway
            store.put_file("f/big.bin", f, size)
            assert store.get("f/big.bin") == data
            assert store.size("f/big.bin") == size
            store.put_file("f/big.bin", f, size)  # plain: overwrites

    def test_put_file_if_absent_refuses_an_existing_object(
        self, store: ObjectStore, tmp_path: Path
    ) -> None:
        store.put("k", b"first")
        with (tmp_path / "spool").open("w+b") as f:
            f.write(b"second")
            with pytest.raises(ObjectExistsError):
                store.put_file("k", f, 6, if_absent=True)
            store.put_file("new", f, 6, if_absent=True)
        assert store.get("k") == b"first"
        assert store.get("new") == b"second"

    def test_size_and_exists(self, store: ObjectStore) -> None:
        store.put("s", b"12345")
        assert store.size("s") == 5
        assert store.exists("s")
        assert not store.exists("t")


class TestRanges:
    DATA = b"0123456789"

    @pytest.mark.parametrize(
        ("start", "length", "expected"),
        [
            (0, None, b"0123456789"),
            (3, None, b"3456789"),
            (0, 4, b"0123"),
            (2, 3, b"234"),
            (9, 1, b"9"),
            (7, 100, b"789"),
            (5, 0, b""),
            (10, None, b""),
            (12, 3, b""),
        ],
    )
    def test_range(
        self, store: ObjectStore, start: int, length: int | None, expected: bytes
    ) -> None:
        store.put("r", self.DATA)
        assert store.get("r", start=start, length=length) == expected


class TestMissing:
    def test_get_missing(self, store: ObjectStore) -> None:
        with pytest.raises(ObjectNotFoundError) as info:
            store.get("no/such")
        assert info.value.uri == store.uri_for("no/such")

    def test_ranged_get_missing(self, store: ObjectStore) -> None:
        with pytest.raises(ObjectNotFoundError):
            store.get("no/such", start=3, length=2)

    def test_size_missing(self, store: ObjectStore) -> None:
        with pytest.raises(ObjectNotFoundError):
            store.size("no/such")

    def test_copy_from_missing(self, store: ObjectStore) -> None:
        with pytest.raises(ObjectNotFoundError):
            store.copy("no/such", "dst")
        assert not store.exists("dst")

    def test_delete_missing_is_not_an_error(self, store: ObjectStore) -> None:
        assert store.delete_many(["no/such", "other"]) == 2


class TestInvalidKeys:
    @pytest.mark.parametrize("key", ["", "/abs", "a/../b", ".."])
    def test_rejected_everywhere(self, store: ObjectStore, key: str) -> None:
        with pytest.raises(StorageError, match="invalid object key"):
            store.put(key, b"x")
        with pytest.raises(StorageError, match="invalid object key"):
            store.get(key)
        with pytest.raises(StorageError, match="invalid object key"):
            store.delete_many([key])


class TestList:
    def test_prefixes_and_order(self, store: ObjectStore) -> None:
        for key in ["b/2", "a/1", "a/3", "ab/1", "a/sub/2", "c"]:
            store.put(key, key.encode())
        assert [o.key for o in store.list()] == ["a/1", "a/3", "a/sub/2", "ab/1", "b/2", "c"]
        assert [o.key for o in store.list("a/")] == ["a/1", "a/3", "a/sub/2"]
        assert [o.key for o in store.list("a")] == ["a/1", "a/3", "a/sub/2", "ab/1"]
        assert [o.key for o in store.list("a/s")] == ["a/sub/2"]
        assert list(store.list("zzz/")) == []

    def test_sizes_and_mtimes(self, store: ObjectStore) -> None:
        store.put("x/one", b"1")
        store.put("x/three", b"333")
        infos = {o.key: o for o in store.list("x/")}
        assert {k: o.size for k, o in infos.items()} == {"x/one": 1, "x/three": 3}
        assert all(o.mtime > 1_600_000_000 for o in infos.values())

    def test_empty_store(self, store: ObjectStore) -> None:
        assert list(store.list()) == []

    def test_more_than_one_page(self, store: ObjectStore) -> None:
        count = MAX_DELETE_BATCH + 100
        keys = [f"many/{i:05d}" for i in range(count)]
        _parallel(lambda i: store.put(keys[i], b"%d" % i), count)
        store.put("other/x", b"")
        listed = list(store.list("many/"))
        assert [o.key for o in listed] == keys
        assert {o.size for o in listed} == {1, 2, 3, 4}


class TestCreateIfAbsent:
    def test_creates_when_absent(self, store: ObjectStore) -> None:
        store.put("m", b"first", if_absent=True)
        assert store.get("m") == b"first"

    def test_conflict_leaves_object_unchanged(self, store: ObjectStore) -> None:
        store.put("m", b"first", if_absent=True)
        with pytest.raises(ObjectExistsError) as info:
            store.put("m", b"second", if_absent=True)
        assert info.value.uri == store.uri_for("m")
        assert store.get("m") == b"first"

    def test_conflict_with_plain_put_object(self, store: ObjectStore) -> None:
        store.put("m", b"plain")
        with pytest.raises(ObjectExistsError):
            store.put("m", b"second", if_absent=True)

    @pytest.mark.parametrize("round_", range(2))
    def test_racing_creators_exactly_one_wins(self, store: ObjectStore, round_: int) -> None:
        writers = 8
        barrier = threading.Barrier(writers)
        outcomes: dict[int, str] = {}

        def attempt(i: int) -> None:
            barrier.wait()
            try:
                store.put(f"race/{round_}", b"writer-%d" % i, if_absent=True)
                outcomes[i] = "won"
            except ObjectExistsError:
                outcomes[i] = "lost"

        threads = [threading.Thread(target=attempt, args=(i,)) for i in range(writers)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        winners = [i for i, outcome in outcomes.items() if outcome == "won"]
        assert len(outcomes) == writers
        assert len(winners) == 1
        assert store.get(f"race/{round_}") == b"writer-%d" % winners[0]


class TestDeleteMany:
    def test_deletes_only_given_keys(self, store: ObjectStore) -> None:
        for key in ["d/1", "d/2", "d/3"]:
            store.put(key, b"x")
        assert store.delete_many(iter(["d/1", "d/3"])) == 2
        assert [o.key for o in store.list()] == ["d/2"]

    def test_more_than_one_batch(self, store: ObjectStore) -> None:
        count = MAX_DELETE_BATCH + 100
        keys = [f"del/{i:05d}" for i in range(count)]
        _parallel(lambda i: store.put(keys[i], b"x"), count)
        store.put("keep", b"k")
        assert store.delete_many([*keys, "del/missing"]) == count + 1
        assert [o.key for o in store.list()] == ["keep"]

    def test_empty_input(self, store: ObjectStore) -> None:
        assert store.delete_many([]) == 0


class TestCopy:
    def test_copy_creates_identical_object(self, store: ObjectStore) -> None:
        store.put("src/a", b"payload")
        store.copy("src/a", "dst/b")
        assert store.get("dst/b") == b"payload"
        assert store.get("src/a") == b"payload"

    def test_copy_survives_deleting_source(self, store: ObjectStore) -> None:
        store.put("src/a", b"payload")
        store.copy("src/a", "dst/b")
        store.delete_many(["src/a"])
        assert store.get("dst/b") == b"payload"

    def test_copy_onto_existing_fails_and_keeps_destination(self, store: ObjectStore) -> None:
        store.put("src/a", b"new")
        store.put("dst/b", b"old")
        with pytest.raises(ObjectExistsError) as info:
            store.copy("src/a", "dst/b")
        assert info.value.uri == store.uri_for("dst/b")
        assert store.get("dst/b") == b"old"
