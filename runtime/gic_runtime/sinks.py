"""Sinks: where a batch's staged output goes once its checkpoint is complete.

State tasks stage their output as Parquet files under the job's ``staging/<batch>/``
directory and name them in their acks; the manifest of batch N records them (its
``sink`` section). Only after manifest N is written does the driver *publish* them.

* :class:`FileSink` (transactional, exactly-once): publishing copies batch N's staged
  files to deterministic names ``part-<N>-<i>.parquet`` in the output directory, then
  writes the commit marker ``_gic_commits/<N>``. Output of a batch whose checkpoint
  never completed is never visible; publishing twice writes the same bytes under the
  same names (idempotent), so a replay never doubles output. Readers that want only
  whole batches use :func:`read_file_sink`, which reads batches with a marker.
* Any other sink (see ``gic_runtime.spark.sinks``) receives the batch with its batch id
  at least once; a done marker skips batches already delivered.

Invariant: a sink publishes a batch only from what manifest N names, and records
having done so; :meth:`Sink.published` is true only after every file is in place.
"""

from __future__ import annotations

import io
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import pyarrow as pa
import pyarrow.parquet as pq

from gic_runtime.coordination.barrier import StagedFile
from gic_runtime.errors import ConfigurationError, CorruptFileError, ObjectExistsError
from gic_runtime.formats import decode_text_record, encode_text_record
from gic_runtime.storage.uri import StoreResolver, join
from gic_runtime.storage.writes import create_once

MARKER_MAGIC = "GICK"
MARKER_VERSION = 1
COMMITS_DIR = "_gic_commits"


class Sink(Protocol):
    """Publishes staged batch output after the batch's checkpoint completed."""

    def describe(self) -> dict[str, Any]:
        """JSON-able identity of the sink, stored in the manifest."""
        ...

    def published(self, batch_id: int) -> bool:
        """Whether batch ``batch_id`` was already fully published."""
        ...

    def publish(self, batch_id: int, staged: Sequence[StagedFile]) -> int:
        """Make batch ``batch_id``'s staged output visible (idempotent); returns rows."""
        ...


def staged_from_manifest(sink: Mapping[str, Any]) -> list[StagedFile]:
    """The staged files a manifest's ``sink`` section names."""
    return [StagedFile.from_json(f) for f in sink.get("staged", [])]


def encode_marker(body: Mapping[str, Any]) -> bytes:
    """A commit/done marker: a ``GICK`` text record with a JSON body."""
    payload = json.dumps(body, sort_keys=True, separators=(",", ":")).encode()
    return encode_text_record(MARKER_MAGIC, MARKER_VERSION, payload)


def decode_marker(data: bytes, uri: str) -> dict[str, Any]:
    _, payload = decode_text_record(
        data, MARKER_MAGIC, frozenset({MARKER_VERSION}), what="sink commit marker", uri=uri
    )
    try:
        body: dict[str, Any] = json.loads(payload)
    except ValueError as exc:
        raise CorruptFileError(f"sink commit marker is not JSON: {exc}", uri=uri) from exc
    return body


@dataclass
class FileSink:
    """Transactional Parquet output directory (local path or ``s3://``)."""

    path: str
    resolver: StoreResolver

    def __post_init__(self) -> None:
        if not self.path:
            raise ConfigurationError("the file sink needs an output path")
        self.path = self.path.rstrip("/")

    def describe(self) -> dict[str, Any]:
        return {"kind": "parquet", "path": self.path}

    def _marker_uri(self, batch_id: int) -> str:
        return join(self.path, COMMITS_DIR, f"{batch_id:012d}")

    def published(self, batch_id: int) -> bool:
        store, key = self.resolver.resolve(self._marker_uri(batch_id))
        return store.exists(key)

    def publish(self, batch_id: int, staged: Sequence[StagedFile]) -> int:
        if self.published(batch_id):
            return 0
        names: list[str] = []
        rows = 0
        for i, item in enumerate(sorted(staged, key=lambda s: s.uri)):
            name = f"part-{batch_id:012d}-{i:05d}.parquet"
            src_store, src_key = self.resolver.resolve(item.uri)
            dst_store, dst_key = self.resolver.resolve(join(self.path, name))
            if dst_store.exists(dst_key):
                # An earlier publish of this batch copied it before dying: names are
                # deterministic and copies atomic, so the same size means the same file.
                if dst_store.size(dst_key) != src_store.size(src_key):
                    raise ObjectExistsError(
                        f"{name} of batch {batch_id} exists in {self.path} with other content; "
                        "the output directory is shared with another writer: give each job "
                        "its own output path",
                        uri=dst_store.uri_for(dst_key),
                    )
            elif src_store is dst_store:
                src_store.copy(src_key, dst_key)
            else:
                dst_store.put(dst_key, src_store.get(src_key))
            names.append(name)
            rows += item.rows
        store, key = self.resolver.resolve(self._marker_uri(batch_id))
        create_once(store, key, encode_marker({"batch_id": batch_id, "files": names, "rows": rows}))
        return rows


def committed_batches(path: str, resolver: StoreResolver) -> dict[int, list[str]]:
    """Batch id -> file names of every batch published to the file sink at ``path``."""
    store, prefix = resolver.resolve(join(path.rstrip("/"), COMMITS_DIR))
    out: dict[int, list[str]] = {}
    for info in store.list(prefix.rstrip("/") + "/"):
        uri = store.uri_for(info.key)
        body = decode_marker(store.get(info.key), uri)
        out[int(body["batch_id"])] = [str(n) for n in body["files"]]
    return dict(sorted(out.items()))


def read_file_sink(path: str, resolver: StoreResolver) -> pa.Table | None:
    """Every committed row of the file sink at ``path`` with a ``batch_id`` column, in
    batch order (``None`` when nothing was published yet)."""
    tables: list[pa.Table] = []
    for batch_id, names in committed_batches(path, resolver).items():
        for name in names:
            store, key = resolver.resolve(join(path.rstrip("/"), name))
            table = pq.read_table(io.BytesIO(store.get(key)))
            tables.append(table.append_column("batch_id", pa.array([batch_id] * table.num_rows)))
    return pa.concat_tables(tables) if tables else None
