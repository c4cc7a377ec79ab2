"""The changelog segment object format (magic ``GICL``, version 1).

One segment object holds the changes of several buckets, one *section* per bucket
chunk, so a task uploads one object per batch while a restore of a single bucket reads
only that bucket's bytes with one ranged read::

    <8-byte common header: "GICL", version 1, flags 0>
    <section>*                    each addressable by (offset, length)
    <trailer: "GLTR", section count, CRC32C of the trailer's first 8 bytes>

A section validates on its own (a ranged read never sees the file header)::

    <2s "GS"><H version><H header length>                      prefix, same in every version
    <B codec><B flags><I bucket><Q from_seq><I count>
    <I raw length><I payload length><I payload CRC32C>         (version 1 body)
    <I CRC32C of every header byte before it>
    <payload: payload-length bytes, compressed as ``codec`` says>

The header CRC is found through the self-described header length, so a flipped version
byte is reported as corruption and only a well-formed header of a newer version as
:class:`~gic_runtime.errors.UnsupportedVersionError`. The raw payload is the records
back to back, each ``<B op><I key length><I value length>`` then key then value; record
``i`` has sequence number ``from_seq + i``. Compression is per section (sections stay
seekable) and used only when it makes the payload smaller.
"""

from __future__ import annotations

import enum
import struct
from collections.abc import Container, Iterable, Iterator
from dataclasses import dataclass
from typing import Final

import pyarrow as pa

from gic_runtime.changelog.records import ChangeRecord, Op
from gic_runtime.errors import ConfigurationError, CorruptFileError, UnsupportedVersionError
from gic_runtime.formats import HEADER, check_header, crc32c, pack_header
from gic_runtime.handles import ChangelogHandle

MAGIC: Final = b"GICL"
VERSION: Final = 1
SECTION_MARKER: Final = b"GS"
SECTION_VERSION: Final = 1
TRAILER_MARKER: Final = b"GLTR"

_PREFIX: Final = struct.Struct("<2sHH")
_BODY_V1: Final = struct.Struct("<BBIQIIII")
_CRC: Final = struct.Struct("<I")
_SECTION_HEADER_SIZE: Final = _PREFIX.size + _BODY_V1.size + _CRC.size
_TRAILER: Final = struct.Struct("<4sII")
RECORD_HEADER: Final = struct.Struct("<BII")
"""``<B op><I key length><I value length>``, followed by the key and the value bytes."""

_U32_MAX: Final = 0xFFFFFFFF
_OPS: Final = {int(op): op for op in Op}


class Codec(enum.IntEnum):
    """Per-section payload codec (stored as one byte; never renumber)."""

    NONE = 0
    ZSTD = 1


def section_header_size() -> int:
    """Bytes a version-1 section header takes before its payload."""
    return _SECTION_HEADER_SIZE


def encode_record(op: Op, key: bytes, value: bytes = b"") -> bytes:
    """One record in the raw payload encoding."""
    return RECORD_HEADER.pack(op, len(key), len(value)) + key + value


def encode_records(records: Iterable[tuple[Op, bytes, bytes]]) -> tuple[bytes, int]:
    """Raw payload of ``records`` (``(op, key, value)``) and how many there are."""
    parts: list[bytes] = []
    pack = RECORD_HEADER.pack
    count = 0
    for op, key, value in records:
        parts += (pack(op, len(key), len(value)), key, value)
        count += 1
    return b"".join(parts), count


@dataclass(frozen=True, slots=True)
class SectionInfo:
    """Where one section landed in a built segment: bytes ``[offset, offset + length)``
    hold changes ``[from_seq, to_seq)`` of ``bucket``; ``crc`` is the stored payload's
    CRC32C."""

    offset: int
    length: int
    bucket: int
    from_seq: int
    to_seq: int
    crc: int

    def handle(self, uri: str) -> ChangelogHandle:
        """The handle of this section once the segment is stored at ``uri``."""
        return ChangelogHandle(
            uri=uri,
            offset=self.offset,
            length=self.length,
            bucket=self.bucket,
            from_seq=self.from_seq,
            to_seq=self.to_seq,
            crc=self.crc,
        )


class SegmentBuilder:
    """Accumulates sections (any buckets, any order) and builds one segment object.

    ``codec`` is the preferred codec; a section is stored compressed only when its raw
    payload has at least ``min_compress_bytes`` bytes and compression saves at least
    1/16 of it. Not thread-safe: one thread builds a segment.
    """

    def __init__(self, *, codec: Codec = Codec.ZSTD, min_compress_bytes: int = 256) -> None:
        self._codec = codec
        self._min_compress = min_compress_bytes
        self._parts: list[bytes] = [pack_header(MAGIC, VERSION)]
        self._offset = HEADER.size
        self._sections: list[SectionInfo] = []

    def __len__(self) -> int:
        """Number of sections added so far."""
        return len(self._sections)

    def add_records(self, bucket: int, from_seq: int, records: Iterable[ChangeRecord]) -> None:
        """Add a section from records; their ``seq`` fields must be ``from_seq, from_seq+1...``."""
        expected = from_seq
        items: list[tuple[Op, bytes, bytes]] = []
        for rec in records:
            if rec.seq != expected:
                raise ConfigurationError(
                    f"records of bucket {bucket} are not dense: got seq {rec.seq}, "
                    f"expected {expected}"
                )
            items.append((rec.op, rec.key, rec.value))
            expected += 1
        raw, count = encode_records(items)
        self.add_section(bucket, from_seq, count, raw)

    def add_section(self, bucket: int, from_seq: int, count: int, raw: bytes) -> SectionInfo:
        """Add a section whose raw payload ``raw`` (see :func:`encode_records`) holds
        ``count`` records starting at ``from_seq``."""
        if count <= 0:
            raise ConfigurationError(f"section of bucket {bucket} has no records")
        if len(raw) > _U32_MAX or bucket < 0 or bucket > _U32_MAX or from_seq < 0:
            raise ConfigurationError(
                f"section of bucket {bucket} from seq {from_seq} is out of range "
                f"({len(raw)} bytes; at most {_U32_MAX} per section): persist more often"
            )
        codec, payload = Codec.NONE, raw
        if self._codec is Codec.ZSTD and len(raw) >= self._min_compress:
            packed = pa.compress(raw, codec="zstd", asbytes=True)
            if len(packed) <= len(raw) - len(raw) // 16:
                codec, payload = Codec.ZSTD, packed
        payload_crc = crc32c(payload)
        head = _PREFIX.pack(SECTION_MARKER, SECTION_VERSION, _SECTION_HEADER_SIZE) + _BODY_V1.pack(
            codec, 0, bucket, from_seq, count, len(raw), len(payload), payload_crc
        )
        head += _CRC.pack(crc32c(head))
        info = SectionInfo(
            offset=self._offset,
            length=len(head) + len(payload),
            bucket=bucket,
            from_seq=from_seq,
            to_seq=from_seq + count,
            crc=payload_crc,
        )
        self._parts += (head, payload)
        self._offset += info.length
        self._sections.append(info)
        return info

    def build(self) -> tuple[bytes, list[SectionInfo]]:
        """The segment's bytes and its sections in file order."""
        trailer = _TRAILER.pack(TRAILER_MARKER, len(self._sections), 0)
        trailer = trailer[:-4] + _CRC.pack(crc32c(trailer[:-4]))
        return b"".join([*self._parts, trailer]), list(self._sections)


@dataclass(frozen=True, slots=True)
class _SectionHeader:
    codec: int
    bucket: int
    from_seq: int
    count: int
    raw_len: int
    payload_len: int
    payload_crc: int
    header_len: int


def _parse_section_header(data: memoryview, *, uri: str | None) -> _SectionHeader:
    if len(data) < _PREFIX.size:
        raise CorruptFileError(
            f"section is truncated: {len(data)} bytes, shorter than its header", uri=uri
        )
    marker, version, header_len = _PREFIX.unpack_from(data, 0)
    if marker != SECTION_MARKER:
        raise CorruptFileError(
            f"no changelog section here: marker is {bytes(marker)!r}, expected "
            f"{SECTION_MARKER!r} (wrong offset in the handle?)",
            uri=uri,
        )
    if header_len < _PREFIX.size + _CRC.size or header_len > len(data):
        raise CorruptFileError(
            f"section header length {header_len} does not fit the {len(data)} bytes read",
            uri=uri,
        )
    (stored_crc,) = _CRC.unpack_from(data, header_len - _CRC.size)
    actual = crc32c(data[: header_len - _CRC.size])
    if actual != stored_crc:
        raise CorruptFileError(
            f"checksum mismatch in section header: stored {stored_crc:#010x}, "
            f"computed {actual:#010x}",
            uri=uri,
        )
    if version != SECTION_VERSION or header_len != _SECTION_HEADER_SIZE:
        raise UnsupportedVersionError(
            f"changelog section version {version} is not supported by this runtime "
            f"(supported: [{SECTION_VERSION}]); upgrade the runtime to read it",
            uri=uri,
        )
    codec, _flags, bucket, from_seq, count, raw_len, payload_len, payload_crc = (
        _BODY_V1.unpack_from(data, _PREFIX.size)
    )
    return _SectionHeader(
        codec, bucket, from_seq, count, raw_len, payload_len, payload_crc, header_len
    )


def decode_section(
    data: bytes | memoryview,
    *,
    uri: str | None,
    expect: ChangelogHandle | None = None,
    keep: Container[bytes] | None = None,
) -> tuple[int, int, list[ChangeRecord]]:
    """Validate and decode one section occupying all of ``data``.

    Returns ``(bucket, from_seq, records)``. With ``expect``, the section must match the
    handle (bucket, sequence range, length, payload CRC). With ``keep``, only the records
    of those keys and the prefix deletions are returned, each with its own ``seq`` (the
    others are validated all the same). Raises :class:`CorruptFileError` for anything
    damaged or inconsistent, never partial data.
    """
    view = memoryview(data)
    head = _parse_section_header(view, uri=uri)
    total = head.header_len + head.payload_len
    if total != len(view):
        raise CorruptFileError(
            f"section of bucket {head.bucket} should be {total} bytes, read {len(view)} "
            "(truncated object or wrong length in the handle)",
            uri=uri,
        )
    if expect is not None:
        got = (head.bucket, head.from_seq, head.from_seq + head.count, head.payload_crc)
        want = (expect.bucket, expect.from_seq, expect.to_seq, expect.crc)
        if got != want:
            raise CorruptFileError(
                f"section at offset {expect.offset} holds (bucket, from, to, crc) {got}, "
                f"but the handle says {want}",
                uri=uri,
            )
    payload = view[head.header_len :]
    actual = crc32c(payload)
    if actual != head.payload_crc:
        raise CorruptFileError(
            f"checksum mismatch in section payload of bucket {head.bucket}: stored "
            f"{head.payload_crc:#010x}, computed {actual:#010x}",
            uri=uri,
        )
    raw = _decompress(head, payload, uri=uri)
    if keep is not None:
        return head.bucket, head.from_seq, _decode_kept(raw, head, keep, uri=uri)
    return head.bucket, head.from_seq, _decode_records(raw, head, uri=uri)


def _decompress(head: _SectionHeader, payload: memoryview, *, uri: str | None) -> memoryview:
    if head.codec == Codec.NONE:
        raw = payload
    elif head.codec == Codec.ZSTD:
        try:
            raw = memoryview(
                pa.decompress(payload, decompressed_size=head.raw_len, codec="zstd", asbytes=True)
            )
        except (OSError, ValueError) as exc:
            raise CorruptFileError(f"zstd payload cannot be decompressed: {exc}", uri=uri) from exc
    else:
        raise CorruptFileError(f"unknown section codec {head.codec}", uri=uri)
    if len(raw) != head.raw_len:
        raise CorruptFileError(
            f"payload decodes to {len(raw)} bytes, header says {head.raw_len}", uri=uri
        )
    return raw


def _decode_records(
    raw: memoryview, head: _SectionHeader, *, uri: str | None
) -> list[ChangeRecord]:
    out: list[ChangeRecord] = []
    unpack = RECORD_HEADER.unpack_from
    rec_size = RECORD_HEADER.size
    pos, end, seq = 0, len(raw), head.from_seq
    for _ in range(head.count):
        if pos + rec_size > end:
            raise CorruptFileError(f"record {seq} is truncated", uri=uri)
        op, klen, vlen = unpack(raw, pos)
        pos += rec_size
        if pos + klen + vlen > end or op not in _OPS:
            raise CorruptFileError(f"record {seq} is malformed (op {op})", uri=uri)
        key = bytes(raw[pos : pos + klen])
        pos += klen
        value = bytes(raw[pos : pos + vlen])
        pos += vlen
        out.append(ChangeRecord(seq, _OPS[op], key, value))
        seq += 1
    if pos != end:
        raise CorruptFileError(f"{end - pos} stray bytes after the last record", uri=uri)
    return out


def _decode_kept(
    raw: memoryview, head: _SectionHeader, keep: Container[bytes], *, uri: str | None
) -> list[ChangeRecord]:
    """:func:`_decode_records` returning only the records of ``keep``'s keys and the
    prefix deletions: every record's framing and op are checked, only those are copied."""
    out: list[ChangeRecord] = []
    unpack = RECORD_HEADER.unpack_from
    rec_size = RECORD_HEADER.size
    prefix = int(Op.DELETE_PREFIX)
    pos, end = 0, len(raw)
    for seq in range(head.from_seq, head.from_seq + head.count):
        if pos + rec_size > end:
            raise CorruptFileError(f"record {seq} is truncated", uri=uri)
        op, klen, vlen = unpack(raw, pos)
        k0 = pos + rec_size
        v0 = k0 + klen
        pos = v0 + vlen
        if pos > end or op not in _OPS:
            raise CorruptFileError(f"record {seq} is malformed (op {op})", uri=uri)
        key = bytes(raw[k0:v0])
        if op == prefix or key in keep:
            out.append(ChangeRecord(seq, _OPS[op], key, bytes(raw[v0:pos])))
    if pos != end:
        raise CorruptFileError(f"{end - pos} stray bytes after the last record", uri=uri)
    return out


def iter_sections(
    data: bytes, *, uri: str | None
) -> Iterator[tuple[SectionInfo, list[ChangeRecord]]]:
    """Validate a whole segment object and yield each section with its records.

    Checks the common header, every section and the trailer (so an object truncated at a
    section boundary is still reported as corrupt). For inspection tools; restores read
    single sections through handles instead.
    """
    view = memoryview(data)
    check_header(view, MAGIC, frozenset({VERSION}), uri=uri)
    pos, end = HEADER.size, len(view) - _TRAILER.size
    if end < pos:
        raise CorruptFileError("segment is truncated: no trailer", uri=uri)
    marker, count, trailer_crc = _TRAILER.unpack_from(view, end)
    if marker != TRAILER_MARKER or crc32c(view[end : end + 8]) != trailer_crc:
        raise CorruptFileError("segment is truncated or its trailer is damaged", uri=uri)
    seen = 0
    while pos < end:
        head = _parse_section_header(view[pos:end], uri=uri)
        length = head.header_len + head.payload_len
        if pos + length > end:
            raise CorruptFileError(f"section at offset {pos} runs past the end", uri=uri)
        bucket, from_seq, records = decode_section(view[pos : pos + length], uri=uri)
        info = SectionInfo(pos, length, bucket, from_seq, from_seq + len(records), head.payload_crc)
        yield info, records
        pos += length
        seen += 1
    if seen != count:
        raise CorruptFileError(f"segment has {seen} sections, trailer says {count}", uri=uri)
