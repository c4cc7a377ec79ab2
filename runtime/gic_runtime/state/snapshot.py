"""Bucket snapshot file format (``.snap``): the full key-value content of one bucket at
one sequence number.

Layout (little-endian)::

    <4s "GICS"><H version><H flags>                    common header (formats.py)
    <I bucket><Q seq><Q entries><Q body_length><I body_crc32c><I header_crc32c>
    body: entries x (<I key_length><I value_length><key><value>), keys ascending;
          version 2 (compressed): stored as <Q length> + zstd frames of it (one or
          more, decompressed as one stream; this runtime writes one per
          FRAME_RAW_BYTES of entries), flags bit 1 set; version 1: as is, or
          zlib-compressed as a whole when flags bit 0 is set (older runtimes wrote
          that; still read)

This runtime writes version 2 when compressing (a runtime that knows only version 1
refuses such a file with :class:`~gic_runtime.errors.UnsupportedVersionError`) and
version 1 otherwise.

``header_crc32c`` covers every byte before it; ``body_crc32c`` covers the stored (possibly
compressed) body. The file ends exactly after the body. Readers reject foreign magic,
unknown versions or flags, checksum mismatches, truncation, trailing bytes and keys
that do not ascend with
:class:`~gic_runtime.errors.CorruptFileError` /
:class:`~gic_runtime.errors.UnsupportedVersionError` naming the file's URI.
"""

from __future__ import annotations

import io
import struct
import tempfile
import zlib
from collections.abc import Callable, Container, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, Final

import pyarrow as pa

from gic_runtime.errors import CorruptFileError, ObjectNotFoundError, RestoreError
from gic_runtime.formats import HEADER, check_header, crc32c, pack_header, verify_crc
from gic_runtime.handles import SnapshotHandle
from gic_runtime.storage.uri import StoreResolver
from gic_runtime.storage.writes import create_file_once, create_once

MAGIC: Final = b"GICS"
VERSION: Final = 1
"""Uncompressed, or zlib-compressed (read; older runtimes wrote it)."""
VERSION_ZSTD: Final = 2
"""Compressed with zstd: about 6x faster to write than zlib level 6 and 5x faster to
read, at a similar size (docs/architecture.md §4.3)."""
FLAG_ZLIB: Final = 1
FLAG_ZSTD: Final = 2
ZSTD_LEVEL: Final = 1
_KNOWN_FLAGS: Final = {VERSION: FLAG_ZLIB, VERSION_ZSTD: FLAG_ZSTD}
_RAW_LENGTH = struct.Struct("<Q")
_FIXED = struct.Struct("<IQQQI")
_HEADER_CRC = struct.Struct("<I")
_ENTRY = struct.Struct("<II")
PREAMBLE_SIZE: Final = HEADER.size + _FIXED.size + _HEADER_CRC.size


@dataclass(frozen=True, slots=True)
class SnapshotInfo:
    """What a snapshot file's header says."""

    bucket: int
    seq: int
    entries: int
    compressed: bool


FRAME_RAW_BYTES: Final = 1 << 20
"""Entry bytes written at a time, compressed into one zstd frame when compressing: the
writer holds at most about this much of a bucket's raw entries at once
(docs/architecture.md §4.3)."""


def encode_snapshot(
    items: Iterable[tuple[bytes, bytes]], *, bucket: int, seq: int, compress: bool = False
) -> bytes:
    """Serialize ``items`` (in key order) as a snapshot of ``bucket`` at ``seq``, in
    memory: :func:`write_snapshot` into a buffer."""
    out = io.BytesIO()
    write_snapshot(items, out, bucket=bucket, seq=seq, compress=compress)
    return out.getvalue()


def write_snapshot(
    items: Iterable[tuple[bytes, bytes]],
    out: BinaryIO,
    *,
    bucket: int,
    seq: int,
    compress: bool = False,
) -> int:
    """Write ``items`` (in key order) as a snapshot of ``bucket`` at ``seq`` to the empty,
    seekable ``out``; return the file's length.

    The body goes out as it is encoded, :data:`FRAME_RAW_BYTES` of entries at a time
    (compressed: one zstd frame each, which a reader decompresses as one stream), so the
    writer holds one frame whatever the bucket's size. The header, whose lengths and
    body checksum are known only at the end, is written last over a placeholder of its
    size; the checksum is computed by reading the body back. ``out`` is left at its end.
    """
    out.write(bytes(PREAMBLE_SIZE))
    if compress:
        codec = pa.Codec("zstd", compression_level=ZSTD_LEVEL)
        out.write(bytes(_RAW_LENGTH.size))  # the raw length, known at the end
        count, raw_length = _frames(items, lambda raw: out.write(codec.compress(raw, asbytes=True)))
        version, flags = VERSION_ZSTD, FLAG_ZSTD
    else:
        count, raw_length = _frames(items, out.write)
        version, flags = VERSION, 0
    end = out.tell()
    if compress:
        out.seek(PREAMBLE_SIZE)
        out.write(_RAW_LENGTH.pack(raw_length))
    body_crc = _crc_from(out, PREAMBLE_SIZE)
    head = pack_header(MAGIC, version, flags) + _FIXED.pack(
        bucket, seq, count, end - PREAMBLE_SIZE, body_crc
    )
    out.seek(0)
    out.write(head + _HEADER_CRC.pack(crc32c(head)))
    out.seek(end)
    return end


def _crc_from(file: BinaryIO, offset: int) -> int:
    """CRC32C of ``file`` from ``offset`` to its end, read :data:`FRAME_RAW_BYTES` at a
    time."""
    file.seek(offset)
    value = 0
    while chunk := file.read(FRAME_RAW_BYTES):
        value = crc32c(chunk, value)
    return value


def _frames(
    items: Iterable[tuple[bytes, bytes]], emit: Callable[[bytes], object]
) -> tuple[int, int]:
    """(entries, raw bytes) of ``items``, whose framed entries are passed to ``emit`` in
    frames of :data:`FRAME_RAW_BYTES` or a little more as soon as each fills; at least
    one frame, empty when there are no entries."""
    pending: list[bytes] = []
    count = raw = filled = frames = 0
    pack = _ENTRY.pack
    for key, value in items:
        pending.append(pack(len(key), len(value)))
        pending.append(key)
        pending.append(value)
        size = _ENTRY.size + len(key) + len(value)
        count += 1
        raw += size
        filled += size
        if filled >= FRAME_RAW_BYTES:
            emit(b"".join(pending))
            frames += 1
            pending.clear()
            filled = 0
    if pending or not frames:
        emit(b"".join(pending))
    return count, raw


@dataclass(frozen=True, slots=True)
class SnapshotBody:
    """A validated snapshot file's header and its raw (decompressed) body: the entries
    are read from it with :meth:`entries`, or only some of them with :meth:`select`;
    either checks the framing and the key order as it goes."""

    info: SnapshotInfo
    body: bytes
    uri: str

    def entries(self) -> Iterator[tuple[bytes, bytes]]:
        """Every entry, keys ascending."""
        return _entries(self.body, self.info.entries, self.uri)

    def select(self, keys: Container[bytes]) -> Iterator[tuple[bytes, bytes]]:
        """The entries whose key is in ``keys``, keys ascending. Reads every entry's
        framing and key as :meth:`entries` does (a damaged file raises the same errors),
        but copies only the chosen values."""
        return _entries(self.body, self.info.entries, self.uri, keys)


def parse_snapshot(data: bytes, *, uri: str) -> tuple[SnapshotInfo, Iterator[tuple[bytes, bytes]]]:
    """Validate a snapshot file; return its header and an iterator over its entries.

    Header, checksums and length are checked before this returns; the iterator checks
    the entry framing as it goes.
    """
    snapshot = open_snapshot(data, uri=uri)
    return snapshot.info, snapshot.entries()


def open_snapshot(data: bytes, *, uri: str) -> SnapshotBody:
    """Validate a snapshot file (header, checksums, length) and decompress its body."""
    version, flags = check_header(data, MAGIC, frozenset(_KNOWN_FLAGS), uri=uri)
    if len(data) < PREAMBLE_SIZE:
        raise CorruptFileError(
            f"snapshot is truncated: {len(data)} bytes, header needs {PREAMBLE_SIZE}", uri=uri
        )
    (stored_header_crc,) = _HEADER_CRC.unpack_from(data, HEADER.size + _FIXED.size)
    verify_crc(
        memoryview(data)[: HEADER.size + _FIXED.size],
        stored_header_crc,
        what="snapshot header",
        uri=uri,
    )
    if flags & ~_KNOWN_FLAGS[version]:
        raise CorruptFileError(
            f"snapshot (version {version}) has unknown flags {flags:#06x}", uri=uri
        )
    bucket, seq, count, body_len, body_crc = _FIXED.unpack_from(data, HEADER.size)
    actual = len(data) - PREAMBLE_SIZE
    if actual != body_len:
        kind = "truncated" if actual < body_len else "followed by trailing bytes"
        raise CorruptFileError(
            f"snapshot body is {kind}: header says {body_len} bytes, file holds {actual}",
            uri=uri,
        )
    body = data[PREAMBLE_SIZE:]
    verify_crc(body, body_crc, what="snapshot body", uri=uri)
    if flags & FLAG_ZLIB:
        body = _unzlib(body, uri)
    elif flags & FLAG_ZSTD:
        body = _unzstd(body, uri)
    info = SnapshotInfo(bucket, seq, count, bool(flags & (FLAG_ZLIB | FLAG_ZSTD)))
    return SnapshotBody(info, body, uri)


MAX_BODY_BYTES: Final = 4 * 1024**3
"""Largest decompressed body a reader accepts (a bucket's whole state)."""
MAX_RATIO: Final = 1024
"""A compressed body may expand at most this many times (beyond :data:`RATIO_FLOOR`):
GIC's bodies (msgpack entries) compress 3-20x, highly repetitive values a few hundred
times; a body claiming more is a decompression bomb, refused before any allocation."""
RATIO_FLOOR: Final = 64 * 1024**2
"""Below this many decompressed bytes the ratio is not checked (small bodies)."""


def _raw_limit(compressed: int) -> int:
    """The most bytes a compressed body of ``compressed`` bytes may expand to."""
    return min(MAX_BODY_BYTES, max(RATIO_FLOOR, compressed * MAX_RATIO))


def _unzlib(body: bytes, uri: str) -> bytes:
    """A zlib body (version 1) decompressed to at most :func:`_raw_limit` bytes."""
    limit = _raw_limit(len(body))
    inflater = zlib.decompressobj()
    try:
        raw = inflater.decompress(body, limit)
    except zlib.error as exc:
        raise CorruptFileError(f"snapshot body does not decompress: {exc}", uri=uri) from exc
    if inflater.unconsumed_tail:
        raise CorruptFileError(
            f"snapshot's zlib body of {len(body)} bytes expands beyond {limit} bytes "
            f"(more than {MAX_RATIO}x): refused as a decompression bomb",
            uri=uri,
        )
    if not inflater.eof:
        raise CorruptFileError("snapshot body does not decompress: truncated stream", uri=uri)
    return raw


def _unzstd(body: bytes, uri: str) -> bytes:
    if len(body) < _RAW_LENGTH.size:
        raise CorruptFileError("snapshot's zstd body is truncated", uri=uri)
    (raw_len,) = _RAW_LENGTH.unpack_from(body)
    limit = _raw_limit(len(body))
    if raw_len > limit:
        raise CorruptFileError(
            f"snapshot's zstd body of {len(body)} bytes claims {raw_len} bytes, more than "
            f"{limit} (at most {MAX_RATIO}x, {MAX_BODY_BYTES} in all): refused as a "
            "decompression bomb",
            uri=uri,
        )
    try:
        # Fails unless the frames decompress to exactly raw_len bytes.
        raw: bytes = pa.decompress(
            memoryview(body)[_RAW_LENGTH.size :],
            decompressed_size=raw_len,
            codec="zstd",
            asbytes=True,
        )
    except (OSError, ValueError, pa.ArrowException) as exc:
        raise CorruptFileError(
            f"snapshot body does not decompress to the {raw_len} bytes it states: {exc}", uri=uri
        ) from exc
    return raw


def _entries(
    body: bytes, count: int, uri: str, keys: Container[bytes] | None = None
) -> Iterator[tuple[bytes, bytes]]:
    """The entries of ``body`` (only those whose key is in ``keys``, when given),
    checked as they go: framing, and keys strictly ascending (what every writer produces
    and a restore relies on to append them in order)."""
    pos = 0
    size = len(body)
    unpack = _ENTRY.unpack_from
    previous: bytes | None = None
    for i in range(count):
        if pos + _ENTRY.size > size:
            raise CorruptFileError(f"snapshot entry {i} of {count} is truncated", uri=uri)
        klen, vlen = unpack(body, pos)
        pos += _ENTRY.size
        end = pos + klen + vlen
        if end > size:
            raise CorruptFileError(f"snapshot entry {i} of {count} is truncated", uri=uri)
        key = body[pos : pos + klen]
        if previous is not None and key <= previous:
            raise CorruptFileError(
                f"snapshot keys do not ascend: entry {i} of {count} is not above entry {i - 1}",
                uri=uri,
            )
        previous = key
        if keys is None or key in keys:
            yield key, body[pos + klen : end]
        pos = end
    if pos != size:
        raise CorruptFileError(
            f"snapshot body has {size - pos} bytes after its {count} entries", uri=uri
        )


def upload_snapshot(
    resolver: StoreResolver,
    uri: str,
    items: Iterable[tuple[bytes, bytes]],
    *,
    bucket: int,
    seq: int,
    compress: bool = False,
    spool_dir: Path | None = None,
) -> SnapshotHandle:
    """Encode ``items`` and write them to the fresh object ``uri`` (create-if-absent).

    With ``spool_dir`` (created if missing), the file is written to an unnamed
    temporary file there
    (:func:`write_snapshot`; gone with the process whatever happens) and streamed to
    the store from it, so memory holds one frame, not the bucket's snapshot; without,
    it is encoded in memory. Finding exactly these bytes already at ``uri`` is success:
    a store that retries requests reports a create-if-absent PUT whose answer was lost
    as a collision with itself. Any other object there raises
    :class:`~gic_runtime.errors.ObjectExistsError`.
    """
    if spool_dir is None:
        data = encode_snapshot(items, bucket=bucket, seq=seq, compress=compress)
        store, key = resolver.resolve(uri)
        create_once(store, key, data)
        return SnapshotHandle(uri=uri, bucket=bucket, seq=seq, size=len(data), crc=crc32c(data))
    spool_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryFile(dir=spool_dir) as spool:
        size = write_snapshot(items, spool, bucket=bucket, seq=seq, compress=compress)
        crc = _crc_from(spool, 0)
        store, key = resolver.resolve(uri)
        create_file_once(store, key, spool, size)
    return SnapshotHandle(uri=uri, bucket=bucket, seq=seq, size=size, crc=crc)


def read_snapshot(resolver: StoreResolver, handle: SnapshotHandle) -> Iterator[tuple[bytes, bytes]]:
    """Download and validate the snapshot ``handle`` names; iterate its entries.

    Also checks the file against the handle (size, whole-file checksum, bucket, seq).
    """
    return read_snapshot_body(resolver, handle).entries()


def read_snapshot_body(resolver: StoreResolver, handle: SnapshotHandle) -> SnapshotBody:
    """Download and validate the snapshot ``handle`` names, checked against the handle as
    :func:`read_snapshot` does; its entries are read from the result."""
    store, key = resolver.resolve(handle.uri)
    try:
        data = store.get(key)
    except ObjectNotFoundError as exc:
        raise RestoreError(
            f"snapshot {handle.uri} of bucket {handle.bucket} is missing; the checkpoint "
            "that references it cannot be restored (restore an older checkpoint or savepoint)"
        ) from exc
    if len(data) != handle.size:
        raise CorruptFileError(
            f"snapshot is {len(data)} bytes but its handle says {handle.size}", uri=handle.uri
        )
    verify_crc(data, handle.crc, what="snapshot file", uri=handle.uri)
    snapshot = open_snapshot(data, uri=handle.uri)
    info = snapshot.info
    if (info.bucket, info.seq) != (handle.bucket, handle.seq):
        raise CorruptFileError(
            f"snapshot holds bucket {info.bucket} at seq {info.seq}, but its handle names "
            f"bucket {handle.bucket} at seq {handle.seq}",
            uri=handle.uri,
        )
    return snapshot
