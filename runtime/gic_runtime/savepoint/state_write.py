"""Writing a canonical savepoint from rows of state (what ``write_state`` builds on).

:func:`prepare_target` refuses a directory that holds anything; :func:`write_buckets`
takes canonical rows (:func:`gic_runtime.savepoint.state_rows.canonical_rows`) grouped by
bucket and writes each bucket's file; :func:`finish` writes the index, last, which makes
the savepoint complete (a directory without it is not a savepoint and no job restores
from it); :func:`discard` removes the bucket files of a write that failed.

Invariants: within a bucket a value, a map entry or a timer appears once and a list
position once per list; a list's elements all have a TTL or none; anything else raises
:class:`~gic_runtime.savepoint.state_rows.StateRowError` before that bucket's file is
written. A bucket's rows are sorted as the canonical format says (kind, state, key, user
key, index) and list positions renumbered from 0 in their order. Files are written
create-if-absent, and a file already holding exactly the same bytes (a retried task)
counts as written.

Thread-safety: stateless functions; a call writes only the buckets it is given.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import pyarrow as pa

from gic_runtime.errors import StateError
from gic_runtime.formats import crc32c
from gic_runtime.savepoint.canonical import (
    INDEX_NAME,
    SCHEMA,
    CanonicalFile,
    CanonicalIndex,
    bucket_file_name,
    encode_bucket_file,
    write_canonical_index,
)
from gic_runtime.savepoint.state_json import to_json
from gic_runtime.savepoint.state_rows import StateRowError
from gic_runtime.state.keys import decode_key
from gic_runtime.storage.object_store import ObjectStore
from gic_runtime.storage.uri import StoreResolver, join
from gic_runtime.storage.writes import create_once

__all__ = ["discard", "finish", "prepare_target", "write_buckets"]

_ORDER = [(name, "ascending") for name in ("kind", "state", "key", "user_key", "index")]


def _store(resolver: StoreResolver, directory: str) -> tuple[ObjectStore, str]:
    store, key = resolver.resolve(directory.rstrip("/"))
    return store, key.rstrip("/") + "/"


def prepare_target(resolver: StoreResolver, directory: str) -> None:
    """Refuse (:class:`StateError`) a target directory that holds objects."""
    store, prefix = _store(resolver, directory)
    first = next(iter(store.list(prefix)), None)
    if first is not None:
        kind = "a savepoint" if first.key.endswith(INDEX_NAME) else "files"
        raise StateError(
            f"{directory} already holds {kind} (e.g. {store.uri_for(first.key)}); state is "
            "written into a new directory: choose another path, or remove this one"
        )


def write_buckets(
    resolver: StoreResolver, directory: str, num_buckets: int, tables: Iterable[pa.Table]
) -> list[CanonicalFile]:
    """Write the buckets of ``tables`` (canonical rows; a bucket's rows may span
    consecutive tables, never two runs) into ``directory``; their index entries."""
    files: list[CanonicalFile] = []
    current: int | None = None
    parts: list[pa.Table] = []
    for table in tables:
        for batch in _runs(table):
            bucket = batch.column("bucket")[0].as_py()
            if bucket != current and parts:
                files.append(_write(resolver, directory, num_buckets, pa.concat_tables(parts)))
                parts = []
            current = bucket
            parts.append(batch)
    if parts:
        files.append(_write(resolver, directory, num_buckets, pa.concat_tables(parts)))
    return files


def _runs(table: pa.Table) -> Iterable[pa.Table]:
    """Consecutive runs of one bucket in ``table``."""
    buckets = table.column("bucket").to_pylist()
    start = 0
    for i in range(1, len(buckets) + 1):
        if i == len(buckets) or buckets[i] != buckets[start]:
            yield table.slice(start, i - start)
            start = i


def _write(
    resolver: StoreResolver, directory: str, num_buckets: int, rows: pa.Table
) -> CanonicalFile:
    table = _checked(rows.cast(SCHEMA).sort_by(_ORDER))
    bucket = table.column("bucket")[0].as_py()
    data = encode_bucket_file(bucket, num_buckets, table)
    name = bucket_file_name(bucket)
    store, key = resolver.resolve(join(directory, name))
    create_once(store, key, data)
    return CanonicalFile(bucket, name, table.num_rows, len(data), crc32c(data))


def _checked(table: pa.Table) -> pa.Table:
    """``table`` with list positions renumbered; raises on duplicates (module doc)."""
    rows = table.to_pylist()
    index: list[Any] = []
    previous: dict[str, Any] | None = None
    position = 0
    for row in rows:
        same = previous is not None and all(
            previous[c] == row[c] for c in ("kind", "state", "key", "user_key")
        )
        if row["kind"] == "list":
            position = position + 1 if same else 0
            if same and previous is not None:
                if previous["index"] == row["index"]:
                    raise _duplicate(row, f"position {row['index']} appears twice")
                if (previous["ttl_by"] is None) != (row["ttl_by"] is None):
                    raise _duplicate(row, "its elements mix rows with and without a TTL")
            index.append(position)
        else:
            if same:
                raise _duplicate(row, "appears twice")
            index.append(None)
        previous = row
    return table.set_column(
        table.schema.get_field_index("index"), SCHEMA.field("index"), pa.array(index, pa.int64())
    )


def _duplicate(row: dict[str, Any], problem: str) -> StateRowError:
    key = to_json(decode_key(row["key"]))
    entry = f" entry {to_json(decode_key(row['user_key']))}" if row["user_key"] else ""
    return StateRowError(
        f"{row['kind']} {row['state']!r:.60} of key {key:.80}{entry}: {problem}; give each "
        "value, map entry, timer and list position once (drop or merge the duplicates)"
    )


def finish(
    resolver: StoreResolver, directory: str, num_buckets: int, files: Iterable[CanonicalFile]
) -> CanonicalIndex:
    """Write the index of the savepoint in ``directory`` (last): it is complete."""
    by_bucket = sorted(files, key=lambda f: f.bucket)
    buckets = [f.bucket for f in by_bucket]
    if len(set(buckets)) != len(buckets):
        raise StateRowError(
            "a bucket's rows were written by two tasks; group the rows by bucket (this is a bug "
            "of the writer, not of the rows)"
        )
    index = CanonicalIndex(num_buckets, tuple(by_bucket))
    write_canonical_index(resolver, directory, index)
    return index


def discard(resolver: StoreResolver, directory: str, num_buckets: int) -> int:
    """Delete the bucket files a failed write left in ``directory`` (never the index)."""
    store, prefix = _store(resolver, directory)
    names = {prefix + bucket_file_name(b) for b in range(num_buckets)}
    found = [info.key for info in store.list(prefix) if info.key in names]
    return store.delete_many(found) if found else 0
