"""Decompression bombs: a snapshot whose small compressed body claims or expands to far
more than GIC's bodies ever do is refused as a corrupt file, before (zstd) or while
(zlib, version 1) it would be inflated, never by allocating what it claims."""

from __future__ import annotations

import struct
import zlib

import pyarrow as pa
import pytest

from gic_runtime.errors import CorruptFileError
from gic_runtime.formats import crc32c, pack_header
from gic_runtime.state import snapshot
from gic_runtime.state.snapshot import (
    FLAG_ZLIB,
    FLAG_ZSTD,
    MAGIC,
    MAX_RATIO,
    RATIO_FLOOR,
    VERSION,
    VERSION_ZSTD,
    encode_snapshot,
    parse_snapshot,
)

URI = "file:///data/gic/jobs/j/snapshots/0/x.snap"
FIXED = struct.Struct("<IQQQI")


def framed(body: bytes, version: int, flags: int, count: int = 1) -> bytes:
    head = pack_header(MAGIC, version, flags) + FIXED.pack(0, 1, count, len(body), crc32c(body))
    return head + struct.pack("<I", crc32c(head)) + body


def test_a_small_zstd_body_claiming_hundreds_of_megabytes_is_refused_unread() -> None:
    raw = bytes(256 * 1024**2)  # 256 MiB of zeros: compresses to a few KiB
    packed = pa.Codec("zstd", compression_level=3).compress(raw, asbytes=True)
    body = struct.pack("<Q", len(raw)) + packed
    assert len(body) * MAX_RATIO < len(raw) and len(raw) > RATIO_FLOOR
    with pytest.raises(CorruptFileError, match="decompression bomb"):
        parse_snapshot(framed(body, VERSION_ZSTD, FLAG_ZSTD), uri=URI)


def test_a_zlib_body_inflating_past_the_bound_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    # zlib cannot pass 1032x; the bound that stops a version-1 bomb is the body size
    # (a named constant: a smaller one here stands in for the 4 GiB of a real reader)
    monkeypatch.setattr(snapshot, "MAX_BODY_BYTES", 1024**2)
    body = zlib.compress(bytes(8 * 1024**2))
    with pytest.raises(CorruptFileError, match="decompression bomb"):
        parse_snapshot(framed(body, VERSION, FLAG_ZLIB), uri=URI)


def test_ordinary_compressed_snapshots_still_read() -> None:
    items = [(f"k{i:06d}".encode(), b"v" * 40) for i in range(5000)]
    info, entries = parse_snapshot(encode_snapshot(items, bucket=0, seq=1, compress=True), uri=URI)
    assert info.compressed and list(entries) == items
    raw = b"".join(struct.pack("<II", len(k), len(v)) + k + v for k, v in items)
    info, entries = parse_snapshot(
        framed(zlib.compress(raw), VERSION, FLAG_ZLIB, count=len(items)), uri=URI
    )
    assert list(entries) == items
