"""Where state is read from offline: a checkpoint, a native or a canonical savepoint.

:func:`open_state_source` takes a checkpoint manifest (``.../chk-N.manifest``), a native
savepoint (its directory or ``_savepoint.manifest``) or a canonical savepoint (its
directory or ``_canonical.json``); :func:`latest_state_source` a job's newest checkpoint
that counts (:func:`~gic_runtime.checkpoint.catalog.find_latest_checkpoint`). Either
gives one :class:`BucketSource` per bucket that holds state; :func:`bucket_rows` turns
one into canonical rows (:mod:`gic_runtime.savepoint.canonical`), a bounded number at
a time.

Invariants (what storage holds is not trusted): manifests and indexes are read with
their loaders' bounds and checks; a manifest naming objects outside its own directory
(a job's, or a savepoint's) and its recorded restore source is refused before anything
else is read; a canonical bucket file's name is derived from its bucket (the index's
name must equal it) and its size is checked before it is downloaded. Reading never
writes to storage. A bucket is rebuilt in the store the caller gives (on disk for large
buckets), then read in slices of :data:`CHUNK_ROWS` entries.

Thread-safety: stateless functions; one call uses its store alone.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from itertools import islice
from typing import Any, Final

import pyarrow as pa
import pyarrow.compute as pc

from gic_runtime.checkpoint.catalog import find_latest_checkpoint, read_manifest
from gic_runtime.checkpoint.manifest import Manifest
from gic_runtime.checkpoint.manifest_codec import manifest_base_dir
from gic_runtime.errors import CorruptFileError, RestoreError
from gic_runtime.handles import BucketState
from gic_runtime.layout import MANIFEST_SUFFIX, SAVEPOINT_MANIFEST
from gic_runtime.savepoint.canonical import (
    INDEX_NAME,
    CanonicalFile,
    bucket_file_name,
    bucket_table,
    read_canonical_bucket,
    read_canonical_index,
)
from gic_runtime.savepoint.native import load_savepoint, objects_outside
from gic_runtime.state.keys import bucket_for, encode
from gic_runtime.state.memory_store import InMemoryStore
from gic_runtime.state.restore import restore_bucket
from gic_runtime.state.stores import KVStore
from gic_runtime.storage.uri import StoreResolver, join

__all__ = [
    "CHUNK_ROWS",
    "BucketSource",
    "StateSource",
    "bucket_rows",
    "key_rows",
    "latest_state_source",
    "open_state_source",
]

CHUNK_ROWS: Final = 10_000
"""Store entries (or canonical rows) turned into one table at a time."""
_EMPTY: Final = bucket_table(0, [])


@dataclass(frozen=True, slots=True)
class BucketSource:
    """One bucket to read: its state in a checkpoint (``state``), or its file in the
    canonical savepoint in ``directory`` (``file``)."""

    bucket: int
    state: BucketState | None = None
    directory: str | None = None
    file: CanonicalFile | None = None

    def to_json(self) -> dict[str, Any]:
        if self.state is not None:
            return {"state": self.state.to_json()}
        assert self.file is not None and self.directory is not None
        f = self.file
        file = {"bucket": f.bucket, "name": f.name, "rows": f.rows, "size": f.size, "crc": f.crc}
        return {"directory": self.directory, "file": file}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> BucketSource:
        if "state" in data:
            state = BucketState.from_json(data["state"])
            return cls(state.bucket, state=state)
        f = data["file"]
        file = CanonicalFile(f["bucket"], f["name"], f["rows"], f["size"], f["crc"])
        return cls(file.bucket, directory=data["directory"], file=file)


@dataclass(frozen=True, slots=True)
class StateSource:
    """What was opened: ``kind`` (checkpoint, native-savepoint, canonical-savepoint),
    the file read (``uri``), the bucket count and the buckets that hold state."""

    kind: str
    uri: str
    num_buckets: int
    buckets: tuple[BucketSource, ...]

    def bucket(self, bucket: int) -> BucketSource | None:
        return next((b for b in self.buckets if b.bucket == bucket), None)


def _exists(resolver: StoreResolver, uri: str) -> bool:
    store, key = resolver.resolve(uri)
    return store.exists(key)


def open_state_source(resolver: StoreResolver, uri: str) -> StateSource:
    """The state at ``uri`` (see the module docstring); :class:`RestoreError` when
    nothing there is a checkpoint or savepoint."""
    uri = uri.rstrip("/")
    if uri.endswith("/" + INDEX_NAME):
        return _canonical(resolver, uri[: -len(INDEX_NAME) - 1])
    if uri.endswith(SAVEPOINT_MANIFEST) or (
        not uri.endswith(MANIFEST_SUFFIX) and _exists(resolver, join(uri, SAVEPOINT_MANIFEST))
    ):
        stored = load_savepoint(resolver, uri)
        return _from_manifest("native-savepoint", stored.uri, stored.manifest)
    if uri.endswith(MANIFEST_SUFFIX):
        return _from_manifest("checkpoint", uri, read_manifest(resolver, uri))
    if _exists(resolver, join(uri, INDEX_NAME)):
        return _canonical(resolver, uri)
    raise RestoreError(
        f"no state at {uri}: expected a checkpoint manifest (chk-N.manifest), a native "
        f"savepoint directory (with {SAVEPOINT_MANIFEST}) or a canonical savepoint "
        f"directory (with {INDEX_NAME}); check the path (gic checkpoints and gic savepoints "
        "list them)"
    )


def latest_state_source(resolver: StoreResolver, root: str, job_id: str) -> StateSource:
    """The state of job ``job_id``'s newest checkpoint that counts under ``root``."""
    latest = find_latest_checkpoint(resolver, root, job_id)
    if latest is None:
        raise RestoreError(
            f"job {job_id!r} has no completed checkpoint under {root}: check the job id and "
            "the storage root (gic jobs lists a root's jobs), or run the job first"
        )
    return _from_manifest("checkpoint", latest.stored.uri, latest.stored.manifest)


def _from_manifest(kind: str, uri: str, manifest: Manifest) -> StateSource:
    within = [manifest_base_dir(uri)]
    if manifest.restored_from is not None:
        within.append(manifest_base_dir(manifest.restored_from.source_uri))
    outside = objects_outside(manifest.uris(), within)
    if outside:
        raise RestoreError(
            f"{uri} names {len(outside)} object(s) outside its directory and its restore "
            f"source (e.g. {outside[0]}); its state is not read: check who wrote the "
            f"manifest (allowed: {', '.join(within)})"
        )
    buckets = tuple(
        BucketSource(b, state=s)
        for b, s in sorted(manifest.buckets.items())
        if s.seq > 0 or s.snapshot is not None
    )
    return StateSource(kind, uri, manifest.num_buckets, buckets)


def _canonical(resolver: StoreResolver, directory: str) -> StateSource:
    index = read_canonical_index(resolver, directory)
    uri = join(directory, INDEX_NAME)
    buckets = []
    for f in sorted(index.files, key=lambda f: f.bucket):
        if f.name != bucket_file_name(f.bucket) or not 0 <= f.bucket < index.num_buckets:
            raise CorruptFileError(
                f"canonical savepoint index lists {f.name!r:.80} for bucket {f.bucket}; its "
                f"file must be {bucket_file_name(f.bucket)} of {index.num_buckets} buckets",
                uri=uri,
            )
        buckets.append(BucketSource(f.bucket, directory=directory, file=f))
    return StateSource("canonical-savepoint", uri, index.num_buckets, tuple(buckets))


def bucket_rows(
    resolver: StoreResolver, source: BucketSource, new_store: Callable[[], KVStore]
) -> Iterator[pa.Table]:
    """Canonical rows of ``source``, at most :data:`CHUNK_ROWS` entries' worth a table;
    a checkpoint's bucket is rebuilt in a store from ``new_store`` (closed after)."""
    if source.file is not None and source.directory is not None:
        uri = join(source.directory, bucket_file_name(source.bucket))
        store, key = resolver.resolve(uri)
        size = store.size(key)
        if size != source.file.size:
            raise CorruptFileError(
                f"canonical bucket file has {size} bytes, its index says {source.file.size}",
                uri=uri,
            )
        table = read_canonical_bucket(resolver, source.directory, source.file)
        yield from (pa.Table.from_batches([b]) for b in table.to_batches(CHUNK_ROWS))
        return
    assert source.state is not None
    kv = new_store()
    try:
        restore_bucket(kv, source.state, resolver)
        with kv.snapshot_items(source.bucket) as view:
            entries = iter(view)
            while chunk := list(islice(entries, CHUNK_ROWS)):
                yield bucket_table(source.bucket, chunk)
    finally:
        kv.close()


def key_rows(resolver: StoreResolver, source: StateSource, key: Any) -> tuple[int, pa.Table]:
    """The bucket of ``key`` in ``source`` and the canonical rows of ``key`` there: only
    that bucket is read (rebuilt in memory for a checkpoint)."""
    bucket = bucket_for(key, source.num_buckets)
    found = source.bucket(bucket)
    if found is None:
        return bucket, _EMPTY
    wanted = pa.scalar(encode(key), pa.binary())
    parts = [
        t.filter(pc.equal(t["key"], wanted)) for t in bucket_rows(resolver, found, InMemoryStore)
    ]
    return bucket, pa.concat_tables([_EMPTY, *parts])
