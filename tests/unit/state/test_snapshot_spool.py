"""Snapshots written through a spool file: the same bytes as in memory, the same handle,
the same create-once rule, and a writer's memory bounded by a frame, not by the bucket."""

from __future__ import annotations

import io
import os
import tracemalloc
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tests.support.stores import lost_put_answers, storage_root

from gic_runtime.errors import ObjectExistsError
from gic_runtime.formats import crc32c
from gic_runtime.state import snapshot
from gic_runtime.state.snapshot import (
    encode_snapshot,
    read_snapshot,
    upload_snapshot,
    write_snapshot,
)
from gic_runtime.storage.local import LocalObjectStore

entries = st.dictionaries(
    st.binary(min_size=1, max_size=24), st.binary(max_size=300), max_size=60
).map(lambda d: sorted(d.items()))


@settings(max_examples=60, deadline=None)
@given(items=entries, compress=st.booleans(), frame=st.integers(1, 2_000))
def test_a_written_file_is_the_encoded_one(
    items: list[tuple[bytes, bytes]], compress: bool, frame: int
) -> None:
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(snapshot, "FRAME_RAW_BYTES", frame)  # many frames or one
        out = io.BytesIO()
        size = write_snapshot(iter(items), out, bucket=3, seq=9, compress=compress)
        assert out.tell() == size == len(out.getvalue())
        assert out.getvalue() == encode_snapshot(items, bucket=3, seq=9, compress=compress)


@pytest.mark.parametrize("compress", [False, True])
def test_a_spooled_upload_stores_the_encoded_file_and_leaves_no_file(
    tmp_path: Path, compress: bool
) -> None:
    storage = storage_root(LocalObjectStore(tmp_path / "store"))
    spool = tmp_path / "spool"
    spool.mkdir()
    items = [(b"k%05d" % i, os.urandom(40)) for i in range(3_000)]
    uri = storage.store.uri_for("s/1.snap")
    handle = upload_snapshot(
        storage.resolver, uri, items, bucket=5, seq=42, compress=compress, spool_dir=spool
    )
    expected = encode_snapshot(items, bucket=5, seq=42, compress=compress)
    assert storage.store.get("s/1.snap") == expected
    assert (handle.size, handle.crc, handle.bucket, handle.seq) == (
        len(expected),
        crc32c(expected),
        5,
        42,
    )
    assert list(read_snapshot(storage.resolver, handle)) == items
    assert list(spool.iterdir()) == []


def test_a_lost_answer_to_our_own_spooled_put_is_success_and_another_object_is_not(
    tmp_path: Path,
) -> None:
    base = storage_root(LocalObjectStore(tmp_path / "store"))
    lost = lost_put_answers(base, lambda: ObjectExistsError("exists (retried request)"), 1)
    uri = base.store.uri_for("s/1.snap")
    spool = tmp_path / "not" / "yet"  # created
    handle = upload_snapshot(
        lost.resolver, uri, [(b"a", b"1")], bucket=0, seq=1, compress=True, spool_dir=spool
    )
    assert spool.is_dir()
    assert list(read_snapshot(base.resolver, handle)) == [(b"a", b"1")]
    with pytest.raises(ObjectExistsError):
        upload_snapshot(
            base.resolver, uri, [(b"a", b"2")], bucket=0, seq=1, compress=True, spool_dir=tmp_path
        )
    assert list(read_snapshot(base.resolver, handle)) == [(b"a", b"1")]


def _bucket(entries: int, value_bytes: int) -> Iterator[tuple[bytes, bytes]]:
    """A bucket's entries made as they are read: values that compress about 2:1."""
    for i in range(entries):
        yield b"key%08d" % i, os.urandom(value_bytes // 2) * 2


@pytest.mark.parametrize("compress", [False, True])
def test_a_spooled_upload_holds_a_frame_not_the_bucket(tmp_path: Path, compress: bool) -> None:
    """32 MiB of entries (16 compressed) go out with a few MiB of Python memory at most:
    in memory the same upload holds the whole file at least once."""
    storage = storage_root(LocalObjectStore(tmp_path / "store"))

    def peak(name: str, spool_dir: Path | None) -> int:
        """Python memory at the peak of one upload of a 32 MiB bucket."""
        tracemalloc.start()
        try:
            upload_snapshot(
                storage.resolver,
                storage.store.uri_for(name),
                _bucket(16_000, 2_000),
                bucket=1,
                seq=1,
                compress=compress,
                spool_dir=spool_dir,
            )
            return tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()

    spooled_peak = peak("spooled.snap", tmp_path)
    in_memory_peak = peak("in-memory.snap", None)
    stored = storage.store.size("spooled.snap")
    assert stored > 15 * 2**20
    assert spooled_peak < 4 * snapshot.FRAME_RAW_BYTES < stored / 2
    assert in_memory_peak > stored
