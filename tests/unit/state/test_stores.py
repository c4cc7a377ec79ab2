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
from gic_runtime.state.memory_store import SortedKeys, prefix_end
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
