"""KVStore semantics shared by both stores, consistent views, and LMDB across processes."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tests.support.memory_probe import REPO

from gic_runtime.changelog.records import Op
from gic_runtime.errors import StateError
from gic_runtime.state import lmdb_store
from gic_runtime.state.lmdb_store import LmdbStore
from gic_runtime.state.memory_store import InMemoryStore, SortedKeys, prefix_end
from gic_runtime.state.stores import BucketMeta, KVStore, apply_change

MakeStore = Callable[[], KVStore]


class TestKeyValueOps:
    def test_get_put_delete(self, make_store: MakeStore) -> None:
        s = make_store()
        assert s.get(0, b"a") is None
        s.put(0, b"a", b"1")
        s.put(1, b"a", b"other bucket")
        assert s.get(0, b"a") == b"1"
        s.delete(0, b"a")
        s.delete(0, b"missing")
        assert s.get(0, b"a") is None
        assert s.get(1, b"a") == b"other bucket"

    def test_append_concatenates(self, make_store: MakeStore) -> None:
        s = make_store()
        s.append(0, b"l", b"ab")
        s.append(0, b"l", b"cd")
        assert s.get(0, b"l") == b"abcd"

    def test_scan_and_delete_prefix(self, make_store: MakeStore) -> None:
        s = make_store()
        for key in (b"a", b"ab", b"abc", b"ab\xff", b"ac", b"b"):
            s.put(0, key, key.upper())
        s.put(1, b"ab", b"x")
        assert [k for k, _ in s.scan(0, b"ab")] == [b"ab", b"abc", b"ab\xff"]
        assert s.scan(0, b"ab")[0] == (b"ab", b"AB")
        s.delete_prefix(0, b"ab")
        assert [k for k, _ in s.scan(0, b"")] == [b"a", b"ac", b"b"]
        assert s.get(1, b"ab") == b"x"

    def test_apply_bulk(self, make_store: MakeStore) -> None:
        s = make_store()
        n = s.apply(
            3,
            [
                (Op.PUT, b"k1", b"v"),
                (Op.APPEND, b"k2", b"x"),
                (Op.APPEND, b"k2", b"y"),
                (Op.PUT, b"p1", b"1"),
                (Op.PUT, b"p2", b"2"),
                (Op.DELETE_PREFIX, b"p", b""),
                (Op.DELETE, b"k1", b""),
            ],
        )
        assert n == 7
        assert s.scan(3, b"") == [(b"k2", b"xy")]

    @settings(max_examples=60, deadline=None)
    @given(
        changes=st.lists(
            st.tuples(
                st.sampled_from([Op.PUT, Op.DELETE, Op.APPEND, Op.DELETE_PREFIX]),
                st.sampled_from([b"a", b"aa", b"ab", b"b", b"ba"]),
                st.binary(max_size=2),
            ),
            max_size=30,
        ),
        commit_every=st.integers(1, 5),
    )
    def test_lmdb_apply_is_the_changes_one_by_one(
        self, changes: list[tuple[Op, bytes, bytes]], commit_every: int
    ) -> None:
        """Bulk ``apply`` in one write transaction (committed every ``commit_every``
        changes) leaves what the single calls leave, also across commits and views."""
        with tempfile.TemporaryDirectory(dir="/tmp") as tmp:
            bulk = LmdbStore(Path(tmp) / "bulk", map_size=1 << 22, commit_every=commit_every)
            single = LmdbStore(Path(tmp) / "single", map_size=1 << 22)
            half = len(changes) // 2
            assert bulk.apply(0, changes[:half]) == half
            with bulk.snapshot_items(0) as view:  # a view commits what is open
                mid = list(view)
            bulk.apply(0, iter(changes[half:]))
            for i, (op, key, value) in enumerate(changes):
                apply_change(single, 0, op, key, value)
                if i + 1 == half:
                    assert single.scan(0, b"") == mid
            assert bulk.scan(0, b"") == single.scan(0, b"")
            bulk.close()
            single.close()

    def test_get_many_and_put_many(self, make_store: MakeStore) -> None:
        s = make_store()
        s.put(0, b"b", b"old")
        s.put_many(0, [(b"c", b"3"), (b"a", b"1"), (b"b", b"2"), (b"c", b"33")])
        s.put_many(0, [])
        s.put_many(1, [(b"a", b"other bucket")])
        assert s.get_many(0, [b"a", b"missing", b"c", b"b", b"a"]) == [
            b"1",
            None,
            b"33",
            b"2",
            b"1",
        ]
        assert s.get_many(0, []) == []
        s.flush()  # LMDB: now read through a read transaction
        assert s.get_many(1, [b"a", b"b"]) == [b"other bucket", None]
        assert s.scan(0, b"") == [(b"a", b"1"), (b"b", b"2"), (b"c", b"33")]

    def test_load_sorted_appends_ascending_keys_and_refuses_others(
        self, make_store: MakeStore
    ) -> None:
        s = make_store()
        s.put(1, b"b", b"other bucket")
        assert s.load_sorted(0, [(b"a", b"1"), (b"b", b"2")]) == 2
        assert s.load_sorted(0, iter([(b"c", b"3")])) == 1  # above the bucket's keys
        assert s.load_sorted(0, []) == 0
        assert s.scan(0, b"") == [(b"a", b"1"), (b"b", b"2"), (b"c", b"3")]
        with pytest.raises(StateError, match="ascend"):
            s.load_sorted(0, [(b"d", b"4"), (b"d", b"5")])  # not strictly ascending
        with pytest.raises(StateError, match="ascend"):
            s.load_sorted(0, [(b"0", b"below")])  # under the bucket's last key
        assert s.get(0, b"0") is None and s.get(0, b"a") == b"1"
        assert s.scan(1, b"") == [(b"b", b"other bucket")]

    def test_clear_bucket(self, make_store: MakeStore) -> None:
        s = make_store()
        s.put(0, b"a", b"1")
        s.set_meta(0, BucketMeta(1, "t"))
        s.put(1, b"a", b"1")
        s.clear_bucket(0)
        assert s.scan(0, b"") == []
        assert s.get_meta(0) is None
        assert s.get(1, b"a") == b"1"

    def test_many_keys_stay_ordered(self, make_store: MakeStore) -> None:
        s = make_store()
        keys = [f"{i * 7919 % 5000:05d}".encode() for i in range(5000)]
        for k in keys:
            s.put(0, k, b"")
        for k in keys[::3]:
            s.delete(0, k)
        expected = sorted(set(keys) - set(keys[::3]))
        assert [k for k, _ in s.scan(0, b"")] == expected
        assert [k for k, _ in s.scan(0, b"012")] == [k for k in expected if k.startswith(b"012")]


class TestLineageMeta:
    def test_any_change_invalidates_meta(self, make_store: MakeStore) -> None:
        s = make_store()
        for change in (
            lambda: s.put(0, b"a", b"1"),
            lambda: s.delete(0, b"a"),
            lambda: s.append(0, b"a", b"1"),
            lambda: s.delete_prefix(0, b"z"),
            lambda: s.put_many(0, [(b"b", b"2")]),
        ):
            s.set_meta(0, BucketMeta(5, "tok"))
            s.flush()
            assert s.get_meta(0) == BucketMeta(5, "tok")
            change()
            assert s.get_meta(0) is None

    def test_meta_is_per_bucket(self, make_store: MakeStore) -> None:
        s = make_store()
        s.set_meta(0, BucketMeta(1, "a"))
        s.put(1, b"k", b"v")
        assert s.get_meta(0) == BucketMeta(1, "a")


class TestConsistentViews:
    def test_view_ignores_later_writes(self, make_store: MakeStore) -> None:
        s = make_store()
        for i in range(100):
            s.put(0, b"k%03d" % i, b"old")
        view = s.snapshot_items(0)
        for i in range(100):
            s.put(0, b"k%03d" % i, b"new")
        s.put(0, b"zz", b"added")
        s.delete(0, b"k000")
        s.flush()
        seen: list[tuple[bytes, bytes]] = []
        reader = threading.Thread(target=lambda: seen.extend(view))
        reader.start()
        reader.join()
        assert seen == [(b"k%03d" % i, b"old") for i in range(100)]

    def test_view_iterates_once(self, make_store: MakeStore) -> None:
        s = make_store()
        s.put(0, b"a", b"1")
        with s.snapshot_items(0) as view:
            assert list(view) == [(b"a", b"1")]
            with pytest.raises(StateError, match="already"):
                list(view)


class TestSortedKeys:
    def test_chunks_split_and_merge(self) -> None:
        index = SortedKeys()
        keys = [b"%06d" % ((i * 104729) % 20000) for i in range(20000)]
        for k in keys:
            index.add(k)
        assert index.range(b"") == sorted(keys)
        for k in keys[:15000]:
            index.remove(k)
        assert index.range(b"") == sorted(keys[15000:])
        assert index.range(b"0199") == sorted(k for k in keys[15000:] if k.startswith(b"0199"))

    def test_prefix_end(self) -> None:
        assert prefix_end(b"ab") == b"ac"
        assert prefix_end(b"a\xff") == b"b"
        assert prefix_end(b"\xff\xff") is None


_CHILD = """
import sys
from gic_runtime.state.lmdb_store import LmdbStore
from gic_runtime.state.stores import BucketMeta
store = LmdbStore(sys.argv[1], map_size=1 << 26)
print(store.get(0, b"from-parent").decode(), store.get_meta(0).token)
store.put(1, b"from-child", b"hello")
store.set_meta(1, BucketMeta(1, "child-token"))
store.close()
"""


class TestLmdbAcrossProcesses:
    def test_processes_see_each_others_commits(self, tmp_path: Path) -> None:
        directory = str(tmp_path / "shared")
        parent = LmdbStore(directory, map_size=1 << 26)
        parent.put(0, b"from-parent", b"hi")
        parent.set_meta(0, BucketMeta(1, "parent-token"))
        parent.get(1, b"warm-up")  # bucket 1's environment is open here before the child writes
        parent.flush()
        child = subprocess.run(
            [sys.executable, "-c", _CHILD, directory],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert child.returncode == 0, child.stderr
        assert child.stdout.split() == ["hi", "parent-token"]
        assert parent.get(1, b"from-child") == b"hello"
        assert parent.get_meta(1) == BucketMeta(1, "child-token")
        assert parent.buckets() == [0, 1]
        parent.close()

    def test_uncommitted_changes_are_private(self, tmp_path: Path) -> None:
        a = LmdbStore(tmp_path / "s", map_size=1 << 26)
        a.put(0, b"k", b"v")
        viewer_seen: list[bytes | None] = []

        def look() -> None:
            # a thread of the same process reading through a view sees only committed data
            other = LmdbStore(tmp_path / "s", map_size=1 << 26)
            viewer_seen.append(other.get(2, b"k"))
            other.close()

        t = threading.Thread(target=look)
        t.start()
        t.join()
        assert viewer_seen == [None]
        assert a.get(0, b"k") == b"v"
        a.close()

    def test_other_thread_cannot_touch_open_write_transaction(self, tmp_path: Path) -> None:
        store = LmdbStore(tmp_path / "s", map_size=1 << 26)
        store.put(0, b"k", b"v")
        errors: list[BaseException] = []

        def touch() -> None:
            try:
                store.put(0, b"k", b"w")
            except StateError as exc:
                errors.append(exc)

        t = threading.Thread(target=touch)
        t.start()
        t.join()
        assert len(errors) == 1
        assert "another thread" in str(errors[0])
        store.close()

    def test_close_persists_and_reopen_reads(self, tmp_path: Path) -> None:
        store = LmdbStore(tmp_path / "s", map_size=1 << 26)
        store.put(4, b"k", b"v")
        store.close()
        reopened = LmdbStore(tmp_path / "s", map_size=1 << 26)
        assert reopened.get(4, b"k") == b"v"
        reopened.close()
        with pytest.raises(StateError, match="closed"):
            store.get(5, b"k")


_WRITE_BUCKETS = """
import sys
from gic_runtime.state.lmdb_store import LmdbStore
from tests.support.memory_probe import anon_kib

store = LmdbStore(sys.argv[1])
value = b"v" * 1000
store.put(0, b"warm-up", value)
store.flush()
before = anon_kib()
for bucket in range(1, 33):  # 32 buckets of 2,000 values: a range loaded or restored
    store.put_many(bucket, [(b"%08d" % i, value) for i in range(2000)])
    store.flush()
print(anon_kib() - before)
store.close()
"""


class TestLmdbMemory:
    def test_writing_many_buckets_keeps_no_copy_of_their_pages(self, tmp_path: Path) -> None:
        """64 MB written into 32 environments, one transaction each: LMDB's own copies
        of dirtied pages would stay on each environment's free list (about the data's
        size); written into the map, the process keeps only what it holds."""
        child = subprocess.run(
            [sys.executable, "-c", _WRITE_BUCKETS, str(tmp_path / "s")],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert child.returncode == 0, child.stderr
        assert int(child.stdout) < 16 * 1024, f"anonymous memory grew {child.stdout} KiB"

    def test_a_sorted_load_fills_pages_whole(self, tmp_path: Path) -> None:
        """2 KB values put one by one take a 4 KiB page each; appended, half of one."""
        items = [(i.to_bytes(8, "big"), bytes([i % 251]) * 2000) for i in range(2000)]
        put = LmdbStore(tmp_path / "put")
        put.put_many(0, items)
        put.flush()
        loaded = LmdbStore(tmp_path / "loaded")
        assert loaded.load_sorted(0, items) == len(items)
        loaded.flush()
        assert loaded.scan(0, b"") == put.scan(0, b"") == items

        def pages(store: LmdbStore) -> int:
            env = store._env(0).env
            return int(env.info()["last_pgno"])

        assert pages(loaded) < 0.6 * pages(put)
        put.close()
        loaded.close()

    def test_a_nearly_full_disk_refuses_a_write_and_leaves_the_data(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        store = LmdbStore(tmp_path / "s", map_size=1 << 26)
        store.put(0, b"k", b"v")
        store.flush()
        real = lmdb_store.os.statvfs

        def nearly_full(path: object) -> os.statvfs_result:  # the seam: the filesystem
            st = real(path)  # type: ignore[arg-type]
            fields = list(st)
            fields[4] = 100  # f_bavail: 100 blocks
            return os.statvfs_result(fields)

        monkeypatch.setattr(lmdb_store.os, "statvfs", nearly_full)
        with pytest.raises(StateError, match=r"MiB free.*local_dir"):
            store.put(0, b"k", b"w")
        monkeypatch.undo()
        assert store.get(0, b"k") == b"v"
        store.close()


_READ_BUCKET = """
import sys
from gic_runtime.state.lmdb_store import LmdbStore

store = LmdbStore(sys.argv[1])
items = store.scan(int(sys.argv[2]), b"")
meta = store.get_meta(int(sys.argv[2]))
print(len(items), sum(len(v) for _, v in items), meta.seq, meta.token)
store.close()
"""


def _writemap(store: LmdbStore, bucket: int) -> bool:
    return bool(store._env(bucket).env.flags()["writemap"])


def _rebuild(
    store: KVStore,
    bucket: int,
    items: list[tuple[bytes, bytes]],
    changes: list[tuple[Op, bytes, bytes]],
    meta: BucketMeta,
) -> None:
    """What a restore does to a bucket: clear, load, replay, metadata, flush."""
    with store.rebuilding(bucket):
        store.clear_bucket(bucket)
        store.load_sorted(bucket, items)
        store.apply(bucket, changes)
        store.set_meta(bucket, meta)
        store.flush()


class TestLmdbRebuild:
    """A bucket rewritten wholesale goes through LMDB's own writes, in small
    transactions, and the environment gets its writable map back afterwards."""

    ITEMS = [(b"%08d" % i, bytes([i % 251]) * 2000) for i in range(3000)]  # 6 MB, 3 x 1,024
    CHANGES = [(Op.PUT, b"%08d" % i, b"new") for i in range(0, 3000, 7)] + [
        (Op.DELETE, b"%08d" % i, b"") for i in range(1, 3000, 11)
    ]

    def expected(self) -> list[tuple[bytes, bytes]]:
        model = InMemoryStore()
        model.put(0, b"stale", b"gone after the clear")
        _rebuild(model, 0, self.ITEMS, self.CHANGES, BucketMeta(9, "t"))
        return model.scan(0, b"")

    def test_a_rebuild_writes_without_the_map_then_reopens_it(self, tmp_path: Path) -> None:
        store = LmdbStore(tmp_path / "s", map_size=1 << 28)
        store.put(0, b"stale", b"gone after the clear")
        store.put(1, b"other", b"bucket")
        assert _writemap(store, 0)
        with store.rebuilding(0):
            assert not _writemap(store, 0)
            assert _writemap(store, 1)
            store.clear_bucket(0)
            assert store.load_sorted(0, self.ITEMS) == len(self.ITEMS)
            store.apply(0, self.CHANGES)
            store.set_meta(0, BucketMeta(9, "t"))
        assert _writemap(store, 0)
        assert store.scan(0, b"") == self.expected()
        assert store.get_meta(0) == BucketMeta(9, "t")
        assert store.get(1, b"other") == b"bucket"
        store.put(0, b"after", b"through the map again")
        store.set_meta(0, BucketMeta(10, "u"))
        store.flush()
        child = subprocess.run(
            [sys.executable, "-c", _READ_BUCKET, str(tmp_path / "s"), "0"],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert child.returncode == 0, child.stderr
        rows = store.scan(0, b"")
        assert child.stdout.split() == [
            str(len(rows)),
            str(sum(len(v) for _, v in rows)),
            "10",
            "u",
        ]
        store.close()

    def test_another_process_sees_a_rebuild_of_a_bucket_it_has_open(self, tmp_path: Path) -> None:
        """The other process keeps its environment open with the writable map while
        this one rebuilds the bucket without it; it reads every committed change."""
        directory = tmp_path / "s"
        store = LmdbStore(directory, map_size=1 << 28)
        store.put(0, b"stale", b"x")
        store.flush()
        script = (
            "import sys\n"
            "from gic_runtime.state.lmdb_store import LmdbStore\n"
            "s = LmdbStore(sys.argv[1])\n"
            "print(len(s.scan(0, b'')), flush=True)\n"
            "sys.stdin.readline()\n"
            "rows = s.scan(0, b'')\n"
            "print(len(rows), sum(len(v) for _, v in rows), s.get_meta(0).token, flush=True)\n"
            "s.close()\n"
        )
        child = subprocess.Popen(
            [sys.executable, "-c", script, str(directory)],
            cwd=REPO,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        assert child.stdout is not None and child.stdin is not None
        assert child.stdout.readline().split() == ["1"]
        _rebuild(store, 0, self.ITEMS, self.CHANGES, BucketMeta(9, "t"))
        out, err = child.communicate("go\n", timeout=120)
        assert child.returncode == 0, err
        rows = self.expected()
        assert out.split() == [str(len(rows)), str(sum(len(v) for _, v in rows)), "t"]
        store.close()

    def test_an_open_view_keeps_the_map_and_its_content(self, tmp_path: Path) -> None:
        store = LmdbStore(tmp_path / "s", map_size=1 << 28)
        store.put(0, b"old", b"1")
        view = store.snapshot_items(0)
        with store.rebuilding(0):
            assert _writemap(store, 0)  # not reopened under the view's transaction
            store.clear_bucket(0)
            store.load_sorted(0, self.ITEMS[:5])
        assert list(view) == [(b"old", b"1")]
        assert store.scan(0, b"") == self.ITEMS[:5]
        with store.rebuilding(0):  # the view is closed: this one reopens
            assert not _writemap(store, 0)
        store.close()

    def test_an_error_inside_leaves_no_metadata_and_the_map_back(self, tmp_path: Path) -> None:
        store = LmdbStore(tmp_path / "s", map_size=1 << 28)
        store.put(0, b"k", b"v")
        store.set_meta(0, BucketMeta(3, "t"))
        store.flush()
        with pytest.raises(StateError, match="ascend"), store.rebuilding(0):
            store.clear_bucket(0)
            store.load_sorted(0, self.ITEMS[:2000])
            store.load_sorted(0, [(b"0", b"below the loaded keys")])
        assert _writemap(store, 0)
        assert store.get_meta(0) is None
        assert store.scan(0, b"") == self.ITEMS[:2000]
        store.put(0, b"z", b"usable")
        assert store.get(0, b"z") == b"usable"
        store.close()

    @settings(max_examples=40, deadline=None)
    @given(
        keys=st.lists(st.binary(min_size=1, max_size=6), unique=True, max_size=60),
        changes=st.lists(
            st.tuples(
                st.sampled_from([Op.PUT, Op.DELETE, Op.APPEND, Op.DELETE_PREFIX]),
                st.binary(min_size=1, max_size=4),
                st.binary(max_size=30),
            ),
            max_size=60,
        ),
        entries=st.integers(1, 9),
        nbytes=st.integers(1, 200),
    )
    def test_a_rebuild_ends_as_the_same_operations_in_memory(
        self,
        keys: list[bytes],
        changes: list[tuple[Op, bytes, bytes]],
        entries: int,
        nbytes: int,
    ) -> None:
        """Whatever the transaction limits, the rebuilt bucket is what the same
        operations give in memory."""
        items = [(k, k * 3) for k in sorted(keys)]
        changes = [
            (op, k, b"" if op in (Op.DELETE, Op.DELETE_PREFIX) else v) for op, k, v in changes
        ]
        model = InMemoryStore()
        _rebuild(model, 0, items, changes, BucketMeta(1, "t"))
        with tempfile.TemporaryDirectory() as tmp, pytest.MonkeyPatch.context() as mp:
            mp.setattr(lmdb_store, "REBUILD_TXN_ENTRIES", entries)
            mp.setattr(lmdb_store, "REBUILD_TXN_BYTES", nbytes)
            store = LmdbStore(tmp, map_size=1 << 26)
            store.put(0, b"stale", b"x")
            _rebuild(store, 0, items, changes, BucketMeta(1, "t"))
            assert store.scan(0, b"") == model.scan(0, b"")
            assert store.get_meta(0) == BucketMeta(1, "t")
            store.close()

    @given(
        sizes=st.lists(st.tuples(st.integers(0, 20), st.integers(0, 50)), max_size=80),
        entries=st.integers(1, 10),
        nbytes=st.integers(1, 120),
    )
    def test_transaction_slices_cover_the_items_within_the_limits(
        self, sizes: list[tuple[int, int]], entries: int, nbytes: int
    ) -> None:
        items = [(b"k" * k, b"v" * v) for k, v in sizes]
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(lmdb_store, "REBUILD_TXN_ENTRIES", entries)
            mp.setattr(lmdb_store, "REBUILD_TXN_BYTES", nbytes)
            slices = list(lmdb_store._txn_slices(items))
        assert [item for chunk, _ in slices for item in chunk] == items
        for i, (chunk, size) in enumerate(slices):
            assert chunk and size == sum(len(k) + len(v) for k, v in chunk)
            assert len(chunk) <= entries
            # a slice ends early only where its bytes reach the limit
            if i + 1 < len(slices) and len(chunk) < entries:
                assert size >= nbytes
            # and it does not run on past an entry that reached the limit
            assert sum(len(k) + len(v) for k, v in chunk[:-1]) < nbytes


_REBUILD_BUCKETS = """
import sys
from gic_runtime.executor.allocator import tune
from gic_runtime.state.lmdb_store import LmdbStore
from gic_runtime.state.stores import BucketMeta
from tests.support.memory_probe import anon_kib

tune()  # as every executor worker does before its first task
store = LmdbStore(sys.argv[1])
big = bytearray(8 << 20)  # a large block freed: glibc's own threshold would rise past LMDB's
del big
value = b"v" * 1000
store.put(0, b"warm-up", value)
store.flush()
before = anon_kib()
for bucket in range(1, 33):  # 32 buckets of 2,000 values, rebuilt as a restore does
    with store.rebuilding(bucket):
        store.clear_bucket(bucket)
        store.load_sorted(bucket, [(b"%08d" % i, value) for i in range(2000)])
        store.set_meta(bucket, BucketMeta(1, "t"))
        store.flush()
print(anon_kib() - before)
store.close()
"""


def test_rebuilding_many_buckets_keeps_no_copy_of_their_pages(tmp_path: Path) -> None:
    """Without the writable map LMDB copies the pages a transaction dirties and keeps the
    copies until the environment closes: a rebuild writes in small transactions and
    reopens the environment, so 64 MB rebuilt leave (almost) nothing behind. In a
    worker's tuned allocator, that is: LMDB's 2 MiB tables of an environment opened
    without the map are mapped and unmapped on their own; with glibc's rising threshold
    they would come from the heap and stay, about 2 MB a bucket (measured: 73 MB here)."""
    child = subprocess.run(
        [sys.executable, "-c", _REBUILD_BUCKETS, str(tmp_path / "s")],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert child.returncode == 0, child.stderr
    assert int(child.stdout) < 16 * 1024, f"anonymous memory grew {child.stdout} KiB"
