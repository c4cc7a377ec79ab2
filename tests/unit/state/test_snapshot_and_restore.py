"""Snapshot file format (round trip, every corruption is a clear error naming the URI)
and bucket restore (snapshot + replay, gaps, missing files)."""

from __future__ import annotations

import struct
import zlib
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pytest

from gic_runtime.changelog.records import ChangeRecord, Op
from gic_runtime.errors import CorruptFileError, RestoreError, UnsupportedVersionError
from gic_runtime.formats import crc32c
from gic_runtime.handles import BucketState, ChangelogHandle, SnapshotHandle
from gic_runtime.state.lmdb_store import LmdbStore
from gic_runtime.state.memory_store import InMemoryStore
from gic_runtime.state.restore import restore_bucket
from gic_runtime.state.snapshot import (
    encode_snapshot,
    parse_snapshot,
    read_snapshot,
    upload_snapshot,
)
from gic_runtime.state.stores import BucketMeta
from gic_runtime.storage.local import LocalObjectStore
from gic_runtime.storage.uri import StoreResolver

ITEMS = [(b"k%04d" % i, b"v" * (i % 7)) for i in range(300)]
URI = "file:///tmp/example.snap"


class TestSnapshotFormat:
    @pytest.mark.parametrize("compress", [False, True])
    def test_round_trip(self, compress: bool) -> None:
        data = encode_snapshot(ITEMS, bucket=5, seq=42, compress=compress)
        info, entries = parse_snapshot(data, uri=URI)
        assert (info.bucket, info.seq, info.entries, info.compressed) == (5, 42, 300, compress)
        assert list(entries) == ITEMS

    def test_empty(self) -> None:
        info, entries = parse_snapshot(encode_snapshot([], bucket=0, seq=0), uri=URI)
        assert info.entries == 0 and list(entries) == []

    @pytest.mark.parametrize("where", [10, 30, 60, -1])
    def test_flipped_byte(self, where: int) -> None:
        data = bytearray(encode_snapshot(ITEMS, bucket=5, seq=42))
        data[where] ^= 0x40
        with pytest.raises(CorruptFileError, match="checksum mismatch") as err:
            parse_snapshot(bytes(data), uri=URI)
        assert URI in str(err.value)

    @pytest.mark.parametrize("keep", [0, 6, 20, 47, 100])
    def test_truncated(self, keep: int) -> None:
        data = encode_snapshot(ITEMS, bucket=5, seq=42)[:keep]
        with pytest.raises(CorruptFileError, match="truncated") as err:
            parse_snapshot(data, uri=URI)
        assert URI in str(err.value)

    def test_trailing_bytes(self) -> None:
        with pytest.raises(CorruptFileError, match="trailing"):
            parse_snapshot(encode_snapshot(ITEMS, bucket=5, seq=42) + b"x", uri=URI)

    def test_unknown_version(self) -> None:
        data = bytearray(encode_snapshot(ITEMS, bucket=5, seq=42))
        struct.pack_into("<H", data, 4, 9)
        with pytest.raises(UnsupportedVersionError, match="version 9") as err:
            parse_snapshot(bytes(data), uri=URI)
        assert URI in str(err.value)

    def test_foreign_magic(self) -> None:
        with pytest.raises(CorruptFileError, match="not a GICS file"):
            parse_snapshot(b"GICL" + encode_snapshot(ITEMS, bucket=5, seq=42)[4:], uri=URI)

    def test_new_snapshots_are_zstd_and_zlib_ones_still_read(self) -> None:
        data = encode_snapshot(ITEMS, bucket=5, seq=42, compress=True)
        assert struct.unpack_from("<HH", data, 4) == (2, 2)  # version 2, flags bit 1: zstd
        assert struct.unpack_from("<H", encode_snapshot(ITEMS, bucket=5, seq=42), 4) == (1,)
        assert len(data) < len(encode_snapshot(ITEMS, bucket=5, seq=42)) / 3
        info, entries = parse_snapshot(_legacy_zlib(ITEMS, bucket=5, seq=42), uri=URI)
        assert (info.bucket, info.seq, info.compressed) == (5, 42, True)
        assert list(entries) == ITEMS

    def test_a_compressed_body_is_a_frame_per_so_many_entry_bytes(
        self, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        from gic_runtime.state import snapshot

        items = [(b"k%05d" % i, bytes([i % 251]) * (20 + i % 50)) for i in range(2_000)]
        framed = [struct.pack("<II", len(k), len(v)) + k + v for k, v in items]
        raw = b"".join(framed)
        monkeypatch.setattr(snapshot, "FRAME_RAW_BYTES", 10_000)
        # the expected frames, from the rule: a frame closes once it holds 10,000 bytes
        chunks, pending = [], b""
        for entry in framed:
            pending += entry
            if len(pending) >= 10_000:
                chunks.append(pending)
                pending = b""
        chunks.append(pending)
        codec = pa.Codec("zstd", compression_level=snapshot.ZSTD_LEVEL)
        frames: list[bytes] = []
        count, length = snapshot._frames(
            iter(items), lambda raw: frames.append(codec.compress(raw, asbytes=True))
        )
        assert (count, length) == (2_000, len(raw))
        assert len(frames) == len(chunks) > 5
        for frame, chunk in zip(frames, chunks, strict=True):
            assert pa.decompress(frame, decompressed_size=len(chunk), codec="zstd") == chunk
        # the body is <Q raw length> + the frames, which decompress as one stream
        data = encode_snapshot(iter(items), bucket=5, seq=42, compress=True)
        stored = data[PREAMBLE:]
        assert stored == struct.pack("<Q", len(raw)) + b"".join(frames)
        info, entries = parse_snapshot(data, uri=URI)
        assert (info.entries, info.compressed) == (2_000, True)
        assert list(entries) == items
        # a reader takes one frame or many alike: the one-frame body of the same entries
        one = _framed(struct.pack("<Q", len(raw)) + _zstd(raw), flags=2, count=2_000, version=2)
        assert list(parse_snapshot(one, uri=URI)[1]) == items

    def test_zstd_body_damage_is_a_clear_error(self) -> None:
        plain = encode_snapshot(ITEMS, bucket=5, seq=42)
        body = plain[PREAMBLE:]
        cases = {
            "truncated": b"\x01\x02",
            "does not decompress": struct.pack("<Q", len(body)) + b"not a zstd frame",
            f"to the {len(body) + 5} bytes it states": struct.pack("<Q", len(body) + 5)
            + _zstd(body),
            "more than": struct.pack("<Q", 1 << 40) + _zstd(body),
        }
        for message, stored in cases.items():
            with pytest.raises(CorruptFileError, match=message) as err:
                parse_snapshot(_framed(stored, flags=2, count=300, version=2), uri=URI)
            assert URI in str(err.value)
        for version, flags in [(2, 1), (2, 3), (1, 2)]:
            framed = _framed(body, flags=flags, count=300, version=version)
            with pytest.raises(CorruptFileError, match=f"version {version}.*unknown flags"):
                parse_snapshot(framed, uri=URI)

    def test_handle_must_match_file(
        self, resolver: StoreResolver, object_store: LocalObjectStore
    ) -> None:
        uri = object_store.uri_for("s/1.snap")
        handle = upload_snapshot(resolver, uri, ITEMS, bucket=5, seq=42)
        assert list(read_snapshot(resolver, handle)) == ITEMS
        wrong = SnapshotHandle(uri, 6, 42, handle.size, handle.crc)
        with pytest.raises(CorruptFileError, match="handle names bucket 6"):
            read_snapshot(resolver, wrong)
        with pytest.raises(CorruptFileError, match="handle says"):
            read_snapshot(resolver, SnapshotHandle(uri, 5, 42, handle.size + 1, handle.crc))
        with pytest.raises(RestoreError, match="missing"):
            read_snapshot(resolver, SnapshotHandle(uri + ".gone", 5, 42, 1, 1))


PREAMBLE = 44
"""Bytes before a snapshot's body (docs/architecture.md §4.3)."""


def _framed(
    stored: bytes, *, flags: int, count: int, bucket: int = 5, seq: int = 42, version: int = 1
) -> bytes:
    """A snapshot file around ``stored`` (the body as stored), written from the documented
    layout rather than by the module under test."""
    head = b"GICS" + struct.pack("<HH", version, flags)
    head += struct.pack("<IQQQI", bucket, seq, count, len(stored), crc32c(stored))
    return head + struct.pack("<I", crc32c(head)) + stored


def _legacy_zlib(items: list[tuple[bytes, bytes]], *, bucket: int, seq: int) -> bytes:
    """A snapshot as runtimes before the zstd flag wrote it: flag bit 0, zlib level 6."""
    body = b"".join(struct.pack("<II", len(k), len(v)) + k + v for k, v in items)
    return _framed(zlib.compress(body, 6), flags=1, count=len(items), bucket=bucket, seq=seq)


def _zstd(raw: bytes) -> bytes:
    """One zstd frame of ``raw``."""
    return pa.compress(raw, codec="zstd", asbytes=True)


class TestingSectionReader:
    """Serves fixed records per handle URI, like changelog.reader.read_changes."""

    __test__ = False

    def __init__(self, sections: dict[str, list[ChangeRecord]]) -> None:
        self.sections = sections

    def __call__(
        self,
        resolver: StoreResolver,
        handle: ChangelogHandle,
        *,
        from_seq: int = 0,
        to_seq: int | None = None,
    ) -> Iterator[ChangeRecord]:
        for r in self.sections[handle.uri]:
            if r.seq >= from_seq and (to_seq is None or r.seq < to_seq):
                yield r


def _handle(uri: str, lo: int, hi: int, bucket: int = 1) -> ChangelogHandle:
    return ChangelogHandle(uri, 0, 1, bucket, lo, hi, 0)


def _puts(lo: int, hi: int) -> list[ChangeRecord]:
    return [ChangeRecord(i, Op.PUT, b"k%d" % (i % 3), b"%d" % i) for i in range(lo, hi)]


class TestRestoreBucket:
    def test_snapshot_then_replay_from_base(
        self, resolver: StoreResolver, object_store: LocalObjectStore
    ) -> None:
        snap = upload_snapshot(
            resolver,
            object_store.uri_for("b1.snap"),
            [(b"k0", b"old"), (b"z", b"1")],
            bucket=1,
            seq=4,
        )
        reader = TestingSectionReader(
            {"s1": _puts(0, 5), "s2": [*_puts(5, 6), ChangeRecord(6, Op.APPEND, b"z", b"2")]}
        )
        state = BucketState(1, 7, snap, (_handle("s1", 0, 5), _handle("s2", 5, 7)), "s2")
        store = InMemoryStore()
        store.put(1, b"stale", b"x")
        stats = restore_bucket(store, state, resolver, reader=reader)
        assert (stats.snapshot_entries, stats.replayed) == (2, 3)
        assert dict(store.scan(1, b"")) == {b"k0": b"old", b"k1": b"4", b"k2": b"5", b"z": b"12"}
        assert store.get_meta(1) == BucketMeta(7, "s2")

    @pytest.mark.parametrize("kind", ["memory", "lmdb"])
    def test_a_snapshot_whose_keys_do_not_ascend_is_corrupt(
        self, resolver: StoreResolver, object_store: LocalObjectStore, tmp_path: Path, kind: str
    ) -> None:
        """A restore appends a snapshot's entries in order (LMDB: MDB_APPEND); entries
        out of order are a damaged snapshot, and the bucket is left empty."""
        unsorted = [(b"b", b"1"), (b"a", b"2")]
        snap = upload_snapshot(
            resolver, object_store.uri_for("bad.snap"), unsorted, bucket=1, seq=2
        )
        store = InMemoryStore() if kind == "memory" else LmdbStore(tmp_path / "lmdb")
        store.put(1, b"stale", b"x")
        with pytest.raises(CorruptFileError, match="keys do not ascend"):
            restore_bucket(store, BucketState(1, 2, snap, (), "t"), resolver)
        assert store.scan(1, b"") == [] and store.get_meta(1) is None

    def test_gap_between_handles(self, resolver: StoreResolver) -> None:
        state = BucketState(1, 9, None, (_handle("s1", 0, 3), _handle("s2", 5, 9)), "s2")
        with pytest.raises(RestoreError, match=r"bucket 1: changelog is missing changes \[3, 5\)"):
            restore_bucket(InMemoryStore(), state, resolver, reader=TestingSectionReader({}))

    def test_handles_end_early(self, resolver: StoreResolver) -> None:
        state = BucketState(1, 9, None, (_handle("s1", 0, 3),), "s1")
        with pytest.raises(RestoreError, match=r"missing changes \[3, 9\)"):
            restore_bucket(InMemoryStore(), state, resolver, reader=TestingSectionReader({}))

    def test_records_missing_inside_a_section(self, resolver: StoreResolver) -> None:
        records = [r for r in _puts(0, 6) if r.seq != 2]
        state = BucketState(1, 6, None, (_handle("s1", 0, 6),), "s1")
        store = InMemoryStore()
        with pytest.raises(
            RestoreError, match=r"bucket 1: changelog s1 is missing changes \[2, 3\)"
        ):
            restore_bucket(store, state, resolver, reader=TestingSectionReader({"s1": records}))
        assert store.get_meta(1) is None  # a failed restore never claims a lineage

    def test_section_shorter_than_its_handle(self, resolver: StoreResolver) -> None:
        state = BucketState(1, 6, None, (_handle("s1", 0, 6),), "s1")
        with pytest.raises(RestoreError, match=r"missing changes \[4, 6\)"):
            restore_bucket(
                InMemoryStore(), state, resolver, reader=TestingSectionReader({"s1": _puts(0, 4)})
            )

    def test_foreign_bucket_handle(self, resolver: StoreResolver) -> None:
        state = BucketState(1, 2, None, (_handle("s1", 0, 2, bucket=2),), "s1")
        with pytest.raises(RestoreError, match="belongs to bucket 2"):
            restore_bucket(InMemoryStore(), state, resolver, reader=TestingSectionReader({}))
