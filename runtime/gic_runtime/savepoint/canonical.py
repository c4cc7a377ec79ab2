"""Canonical (portable) savepoint format: per-bucket Parquet files readable with plain
pyarrow + msgpack, without this runtime.

Directory layout under the savepoint's URI::

    bucket-00042.parquet    one file per bucket that holds state
    _canonical.json         index, written last (its presence means the export is complete)

Parquet columns (one row per value, per map entry, per list element):

=========  ===============  ====================================================
bucket     int32            bucket of the key (``pmod(xxhash64(key), num_buckets)``)
state      string           state name
kind       string           ``value`` | ``map`` | ``list`` | ``timer``
key        binary           msgpack encoding of the key
user_key   binary, null     msgpack encoding of the map entry's user key (map), of
                            the timer's time in microseconds (timer)
index      int64, null      position of the element in its list (list only)
value      binary           msgpack encoding of the value / entry / element
=========  ===============  ====================================================

A timer row's ``state`` is its domain (``event`` or ``processing``) and its ``value``
empty; the time index timers keep beside them is rebuilt on import, not exported.
Rows are ordered by kind, state, key, user key, index. Each file's schema metadata
carries ``gic.format = gic-canonical-state``, ``gic.version = 1``, its bucket and the
bucket count. The index is JSON ``{"format": "gic-canonical-savepoint", "version": 1,
"body": {...}, "crc32c": n}`` where ``crc32c`` covers the body serialized with sorted
keys and no spaces, and the body lists every file with its row count, size and CRC32C.
Readers verify all of them and fail with CorruptFileError / UnsupportedVersionError
naming the file.

Importing (:func:`gic_runtime.savepoint.canonical_import.restore_from_canonical`)
re-creates state, it does not resume a lineage:
every bucket starts a fresh history at seq 0, the imported entries become its first
changes (so the first checkpoint after an import uploads the whole state as changelog,
until materialization compacts it), and no handle, snapshot or token of the exporting
job is referenced. Executor-local copies of the old lineage are never reused. Keys are
re-routed, so the importing job may use a different number of buckets.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final

import pyarrow as pa
import pyarrow.parquet as pq

from gic_runtime.errors import CorruptFileError, ObjectNotFoundError, UnsupportedVersionError
from gic_runtime.formats import crc32c, load_json
from gic_runtime.handles import BucketState
from gic_runtime.state.backend import KeyedStateBackend
from gic_runtime.state.keys import (
    DERIVED_KINDS,
    KIND_LIST,
    KIND_LIST_TTL,
    KIND_MAP_TTL,
    KIND_NAMES,
    KIND_VALUE_TTL,
    TTL_KINDS,
    encode,
    parse_store_key,
    split_values,
)
from gic_runtime.state.memory_store import InMemoryStore
from gic_runtime.state.restore import ChangeReader, restore_bucket
from gic_runtime.state.ttl import (
    PENDING,
    Entry,
    split_elements,
    unwrap,
)
from gic_runtime.storage.uri import StoreResolver, join

INDEX_NAME: Final = "_canonical.json"
INDEX_FORMAT: Final = "gic-canonical-savepoint"
FILE_FORMAT: Final = "gic-canonical-state"
VERSION: Final = 1
"""Version of the index."""
FILE_VERSION: Final = 2
"""Version of the bucket files this runtime writes (2 added the TTL columns)."""
FILE_VERSIONS: Final = ("1", "2")

SCHEMA: Final = pa.schema(
    [
        pa.field("bucket", pa.int32(), nullable=False),
        pa.field("state", pa.string(), nullable=False),
        pa.field("kind", pa.string(), nullable=False),
        pa.field("key", pa.binary(), nullable=False),
        pa.field("user_key", pa.binary(), nullable=True),
        pa.field("index", pa.int64(), nullable=True),
        pa.field("value", pa.binary(), nullable=False),
        pa.field("expires_us", pa.int64(), nullable=True),
        pa.field("ttl_by", pa.string(), nullable=True),
        pa.field("ttl_us", pa.int64(), nullable=True),
    ]
)
_V1_COLUMNS: Final = 7
"""Version 1 files have the first seven columns; the TTL columns read as null."""
KIND_BYTES: Final = {
    name: kind for kind, name in KIND_NAMES.items() if kind not in TTL_KINDS.values()
}
"""The kind of a row; a row with TTL columns takes the TTL kind of it (``TTL_KINDS``)."""


@dataclass(frozen=True, slots=True)
class CanonicalFile:
    """One bucket file of a canonical savepoint, as listed in the index."""

    bucket: int
    name: str
    rows: int
    size: int
    crc: int


@dataclass(frozen=True, slots=True)
class CanonicalIndex:
    """The index of a canonical savepoint."""

    num_buckets: int
    files: tuple[CanonicalFile, ...]

    def body(self) -> dict[str, Any]:
        return {
            "num_buckets": self.num_buckets,
            "files": [
                {
                    "bucket": f.bucket,
                    "name": f.name,
                    "rows": f.rows,
                    "size": f.size,
                    "crc32c": f.crc,
                }
                for f in self.files
            ],
        }


def _canonical_json(body: Mapping[str, Any]) -> bytes:
    return json.dumps(body, sort_keys=True, separators=(",", ":")).encode()


# --- export ----------------------------------------------------------------------------


def bucket_table(bucket: int, items: Iterable[tuple[bytes, bytes]]) -> Any:
    """Canonical rows (a ``pyarrow.Table``) of one bucket's store entries."""
    cols: dict[str, list[Any]] = {name: [] for name in SCHEMA.names}

    def row(*values: Any) -> None:
        for name, v in zip(SCHEMA.names, (bucket, *values), strict=True):
            cols[name].append(v)

    for skey, value in items:
        if skey[:1] in DERIVED_KINDS:  # indexes derived from the other entries
            continue
        parsed = parse_store_key(skey)
        kind = KIND_NAMES[parsed.kind]
        if parsed.kind == KIND_LIST:
            for i, element in enumerate(split_values(value)):
                row(parsed.name, kind, parsed.key, None, i, element, None, None, None)
        elif parsed.kind == KIND_LIST_TTL:
            for i, e in enumerate(split_elements(value)):
                row(parsed.name, kind, parsed.key, None, i, *_ttl_columns(e))
        elif parsed.kind in (KIND_VALUE_TTL, KIND_MAP_TTL):
            row(parsed.name, kind, parsed.key, parsed.user_key, None, *_ttl_columns(unwrap(value)))
        else:
            row(parsed.name, kind, parsed.key, parsed.user_key, None, value, None, None, None)
    return pa.table(cols, schema=SCHEMA)


def _ttl_columns(entry: Entry) -> tuple[bytes, int | None, str, int]:
    """``value, expires_us, ttl_by, ttl_us`` of a TTL entry (``expires_us`` null while
    an event-time entry waits for its first watermark)."""
    expires = None if entry.deadline == PENDING else entry.deadline
    return encode(entry.value), expires, entry.ttl.by, entry.ttl.duration_us


def bucket_file_name(bucket: int) -> str:
    """The name of ``bucket``'s file in a canonical savepoint directory."""
    return f"bucket-{bucket:05d}.parquet"


def encode_bucket_file(bucket: int, num_buckets: int, table: Any) -> bytes:
    """The Parquet bytes of ``bucket``'s canonical rows ``table``, with the file metadata."""
    metadata = {
        b"gic.format": FILE_FORMAT.encode(),
        b"gic.version": str(FILE_VERSION).encode(),
        b"gic.bucket": str(bucket).encode(),
        b"gic.num_buckets": str(num_buckets).encode(),
    }
    sink = pa.BufferOutputStream()
    pq.write_table(table.replace_schema_metadata(metadata), sink, compression="zstd")
    return sink.getvalue().to_pybytes()  # type: ignore[no-any-return]


def _write_bucket_file(
    resolver: StoreResolver, dest_uri: str, bucket: int, num_buckets: int, table: Any
) -> CanonicalFile:
    data = encode_bucket_file(bucket, num_buckets, table)
    name = bucket_file_name(bucket)
    store, key = resolver.resolve(join(dest_uri, name))
    store.put(key, data, if_absent=True)
    return CanonicalFile(bucket, name, table.num_rows, len(data), crc32c(data))


def write_canonical_index(resolver: StoreResolver, dest_uri: str, index: CanonicalIndex) -> None:
    """Write the index of the canonical savepoint in ``dest_uri`` (create-if-absent): the
    last write of an export, which makes it complete."""
    body = index.body()
    doc = {
        "format": INDEX_FORMAT,
        "version": VERSION,
        "body": body,
        "crc32c": crc32c(_canonical_json(body)),
    }
    store, key = resolver.resolve(join(dest_uri, INDEX_NAME))
    store.put(key, json.dumps(doc, indent=1, sort_keys=True).encode(), if_absent=True)


def write_canonical_savepoint(
    backend: KeyedStateBackend, dest_uri: str, resolver: StoreResolver
) -> CanonicalIndex:
    """Export the current state of every bucket of ``backend`` to ``dest_uri``.

    Call on the backend's task thread. Every object is created if absent: exporting
    twice into one directory fails with ObjectExistsError.
    """
    files: list[CanonicalFile] = []
    for bucket in backend.bucket_range:
        with backend.store.snapshot_items(bucket) as view:
            table = bucket_table(bucket, view)
        if table.num_rows:
            files.append(_write_bucket_file(resolver, dest_uri, bucket, backend.num_buckets, table))
    index = CanonicalIndex(backend.num_buckets, tuple(files))
    write_canonical_index(resolver, dest_uri, index)
    return index


def write_canonical_from_states(
    bucket_states: Mapping[int, BucketState],
    num_buckets: int,
    dest_uri: str,
    resolver: StoreResolver,
    *,
    reader: ChangeReader | None = None,
) -> CanonicalIndex:
    """Export the state a checkpoint describes (each bucket rebuilt in memory from its
    snapshot and changelog, one bucket at a time) to ``dest_uri``."""
    files: list[CanonicalFile] = []
    for bucket in sorted(bucket_states):
        store = InMemoryStore()
        try:
            restore_bucket(store, bucket_states[bucket], resolver, reader=reader)
            with store.snapshot_items(bucket) as view:
                table = bucket_table(bucket, view)
        finally:
            store.close()
        if table.num_rows:
            files.append(_write_bucket_file(resolver, dest_uri, bucket, num_buckets, table))
    index = CanonicalIndex(num_buckets, tuple(files))
    write_canonical_index(resolver, dest_uri, index)
    return index


# --- import ----------------------------------------------------------------------------


def read_canonical_index(resolver: StoreResolver, src_uri: str) -> CanonicalIndex:
    """Read and verify the index of the canonical savepoint at ``src_uri``."""
    uri = join(src_uri, INDEX_NAME)
    store, key = resolver.resolve(uri)
    try:
        raw = store.get(key)
    except ObjectNotFoundError as exc:
        raise CorruptFileError(
            "no canonical savepoint index here (export incomplete, or not a canonical "
            "savepoint directory)",
            uri=uri,
        ) from exc
    doc = load_json(raw, what="canonical savepoint index", uri=uri)
    try:
        fmt, version, body, crc = doc["format"], doc["version"], doc["body"], doc["crc32c"]
    except (ValueError, KeyError, TypeError) as exc:
        raise CorruptFileError(f"canonical savepoint index is not valid: {exc}", uri=uri) from exc
    if fmt != INDEX_FORMAT:
        raise CorruptFileError(f"not a canonical savepoint index: format {fmt!r}", uri=uri)
    if version != VERSION:
        raise UnsupportedVersionError(
            f"canonical savepoint version {version} is not supported by this runtime "
            f"(supported: [{VERSION}]); upgrade the runtime to read it",
            uri=uri,
        )
    actual = crc32c(_canonical_json(body))
    if actual != crc:
        raise CorruptFileError(
            f"checksum mismatch in canonical savepoint index: stored {crc:#010x}, "
            f"computed {actual:#010x}",
            uri=uri,
        )
    files = tuple(
        CanonicalFile(
            int(f["bucket"]), str(f["name"]), int(f["rows"]), int(f["size"]), int(f["crc32c"])
        )
        for f in body["files"]
    )
    return CanonicalIndex(int(body["num_buckets"]), files)


def read_canonical_bucket(resolver: StoreResolver, src_uri: str, entry: CanonicalFile) -> Any:
    """Read and verify one bucket file; return its rows as a ``pyarrow.Table``."""
    uri = join(src_uri, entry.name)
    store, key = resolver.resolve(uri)
    data = store.get(key)
    if len(data) != entry.size or crc32c(data) != entry.crc:
        raise CorruptFileError(
            f"canonical bucket file does not match the index: {len(data)} bytes with "
            f"CRC32C {crc32c(data):#010x}, index says {entry.size} bytes, {entry.crc:#010x}",
            uri=uri,
        )
    try:
        table = pq.read_table(pa.BufferReader(data))
    except (pa.ArrowException, OSError) as exc:
        raise CorruptFileError(
            f"canonical bucket file is not valid Parquet: {exc}", uri=uri
        ) from exc
    meta = table.schema.metadata or {}
    if meta.get(b"gic.format") != FILE_FORMAT.encode():
        raise CorruptFileError("not a canonical state file (schema metadata)", uri=uri)
    version = (meta.get(b"gic.version") or b"").decode("ascii", "replace")
    if version not in FILE_VERSIONS:
        raise UnsupportedVersionError(
            f"canonical state file version {version!r:.20} is not supported (supported: "
            f"{', '.join(FILE_VERSIONS)}); upgrade the runtime to read it",
            uri=uri,
        )
    expected = SCHEMA if version == str(FILE_VERSION) else pa.schema(list(SCHEMA)[:_V1_COLUMNS])
    if table.num_rows != entry.rows or not table.schema.remove_metadata().equals(expected):
        raise CorruptFileError("canonical bucket file's rows or columns do not match", uri=uri)
    for field in list(SCHEMA)[len(expected) :]:
        table = table.append_column(field, pa.nulls(table.num_rows, field.type))
    return table
