"""Serving control requests on the driver: savepoints and stops, between batches.

A savepoint request is served from the latest completed checkpoint (a batch boundary)
into the request's own target directory, then its outcome is recorded write-once in
the control channel. Native savepoints duplicate the checkpoint's files (server-side
copy where the store has it); canonical ones export every bucket to Parquet, with the
engine's progress (:data:`ENGINE_RECORD`), the output's lineage (:data:`SINK_RECORD`)
and the event-time progress (:data:`EVENT_TIME_RECORD`) stored beside the index, which
a start restored from the savepoint reads back.

Invariants:

* A savepoint is never registered with the job's shared-file registry, never becomes a
  crash-recovery start point and never publishes sink output (docs/architecture.md I5): it is
  written from a manifest that is already complete and published.
* Serving is idempotent: a request whose target already holds a finished savepoint
  (e.g. the driver crashed after writing it, before recording the outcome) is completed
  from what is there; a partly written target is finished (copies already there are
  kept when they match).
* A request arriving before the job's first checkpoint stays pending.

Not thread-safe: the driver calls it while holding its batch lock.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from typing import Any

from gic_runtime import crashpoints
from gic_runtime.checkpoint.catalog import MANIFEST_MAX_BYTES
from gic_runtime.checkpoint.manifest import Manifest, SavepointFormat, SavepointType
from gic_runtime.control import ControlChannel
from gic_runtime.control.envelope import decode_record, encode_record
from gic_runtime.control.model import ControlRequest, Outcome, SavepointRequest
from gic_runtime.driver.timeline import CheckpointTimeline
from gic_runtime.errors import GICError, ObjectNotFoundError
from gic_runtime.event_time import EventTimeProgress
from gic_runtime.layout import SAVEPOINT_MANIFEST
from gic_runtime.savepoint.canonical import INDEX_NAME, write_canonical_from_states
from gic_runtime.savepoint.native import load_savepoint
from gic_runtime.storage.object_store import read_bounded
from gic_runtime.storage.uri import StoreResolver, join
from gic_runtime.storage.writes import create_once

_log = logging.getLogger(__name__)


ENGINE_RECORD = "_engine.json"
"""Beside a canonical savepoint's index: the engine's progress at its checkpoint (a
``GICN`` record), so a job restored from it resumes its sources where the savepoint
was taken. Native savepoints carry it inside their manifest."""
_ENGINE_MAGIC = "GICN"


def _write_beside(
    resolver: StoreResolver, directory: str, name: str, magic: str, body: Mapping[str, Any]
) -> None:
    """Store record ``body`` (``magic`` v1) as ``name`` in ``directory`` (write-once)."""
    store, key = resolver.resolve(join(directory, name))
    create_once(store, key, encode_record(magic, 1, body, what=f"record {name}"))


def _read_beside(
    resolver: StoreResolver, directory: str, name: str, magic: str
) -> dict[str, Any] | None:
    """The ``magic`` v1 record ``name`` in ``directory`` (``None`` if there is none), read
    with the manifests' size limit (it holds parts of a manifest)."""
    uri = join(directory.rstrip("/"), name)
    store, key = resolver.resolve(uri)
    try:
        data = read_bounded(store, key, MANIFEST_MAX_BYTES, what=f"record {name}")
    except ObjectNotFoundError:
        return None
    _, body = decode_record(data, magic, frozenset({1}), what=f"record {name}", uri=uri)
    return body


def write_engine_record(resolver: StoreResolver, directory: str, engine: Mapping[str, Any]) -> None:
    """Store ``engine`` beside the canonical savepoint in ``directory`` (write-once)."""
    _write_beside(resolver, directory, ENGINE_RECORD, _ENGINE_MAGIC, engine)


def read_engine_record(resolver: StoreResolver, directory: str) -> dict[str, Any] | None:
    """The engine record beside a canonical savepoint (``None`` if it has none)."""
    return _read_beside(resolver, directory, ENGINE_RECORD, _ENGINE_MAGIC)


SINK_RECORD = "_sink.json"
"""Beside a canonical savepoint's index: the checkpoint's ``sink`` section without its
staged files (the output, and the state lineage that owns it; a ``GICP`` record), so a
job restored from it keeps writing the output it wrote. Native savepoints carry it
inside their manifest."""
_SINK_MAGIC = "GICP"


EVENT_TIME_RECORD = "_event_time.json"
"""Beside a canonical savepoint's index: the checkpoint's event-time progress (its
watermark; a ``GICV`` record), so a job restored from it continues from that watermark.
Native savepoints carry it inside their manifest."""
_EVENT_TIME_MAGIC = "GICV"


def write_canonical_extras(resolver: StoreResolver, directory: str, manifest: Manifest) -> None:
    """Store what a canonical savepoint of ``manifest`` carries beside its index: the
    engine's progress (:data:`ENGINE_RECORD`), the output's lineage
    (:data:`SINK_RECORD`) and the event-time progress (:data:`EVENT_TIME_RECORD`); each
    write-once, each only when the manifest has one."""
    if manifest.engine:
        write_engine_record(resolver, directory, manifest.engine)
    if manifest.sink:
        body = {k: v for k, v in manifest.sink.items() if k != "staged"}
        body["job_id"] = manifest.job_id
        _write_beside(resolver, directory, SINK_RECORD, _SINK_MAGIC, body)
    if not manifest.event_time.empty:
        _write_beside(
            resolver, directory, EVENT_TIME_RECORD, _EVENT_TIME_MAGIC, manifest.event_time.to_json()
        )


def read_event_time_record(resolver: StoreResolver, directory: str) -> EventTimeProgress:
    """The event-time progress beside a canonical savepoint (none when it has no record,
    as savepoints of jobs without event time). Raises :class:`FormatError` on a record
    that does not hold two integer times."""
    body = _read_beside(resolver, directory, EVENT_TIME_RECORD, _EVENT_TIME_MAGIC)
    return EventTimeProgress.from_json(body)


def read_sink_record(resolver: StoreResolver, directory: str) -> dict[str, Any] | None:
    """The sink record beside a canonical savepoint (``None`` if it has none, as in
    savepoints written before it existed)."""
    return _read_beside(resolver, directory, SINK_RECORD, _SINK_MAGIC)


def stops_job(request: ControlRequest) -> bool:
    """Whether serving ``request`` ends the job (stop, or stop-with-savepoint)."""
    return not isinstance(request, SavepointRequest) or request.kind is SavepointType.TERMINAL


def _exists(resolver: StoreResolver, uri: str) -> bool:
    store, key = resolver.resolve(uri)
    return store.exists(key)


def directory_size(resolver: StoreResolver, directory: str) -> tuple[int, int]:
    """``(files, bytes)`` stored under ``directory`` (what a savepoint holds)."""
    store, prefix = resolver.resolve(directory)
    files = size = 0
    for info in store.list(prefix.rstrip("/") + "/"):
        files += 1
        size += info.size
    return files, size


def serve_request(
    resolver: StoreResolver,
    timeline: CheckpointTimeline,
    control: ControlChannel,
    request: ControlRequest,
) -> Outcome | None:
    """Serve ``request`` from the latest checkpoint and record its outcome; ``None``
    while there is no checkpoint yet (the request stays pending)."""
    latest = timeline.latest()
    if latest is None:
        return None
    started = time.time()
    if not isinstance(request, SavepointRequest):
        outcome = Outcome.completed(
            request.request_id, checkpoint_id=latest.checkpoint_id, started_at=started
        )
        return control.complete(outcome)
    target = request.target.rstrip("/")
    try:
        if request.format is SavepointFormat.NATIVE:
            if not _exists(resolver, join(target, SAVEPOINT_MANIFEST)):

                def progress(done: int, total: int) -> None:
                    if done:
                        crashpoints.hit("savepoint_copy", latest.checkpoint_id)

                timeline.native_savepoint(target, savepoint_type=request.kind, progress=progress)
            checkpoint_id = load_savepoint(resolver, target).manifest.checkpoint_id
        else:
            if not _exists(resolver, join(target, INDEX_NAME)):
                crashpoints.hit("savepoint_copy", latest.checkpoint_id)
                write_canonical_extras(resolver, target, latest.manifest)
                write_canonical_from_states(
                    latest.manifest.buckets, latest.manifest.num_buckets, target, resolver
                )
            checkpoint_id = latest.checkpoint_id
        files, size = directory_size(resolver, target)
        outcome = Outcome.completed(
            request.request_id,
            path=target,
            checkpoint_id=checkpoint_id,
            size_bytes=size,
            files=files,
            started_at=started,
        )
    except GICError as exc:
        _log.error("savepoint %s failed: %s", request.request_id, exc)
        outcome = Outcome.failed(request.request_id, str(exc), started_at=started)
    return control.complete(outcome)
