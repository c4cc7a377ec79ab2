"""Sinks: where a batch's staged output goes once its checkpoint is complete.

State tasks stage their output as Parquet files under the job's ``staging/<batch>/``
directory and name them in their acks; the manifest of batch N records them (its
``sink`` section). Only after manifest N is written does the driver *publish* them.

* :class:`FileSink` (transactional, exactly-once): publishing copies batch N's staged
  files to deterministic names ``part-<N>-<i>.parquet`` in the output directory, then
  writes the commit marker ``_gic_commits/<N>``. Output of a batch whose checkpoint
  never completed is never visible; publishing twice writes the same bytes under the
  same names (idempotent), so a replay never doubles output. The directory belongs to
  one job at a time (:mod:`gic_runtime.sinks.output_owners`): a job checks its claim before
  its first batch, records it with its first publish and checks before every publish
  that nobody took it over; a job that
  took it over writes as a later *generation* under names of its own
  (``part-g<G>-<N>-<i>.parquet``, ``_gic_commits/g<G>-<N>``). Readers that want only
  whole batches use :func:`read_file_sink`, which reads batches with a marker and
  leaves out those a later generation of the same state superseded.
* Any other sink (see ``gic_runtime.spark.spark_sinks``) receives the batch with its batch id
  at least once; a done marker skips batches already delivered.

Invariant: a sink publishes a batch only from what manifest N names, and records
having done so; :meth:`Sink.published` is true only after every file is in place; a
file sink publishes only while its claim on the output holds.
"""

from __future__ import annotations

import io
import json
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Protocol

import pyarrow as pa
import pyarrow.parquet as pq

from gic_runtime.coordination.barrier import StagedFile
from gic_runtime.errors import (
    ConfigurationError,
    CorruptFileError,
    ObjectExistsError,
    OutputOwnedError,
    StateError,
)
from gic_runtime.formats import decode_text_record, encode_text_record, load_json
from gic_runtime.sinks.output_owners import (
    OutputClaim,
    OutputGeneration,
    check_claim,
    claim_output,
    read_generations,
    superseded,
    taken_over,
)
from gic_runtime.storage.uri import StoreResolver, join
from gic_runtime.storage.writes import create_once

MARKER_MAGIC = "GICK"
MARKER_VERSION = 1
COMMITS_DIR = "_gic_commits"
#: Staged files of one batch copied to the output at once.
PUBLISH_THREADS = 8


class Sink(Protocol):
    """Publishes staged batch output after the batch's checkpoint completed."""

    def describe(self) -> dict[str, Any]:
        """JSON-able identity of the sink, stored in the manifest."""
        ...

    def claim(self, claim: OutputClaim) -> None:
        """Take the output for ``claim``'s job before its first batch (a sink whose
        output is the job's own has nothing to claim); raises
        :class:`~gic_runtime.errors.OutputOwnedError` when another job owns it."""
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
    body: dict[str, Any] = load_json(payload, what="sink commit marker", uri=uri)
    return body


def _batch_name(generation: int, batch_id: int) -> str:
    """``<N>`` for generation 0 (the original names), else ``g<G>-<N>``."""
    head = f"g{generation:06d}-" if generation else ""
    return f"{head}{batch_id:012d}"


@dataclass
class FileSink:
    """Transactional Parquet output directory (local path or ``s3://``), written by the
    job whose claim holds it (see the module docstring)."""

    path: str
    resolver: StoreResolver
    _generation: OutputGeneration | None = field(default=None, init=False, repr=False)
    _pending: OutputClaim | None = field(default=None, init=False, repr=False)

    def __post_init__(self) -> None:
        if not self.path:
            raise ConfigurationError("the file sink needs an output path")
        self.path = self.path.rstrip("/")

    def describe(self) -> dict[str, Any]:
        return {"kind": "parquet", "path": self.path}

    @property
    def generation(self) -> OutputGeneration | None:
        """The generation this sink writes as (``None`` before :meth:`claim`, and after
        a claim that needs a record of its own until the first publish creates it)."""
        return self._generation

    def _prefix(self) -> tuple[Any, str]:
        store, key = self.resolver.resolve(self.path)
        return store, key.rstrip("/") + "/" if key else ""

    def _has_batches(self) -> bool:
        store, prefix = self._prefix()
        return next(iter(store.list(f"{prefix}{COMMITS_DIR}/")), None) is not None

    def claim(self, claim: OutputClaim) -> None:
        """Check ``claim`` now (refused: :class:`OutputOwnedError`, nothing written); its
        owner record, when it needs one, is created by the first publish."""
        store, prefix = self._prefix()
        held = check_claim(store, prefix, self.path, claim, has_batches=self._has_batches())
        self._generation, self._pending = held, (None if held is not None else claim)

    def _recorded(self) -> OutputGeneration:
        """The generation this sink holds, its owner record created now when the claim
        needs one (raises :class:`OutputOwnedError` when another job recorded first)."""
        if self._generation is None and self._pending is not None:
            store, prefix = self._prefix()
            self._generation = claim_output(
                store, prefix, self.path, self._pending, has_batches=self._has_batches()
            )
            self._pending = None
        if self._generation is None:
            raise StateError(f"the file sink at {self.path} publishes only after a claim")
        return self._generation

    def _held(self) -> int:
        """The generation this sink holds; raises unless its claim still holds."""
        current = self._recorded()
        store, prefix = self._prefix()
        if taken_over(store, prefix, current.generation):
            latest = read_generations(store, prefix)[-1]
            raise OutputOwnedError(
                f"output {self.path} was taken over by job {latest.job_id} (generation "
                f"{latest.generation}) while job {current.job_id} was writing there; job "
                f"{current.job_id} stops publishing: give it an output path of its own to go on"
            )
        return current.generation

    def _marker_uri(self, generation: int, batch_id: int) -> str:
        return join(self.path, COMMITS_DIR, _batch_name(generation, batch_id))

    def published(self, batch_id: int) -> bool:
        """Whether this sink's generation published ``batch_id`` (a claim not recorded
        yet is recorded first: its generation names the marker)."""
        generation = self._recorded().generation
        store, key = self.resolver.resolve(self._marker_uri(generation, batch_id))
        return store.exists(key)

    def _copy_staged(self, batch_id: int, item: StagedFile, name: str) -> None:
        """Copy one staged file to ``name`` in the output directory (idempotent)."""
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

    def publish(self, batch_id: int, staged: Sequence[StagedFile]) -> int:
        generation = self._held()
        if self.published(batch_id):
            return 0
        ordered = sorted(staged, key=lambda s: s.uri)
        names = [
            f"part-{_batch_name(generation, batch_id)}-{i:05d}.parquet" for i in range(len(ordered))
        ]
        # The copies are independent (each to a name of its own); on an object store each
        # is a request or two of latency, so they run side by side. The marker is written
        # only once every copy is in place, whichever failed first is raised.
        jobs = list(zip(ordered, names, strict=True))
        if len(jobs) <= 1:
            for item, name in jobs:
                self._copy_staged(batch_id, item, name)
        else:
            with ThreadPoolExecutor(min(PUBLISH_THREADS, len(jobs))) as pool:
                futures = [pool.submit(self._copy_staged, batch_id, i, n) for i, n in jobs]
            for future in futures:
                future.result()
        rows = sum(item.rows for item in ordered)
        store, key = self.resolver.resolve(self._marker_uri(generation, batch_id))
        body = {"batch_id": batch_id, "files": names, "rows": rows}
        if generation:
            body["generation"] = generation
        create_once(store, key, encode_marker(body))
        return rows


@dataclass(frozen=True, slots=True)
class CommittedBatch:
    """A batch published to a file sink: by ``generation``, under ``files``."""

    generation: int
    batch_id: int
    files: tuple[str, ...]


def committed_batches(path: str, resolver: StoreResolver) -> list[CommittedBatch]:
    """Every batch visible in the file sink at ``path``, ordered by generation and batch
    id: batches with a commit marker, less those a later generation of the same state
    superseded (:func:`gic_runtime.sinks.output_owners.superseded`)."""
    store, key = resolver.resolve(path.rstrip("/"))
    prefix = key.rstrip("/") + "/" if key else ""
    generations = read_generations(store, prefix)
    out: list[CommittedBatch] = []
    for info in store.list(f"{prefix}{COMMITS_DIR}/"):
        uri = store.uri_for(info.key)
        body = decode_marker(store.get(info.key), uri)
        try:
            generation = int(body.get("generation", 0))
            batch_id = int(body["batch_id"])
            files = tuple(str(n) for n in body["files"])
        except (KeyError, TypeError, ValueError) as exc:
            raise CorruptFileError(f"sink commit marker lacks a field: {exc}", uri=uri) from exc
        if not superseded(generation, batch_id, generations):
            out.append(CommittedBatch(generation, batch_id, files))
    return sorted(out, key=lambda b: (b.generation, b.batch_id))


def read_file_sink(path: str, resolver: StoreResolver | None = None) -> pa.Table | None:
    """Every committed row of the file sink at ``path`` with a ``batch_id`` column, in
    the order of :func:`committed_batches` (``None`` when nothing was published yet).
    ``resolver`` defaults to one with S3 settings from the environment."""
    resolver = resolver or StoreResolver()
    tables: list[pa.Table] = []
    for batch in committed_batches(path, resolver):
        for name in batch.files:
            store, key = resolver.resolve(join(path.rstrip("/"), name))
            table = pq.read_table(io.BytesIO(store.get(key)))
            ids = pa.array([batch.batch_id] * table.num_rows, type=pa.int64())
            tables.append(table.append_column("batch_id", ids))
    return pa.concat_tables(tables) if tables else None
