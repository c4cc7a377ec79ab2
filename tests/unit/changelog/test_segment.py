"""The segment format: round trips, compression, corruption, truncation, versions."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gic_runtime.changelog.reader import read_changes, read_section
from gic_runtime.changelog.records import ChangeRecord, Op
from gic_runtime.changelog.segment import (
    Codec,
    SegmentBuilder,
    decode_section,
    encode_records,
    iter_sections,
    section_header_size,
)
from gic_runtime.errors import CorruptFileError, UnsupportedVersionError
from gic_runtime.formats import crc32c, pack_header
from gic_runtime.storage import LocalObjectStore, StoreResolver

URI = "file:///segment-under-test.seg"

records_strategy = st.lists(
    st.tuples(
        st.sampled_from(list(Op)),
        st.binary(max_size=40),
        st.binary(max_size=200),
    ),
    min_size=1,
    max_size=30,
)


def _records(from_seq: int, items: list[tuple[Op, bytes, bytes]]) -> list[ChangeRecord]:
    return [ChangeRecord(from_seq + i, op, k, v) for i, (op, k, v) in enumerate(items)]


def _one_section(
    items: list[tuple[Op, bytes, bytes]], *, codec: Codec = Codec.ZSTD, from_seq: int = 7
) -> tuple[bytes, int, int]:
    builder = SegmentBuilder(codec=codec)
    builder.add_records(3, from_seq, _records(from_seq, items))
    data, [info] = builder.build()
    return data, info.offset, info.length


class TestRoundTrip:
    @settings(max_examples=150, deadline=None)
    @given(
        sections=st.lists(
            st.tuples(st.integers(0, 127), st.integers(0, 2**40), records_strategy),
            min_size=1,
            max_size=5,
        ),
        codec=st.sampled_from(list(Codec)),
    )
    def test_every_section_reads_back_equal(
        self, sections: list[tuple[int, int, list[tuple[Op, bytes, bytes]]]], codec: Codec
    ) -> None:
        builder = SegmentBuilder(codec=codec, min_compress_bytes=0)
        for bucket, from_seq, items in sections:
            builder.add_records(bucket, from_seq, _records(from_seq, items))
        data, infos = builder.build()

        assert len(infos) == len(sections)
        for info, (bucket, from_seq, items) in zip(infos, sections, strict=True):
            handle = info.handle(URI)
            part = data[info.offset : info.offset + info.length]
            got_bucket, got_from, records = decode_section(part, uri=URI, expect=handle)
            assert (got_bucket, got_from) == (bucket, from_seq)
            assert records == _records(from_seq, items)
            assert (handle.from_seq, handle.to_seq) == (from_seq, from_seq + len(items))
        whole = [(info, recs) for info, recs in iter_sections(data, uri=URI)]
        assert [info for info, _ in whole] == infos

    def test_reader_fetches_one_section_and_filters_by_seq(self, tmp_path: Path) -> None:
        store = LocalObjectStore(tmp_path)
        resolver = StoreResolver()
        resolver.register(store)
        builder = SegmentBuilder()
        builder.add_records(1, 0, _records(0, [(Op.PUT, b"a", b"1")] * 5))
        builder.add_records(2, 10, _records(10, [(Op.DELETE, b"b", b"")] * 5))
        data, infos = builder.build()
        store.put("seg", data)
        handle = infos[1].handle(store.uri_for("seg"))

        got = list(read_changes(resolver, handle, from_seq=12, to_seq=14))

        assert [r.seq for r in got] == [12, 13]
        assert all(r.op is Op.DELETE for r in got)
        assert list(read_changes(resolver, handle, from_seq=15)) == []
        assert len(read_section(resolver, handle)) == 5


class TestCompression:
    def test_compressible_payload_is_stored_smaller(self) -> None:
        items = [(Op.PUT, b"key-%d" % (i % 4), b"v" * 100) for i in range(200)]
        raw, _ = encode_records(items)
        data, _, length = _one_section(items, codec=Codec.ZSTD)
        assert length < len(raw) // 4
        [(_, records)] = list(iter_sections(data, uri=URI))
        assert len(records) == 200

    def test_incompressible_payload_is_stored_raw(self) -> None:
        import random

        noise = random.Random(1).randbytes(4000)
        items = [(Op.PUT, b"k", noise)]
        raw, _ = encode_records(items)
        _, _, length = _one_section(items, codec=Codec.ZSTD)
        assert length == section_header_size() + len(raw)


class TestCorruption:
    @settings(max_examples=200, deadline=None)
    @given(items=records_strategy, data=st.data(), codec=st.sampled_from(list(Codec)))
    def test_any_flipped_byte_in_a_section_is_reported_never_wrong_data(
        self, items: list[tuple[Op, bytes, bytes]], data: st.DataObject, codec: Codec
    ) -> None:
        segment, offset, length = _one_section(items, codec=codec)
        position = data.draw(st.integers(offset, offset + length - 1))
        flip = data.draw(st.integers(1, 255))
        damaged = bytearray(segment)
        damaged[position] ^= flip
        section = bytes(damaged[offset : offset + length])
        builder_handle = SegmentBuilder(codec=codec)
        builder_handle.add_records(3, 7, _records(7, items))
        _, [info] = builder_handle.build()

        with pytest.raises(CorruptFileError) as err:
            decode_section(section, uri=URI, expect=info.handle(URI))
        assert URI in str(err.value)
        # Without the handle's expectations the section's own checksums still catch it.
        with pytest.raises(CorruptFileError):
            decode_section(section, uri=URI)

    def test_truncated_section_is_corrupt(self) -> None:
        segment, offset, length = _one_section([(Op.PUT, b"k", b"v" * 50)] * 3)
        for cut in (1, 5, section_header_size(), length - 1):
            with pytest.raises(CorruptFileError, match="segment-under-test"):
                decode_section(segment[offset : offset + cut], uri=URI)

    def test_object_truncated_at_a_section_boundary_is_corrupt(self) -> None:
        builder = SegmentBuilder()
        builder.add_records(1, 0, _records(0, [(Op.PUT, b"a", b"1")]))
        builder.add_records(2, 0, _records(0, [(Op.PUT, b"b", b"2")]))
        data, infos = builder.build()
        with pytest.raises(CorruptFileError, match="truncated"):
            list(iter_sections(data[: infos[1].offset], uri=URI))

    def test_short_ranged_read_names_the_object(self, tmp_path: Path) -> None:
        store = LocalObjectStore(tmp_path)
        resolver = StoreResolver()
        resolver.register(store)
        data, offset, length = _one_section([(Op.PUT, b"k", b"v")])
        store.put("seg", data[: offset + length - 2])
        builder = SegmentBuilder()
        builder.add_records(3, 7, _records(7, [(Op.PUT, b"k", b"v")]))
        _, [info] = builder.build()
        with pytest.raises(CorruptFileError, match="truncated") as err:
            list(read_changes(resolver, info.handle(store.uri_for("seg"))))
        assert store.uri_for("seg") in str(err.value)

    def test_handle_pointing_elsewhere_is_corrupt(self) -> None:
        builder = SegmentBuilder()
        builder.add_records(1, 0, _records(0, [(Op.PUT, b"a", b"1")]))
        data, [info] = builder.build()
        wrong = info.handle(URI)
        wrong = type(wrong)(**{**wrong.to_json(), "bucket": 9})
        with pytest.raises(CorruptFileError, match="handle says"):
            decode_section(data[info.offset : info.offset + info.length], uri=URI, expect=wrong)


class TestVersions:
    def test_unknown_file_version_is_rejected(self) -> None:
        data, _, _ = _one_section([(Op.PUT, b"k", b"v")])
        future = pack_header(b"GICL", 99) + data[8:]
        with pytest.raises(UnsupportedVersionError, match="99"):
            list(iter_sections(future, uri=URI))

    def test_well_formed_section_of_a_newer_version_is_unsupported(self) -> None:
        # A newer section: same prefix layout, longer header, valid header checksum.
        body = b"\x00" * 40
        prefix = struct.pack("<2sHH", b"GS", 2, 6 + len(body) + 4)
        head = prefix + body
        section = head + struct.pack("<I", crc32c(head))
        with pytest.raises(UnsupportedVersionError, match="version 2"):
            decode_section(section, uri=URI)

    def test_foreign_bytes_are_corrupt(self) -> None:
        with pytest.raises(CorruptFileError, match="marker"):
            decode_section(b"XX" + b"\x00" * 60, uri=URI)
        with pytest.raises(CorruptFileError, match="not a GICL file"):
            list(iter_sections(b"PK\x03\x04" + b"\x00" * 40, uri=URI))


_KEPT_CHANGES = st.lists(
    st.tuples(
        st.sampled_from(list(Op)),
        st.sampled_from([b"a", b"ab", b"b", b"c"]),
        st.binary(max_size=5),
    ),
    min_size=1,
    max_size=30,
)


@settings(max_examples=50, deadline=None)
@given(_KEPT_CHANGES, st.sets(st.sampled_from([b"a", b"ab", b"b", b"c", b"zz"])))
def test_a_section_decoded_for_some_keys_keeps_theirs_and_every_prefix_deletion(
    changes: list[tuple[Op, bytes, bytes]], keep: set[bytes]
) -> None:
    builder = SegmentBuilder(min_compress_bytes=16)
    builder.add_records(3, 40, [ChangeRecord(40 + i, *c) for i, c in enumerate(changes)])
    data, (info,) = builder.build()
    section = data[info.offset : info.offset + info.length]
    handle = info.handle("file:///seg")
    _, _, everything = decode_section(section, uri="file:///seg", expect=handle)
    _, _, kept = decode_section(section, uri="file:///seg", expect=handle, keep=keep)
    assert kept == [r for r in everything if r.op is Op.DELETE_PREFIX or r.key in keep]


def test_a_record_of_another_key_is_still_checked() -> None:
    raw, count = encode_records([(Op.PUT, b"mine", b"1"), (Op.PUT, b"other", b"2")])
    bad = bytearray(raw)
    bad[len(encode_records([(Op.PUT, b"mine", b"1")])[0])] = 99  # the second record's op
    builder = SegmentBuilder(codec=Codec.NONE)
    info = builder.add_section(0, 0, count, bytes(bad))
    data, _ = builder.build()
    section = data[info.offset : info.offset + info.length]
    with pytest.raises(CorruptFileError, match=r"record 1 is malformed \(op 99\)"):
        decode_section(section, uri="file:///seg", keep={b"mine"})
