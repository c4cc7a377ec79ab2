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

Importing (:func:`restore_from_canonical`) re-creates state, it does not resume a lineage:
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

from gic_runtime.changelog.records import Op
from gic_runtime.errors import CorruptFileError, ObjectNotFoundError, UnsupportedVersionError
from gic_runtime.formats import crc32c, load_json
from gic_runtime.handles import BucketState
from gic_runtime.state.backend import KeyedStateBackend
from gic_runtime.state.keys import (
    KIND_DUE,
    KIND_LIST,
    KIND_MAP,
    KIND_NAMES,
    KIND_TIMER,
    bucket_for,
    decode_key,
    parse_store_key,
    split_values,
    state_prefix,
)
from gic_runtime.state.memory_store import InMemoryStore
from gic_runtime.state.restore import ChangeReader, restore_bucket
from gic_runtime.state.timers import DOMAINS, due_key, timer_key
from gic_runtime.storage.uri import StoreResolver, join

INDEX_NAME: Final = "_canonical.json"
INDEX_FORMAT: Final = "gic-canonical-savepoint"
FILE_FORMAT: Final = "gic-canonical-state"
VERSION: Final = 1

SCHEMA: Final = pa.schema(
    [
        pa.field("bucket", pa.int32(), nullable=False),
        pa.field("state", pa.string(), nullable=False),
        pa.field("kind", pa.string(), nullable=False),
        pa.field("key", pa.binary(), nullable=False),
        pa.field("user_key", pa.binary(), nullable=True),
        pa.field("index", pa.int64(), nullable=True),
        pa.field("value", pa.binary(), nullable=False),
    ]
)
_KIND_BYTES: Final = {name: kind for kind, name in KIND_NAMES.items()}


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
        if skey[:1] == KIND_DUE:  # derived from the timer entries
            continue
        parsed = parse_store_key(skey)
        kind = KIND_NAMES[parsed.kind]
        if parsed.kind == KIND_LIST:
            for i, element in enumerate(split_values(value)):
                row(parsed.name, kind, parsed.key, None, i, element)
        else:
            row(parsed.name, kind, parsed.key, parsed.user_key, None, value)
    return pa.table(cols, schema=SCHEMA)


def _write_bucket_file(
    resolver: StoreResolver, dest_uri: str, bucket: int, num_buckets: int, table: Any
) -> CanonicalFile:
    metadata = {
        b"gic.format": FILE_FORMAT.encode(),
        b"gic.version": str(VERSION).encode(),
        b"gic.bucket": str(bucket).encode(),
        b"gic.num_buckets": str(num_buckets).encode(),
    }
    sink = pa.BufferOutputStream()
    pq.write_table(table.replace_schema_metadata(metadata), sink, compression="zstd")
    data = sink.getvalue().to_pybytes()
    name = f"bucket-{bucket:05d}.parquet"
    store, key = resolver.resolve(join(dest_uri, name))
    store.put(key, data, if_absent=True)
    return CanonicalFile(bucket, name, table.num_rows, len(data), crc32c(data))


def _write_index(resolver: StoreResolver, dest_uri: str, index: CanonicalIndex) -> None:
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
    _write_index(resolver, dest_uri, index)
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
    _write_index(resolver, dest_uri, index)
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
    if meta.get(b"gic.version") != str(VERSION).encode():
        raise UnsupportedVersionError(
            f"canonical state file version {meta.get(b'gic.version')!r} is not supported",
            uri=uri,
        )
    if table.num_rows != entry.rows or not table.schema.remove_metadata().equals(SCHEMA):
        raise CorruptFileError("canonical bucket file's rows or columns do not match", uri=uri)
    return table


@dataclass(frozen=True, slots=True)
class CanonicalImportStats:
    """What :func:`restore_from_canonical` did."""

    files_read: int
    rows_imported: int
    changes: int


def restore_from_canonical(
    backend: KeyedStateBackend, src_uri: str, resolver: StoreResolver
) -> CanonicalImportStats:
    """Replace the state of ``backend``'s buckets with the rows of the canonical savepoint
    at ``src_uri`` whose keys route into them (see the module doc on lineage)."""
    index = read_canonical_index(resolver, src_uri)
    backend.restore({}, resolver)
    same_layout = index.num_buckets == backend.num_buckets
    owned = backend.bucket_range
    files = [f for f in index.files if not same_layout or f.bucket in owned]
    rows = changes = 0
    for entry in files:
        table = read_canonical_bucket(resolver, src_uri, entry)
        pending: tuple[int, bytes] | None = None
        chunks: list[bytes] = []
        for r in table.to_pylist():
            key = r["key"]
            bucket = (
                r["bucket"] if same_layout else bucket_for(decode_key(key), backend.num_buckets)
            )
            if bucket not in owned:
                continue
            kind = _KIND_BYTES.get(r["kind"])
            if kind is None:
                raise CorruptFileError(
                    f"unknown state kind {r['kind']!r}", uri=join(src_uri, entry.name)
                )
            skey = state_prefix(kind, r["state"]) + key
            if kind == KIND_LIST:
                if pending is not None and pending != (bucket, skey):
                    backend.write_raw(pending[0], Op.APPEND, pending[1], b"".join(chunks))
                    changes += 1
                    chunks = []
                pending = (bucket, skey)
                chunks.append(r["value"])
            elif kind == KIND_TIMER:
                changes += _import_timer(backend, bucket, r, join(src_uri, entry.name))
            else:
                if kind == KIND_MAP:
                    if r["user_key"] is None:
                        raise CorruptFileError(
                            "map row without user_key", uri=join(src_uri, entry.name)
                        )
                    skey += r["user_key"]
                backend.write_raw(bucket, Op.PUT, skey, r["value"])
                changes += 1
            rows += 1
        if pending is not None:
            backend.write_raw(pending[0], Op.APPEND, pending[1], b"".join(chunks))
            changes += 1
    return CanonicalImportStats(len(files), rows, changes)


def _import_timer(backend: KeyedStateBackend, bucket: int, row: Mapping[str, Any], uri: str) -> int:
    """Write a timer row's timer and due entries; returns the changes written."""
    domain = next((d for d in DOMAINS if d == row["state"]), None)
    raw_at = row["user_key"]
    at = None if raw_at is None else decode_key(raw_at)
    if domain is None or isinstance(at, bool) or not isinstance(at, int):
        raise CorruptFileError(
            f"timer row with domain {row['state']!r:.40} and time {at!r:.40}: the domain "
            "must be 'event' or 'processing' and the time integer microseconds",
            uri=uri,
        )
    backend.write_raw(bucket, Op.PUT, due_key(domain, row["key"], at))
    backend.write_raw(bucket, Op.PUT, timer_key(domain, row["key"], at))
    return 2
