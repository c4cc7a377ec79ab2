"""Unmapping the local copy's pages after a task: the data stays, the process's resident
size of the files goes (gic_runtime.state.mapped_pages, LmdbStore's environments)."""

from __future__ import annotations

import mmap
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from tests.support.processes import fresh_python

from gic_runtime.state import mapped_pages
from gic_runtime.state.lmdb_store import LmdbStore, bound_mapped_pages, release_mapped_pages

VALUE = b"v" * 1500
KEYS = [i.to_bytes(8, "big") for i in range(4000)]  # about 8 MB: many pages a bucket


def _data_files(store: LmdbStore, buckets: range) -> set[str]:
    return {str((store.directory / f"bucket-{b:05d}" / "data.mdb").resolve()) for b in buckets}


def _fill(store: LmdbStore, buckets: range) -> None:
    for bucket in buckets:
        store.put_many(bucket, [(k, VALUE + bucket.to_bytes(2, "big")) for k in KEYS])
    store.flush()


def _read_all(store: LmdbStore, buckets: range) -> None:
    for bucket in buckets:
        assert store.get_many(bucket, KEYS) == [VALUE + bucket.to_bytes(2, "big")] * len(KEYS)


def test_released_pages_leave_the_process_and_keep_their_data(tmp_path: Path) -> None:
    buckets = range(3)
    store = LmdbStore(tmp_path / "local")
    try:
        _fill(store, buckets)
        _read_all(store, buckets)
        files = _data_files(store, buckets)
        before = mapped_pages.resident_bytes(files)
        assert before is not None and before > 3 * len(KEYS) * len(VALUE) // 2

        released = release_mapped_pages()

        assert released.supported and released.failed == 0
        assert released.mappings >= len(buckets)
        assert mapped_pages.resident_bytes(files) == 0
        _read_all(store, buckets)  # the same data, mapped again from the page cache
        assert mapped_pages.resident_bytes(files) == before
    finally:
        store.close()


def test_changes_made_before_a_release_are_not_lost(tmp_path: Path) -> None:
    """Dirty pages of the writable map move to the page cache, and the next process that
    opens the directory reads them."""
    store = LmdbStore(tmp_path / "local")
    try:
        _fill(store, range(1))
        store.put(0, KEYS[7], b"changed")
        store.flush()
        release_mapped_pages()
        store.put(0, KEYS[8], b"after")  # writing into the map again after the release
        store.flush()
        release_mapped_pages()
    finally:
        store.close()
    code = (
        "import sys\n"
        "from gic_runtime.state.lmdb_store import LmdbStore\n"
        "s = LmdbStore(sys.argv[1])\n"
        "k = lambda i: i.to_bytes(8, 'big')\n"
        "print(s.get(0, k(7)).decode(), s.get(0, k(8)).decode(), s.get(0, k(9))[:5] == b'vvvvv')\n"
        "s.close()\n"
    )
    assert fresh_python(code, str(tmp_path / "local")).split() == ["changed", "after", "True"]


def test_a_private_mapping_of_the_same_file_keeps_its_own_changes(tmp_path: Path) -> None:
    """Dropping a private (copy-on-write) mapping's pages would discard its changes:
    only shared mappings are released."""
    path = tmp_path / "file"
    path.write_bytes(b"a" * mmap.PAGESIZE * 4)
    with path.open("r+b") as f, mmap.mmap(f.fileno(), 0, flags=mmap.MAP_PRIVATE) as private:
        private[0:5] = b"mine!"
        released = mapped_pages.release({str(path.resolve())})
        assert released.mappings == 0
        assert private[0:5] == b"mine!"
    assert path.read_bytes()[:5] == b"aaaaa"


def test_a_shared_mapping_of_the_same_file_is_released_and_keeps_its_changes(
    tmp_path: Path,
) -> None:
    path = tmp_path / "file"
    path.write_bytes(b"a" * mmap.PAGESIZE * 4)
    name = str(path.resolve())
    with path.open("r+b") as f, mmap.mmap(f.fileno(), 0) as shared:
        shared[0:5] = b"ours!"
        assert mapped_pages.resident_bytes({name})
        assert mapped_pages.release({name}).mappings == 1
        assert mapped_pages.resident_bytes({name}) == 0
        assert shared[0:5] == b"ours!"
    assert path.read_bytes()[:5] == b"ours!"


_MiB = 1024 * 1024


def test_the_gate_opens_once_file_backed_memory_grew_by_the_limit(tmp_path: Path) -> None:
    """The gate follows the process's resident file-backed memory: pages of a shared file
    mapping written below the limit keep it shut, past it open it, and after a release
    growth counts from what stays."""
    path = tmp_path / "file"
    with path.open("w+b") as f:
        f.truncate(160 * _MiB)
        with mmap.mmap(f.fileno(), 0) as shared:
            gate = mapped_pages.GrowthGate(64 * _MiB)
            gate.released()
            for offset in range(0, 16 * _MiB, mmap.PAGESIZE):
                shared[offset] = 1
            assert not gate.should_release()
            for offset in range(16 * _MiB, 144 * _MiB, mmap.PAGESIZE):
                shared[offset] = 1
            assert gate.should_release()
            assert mapped_pages.release({str(path.resolve())}).mappings == 1
            gate.released()
            assert not gate.should_release()
            assert shared[100 * _MiB] == 1  # the data stayed


def test_a_gate_needs_a_positive_limit() -> None:
    with pytest.raises(ValueError, match="at least 1 byte"):
        mapped_pages.GrowthGate(0)


def test_bound_mapped_pages_releases_only_past_its_limit(tmp_path: Path) -> None:
    store = LmdbStore(tmp_path / "local")
    try:
        _fill(store, range(2))
        files = _data_files(store, range(2))
        assert bound_mapped_pages(0) is None  # no bound
        assert bound_mapped_pages(1 << 40) is None  # far from it
        assert mapped_pages.resident_bytes(files)
        released = bound_mapped_pages(1)
        assert released is not None and released.mappings >= 2
        assert mapped_pages.resident_bytes(files) == 0
        _read_all(store, range(2))
    finally:
        store.close()


def test_nothing_named_nothing_released() -> None:
    assert mapped_pages.release(set()) == mapped_pages.Released(supported=True)


_paths = st.sampled_from(["/d/a/data.mdb", "/d/b/data.mdb", "/d/with space/data.mdb", ""])


@given(
    st.lists(
        st.tuples(
            st.integers(0, 2**40),
            st.integers(1, 2**20),
            st.sampled_from(["rw-s", "r--s", "rw-p", "r--p"]),
            _paths,
        ),
        max_size=12,
    ),
    st.sets(_paths, max_size=3),
)
def test_exactly_the_shared_mappings_of_the_named_files_are_found(
    rows: list[tuple[int, int, str, str]], wanted: set[str]
) -> None:
    text = "\n".join(
        f"{start:x}-{start + length:x} {perms} 00000000 08:01 1234                       {path}"
        for start, length, perms, path in rows
    )
    expected = [
        (start, start + length)
        for start, length, perms, path in rows
        if path and path in wanted and perms.endswith("s")
    ]
    assert mapped_pages.shared_mappings(wanted, text) == expected
