"""The executor-local record of a bucket's newest background materialization.

One small file per bucket, ``<job_dir>/materialized/bucket-NNNNN.json``, shared by every
worker process of the executor: process A uploads a snapshot in the background and
writes the record; process B's next task of that bucket reads it and adopts the
snapshot as the bucket's base when its lineage allows (:func:`usable_for`).

Format (text header + JSON body, like a manifest)::

    GICR 1 crc32c=0a1b2c3d\\n
    {"bucket": 3, "epoch": 2, "job_id": "...", "root": "...", "seq": 120,
     "snapshot": {...SnapshotHandle...}, "time": 1700000000.0, "token": "..."}

``crc32c`` covers every byte after the newline. A record says: the snapshot holds the
bucket's state at ``seq`` of the lineage whose newest durable object at ``seq`` was
``token`` (a changelog segment URI), taken by attempt ``epoch`` of ``job_id`` under
``root``; ``time`` (wall clock) is when it was written. A record older than
:data:`ADOPTION_MAX_AGE_S` (by the clock that wrote it) is never adopted; the driver's live
sweep (:mod:`~gic_runtime.checkpoint.live_sweep`) derives its grace period from this
limit, so a snapshot it deletes can no longer be adopted.

Invariants: a record is replaced atomically (temporary file + ``os.replace``), so a
reader sees an old or a new record, never a mix; a damaged file is a
:class:`~gic_runtime.errors.CorruptFileError`, never a wrong record. Records are hints:
correctness never depends on one (a record that does not fit the lineage is ignored).

Thread-safety: the functions are stateless; concurrent writers of one record leave one
of their records in place.
"""

from __future__ import annotations

import json
import os
import re
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from gic_runtime.errors import CorruptFileError, UnsupportedVersionError
from gic_runtime.formats import crc32c, load_json, verify_crc
from gic_runtime.handles import BucketState, SnapshotHandle

ADOPTION_MAX_AGE_S: Final = 600.0
"""A background snapshot older than this (seconds, executor clock) is never adopted."""

MAGIC: Final = "GICR"
VERSION: Final = 1
_HEADER = re.compile(rb"^GICR (\d+) crc32c=([0-9a-f]{8})$")


@dataclass(frozen=True, slots=True)
class MaterializationRecord:
    """A finished background materialization of one bucket (see module docstring)."""

    job_id: str
    root: str
    epoch: int
    bucket: int
    seq: int
    token: str
    snapshot: SnapshotHandle
    time: float

    def body(self) -> dict[str, Any]:
        return {
            "job_id": self.job_id,
            "root": self.root,
            "epoch": self.epoch,
            "bucket": self.bucket,
            "seq": self.seq,
            "token": self.token,
            "snapshot": self.snapshot.to_json(),
            "time": self.time,
        }


def record_path(directory: Path, bucket: int) -> Path:
    """Record file of ``bucket`` in ``directory``."""
    return directory / f"bucket-{bucket:05d}.json"


def encode_record(record: MaterializationRecord) -> bytes:
    payload = json.dumps(record.body(), sort_keys=True, separators=(",", ":")).encode("ascii")
    return f"{MAGIC} {VERSION} crc32c={crc32c(payload):08x}\n".encode("ascii") + payload


def decode_record(data: bytes, *, where: str) -> MaterializationRecord:
    """Parse a stored record; CorruptFileError / UnsupportedVersionError name ``where``."""
    head, sep, payload = data.partition(b"\n")
    match = _HEADER.match(head)
    if not sep or match is None:
        raise CorruptFileError("not a materialization record (bad header line)", uri=where)
    version = int(match.group(1))
    if version != VERSION:
        raise UnsupportedVersionError(
            f"materialization record version {version} is not supported (supported: "
            f"[{VERSION}]); every worker of an executor must run the same gic version",
            uri=where,
        )
    verify_crc(payload, int(match.group(2), 16), what="materialization record", uri=where)
    body = load_json(payload, what="materialization record", uri=where)
    try:
        snapshot = SnapshotHandle.from_json(body["snapshot"])
        record = MaterializationRecord(
            job_id=str(body["job_id"]),
            root=str(body["root"]),
            epoch=int(body["epoch"]),
            bucket=int(body["bucket"]),
            seq=int(body["seq"]),
            token=str(body["token"]),
            snapshot=snapshot,
            time=float(body["time"]),
        )
    except (ValueError, KeyError, TypeError) as exc:
        raise CorruptFileError(f"materialization record is malformed: {exc}", uri=where) from exc
    if (snapshot.bucket, snapshot.seq) != (record.bucket, record.seq):
        raise CorruptFileError(
            f"materialization record of bucket {record.bucket} at seq {record.seq} names a "
            f"snapshot of bucket {snapshot.bucket} at seq {snapshot.seq}",
            uri=where,
        )
    return record


def read_record(directory: Path, bucket: int) -> MaterializationRecord | None:
    """The record of ``bucket``, or ``None`` when there is none."""
    path = record_path(directory, bucket)
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return None
    return decode_record(data, where=str(path))


def write_record(directory: Path, record: MaterializationRecord) -> None:
    """Replace the record of ``record.bucket`` atomically."""
    directory.mkdir(parents=True, exist_ok=True)
    path = record_path(directory, record.bucket)
    tmp = directory / f".tmp-{uuid.uuid4().hex}"
    try:
        tmp.write_bytes(encode_record(record))
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def usable_for(
    record: MaterializationRecord, state: BucketState, *, root: str, job_id: str, epoch: int
) -> bool:
    """Whether ``record``'s snapshot may become the base of a bucket at ``state``.

    Only records of the same attempt (root, job, epoch) count: an older attempt's
    snapshot may be an orphan that recovery swept. Then the snapshot must be newer than
    the state's base and lie on the state's history: either the state itself (same seq
    and token) or a point the state's changelog passes through (a section of segment
    ``token`` ending exactly at the record's seq; segment names are never reused, so the
    history up to there is the one the snapshot was taken from).
    """
    if (record.root, record.job_id, record.epoch, record.bucket) != (
        root,
        job_id,
        epoch,
        state.bucket,
    ):
        return False
    v = record.seq
    if v <= state.base or v > state.seq:
        return False
    if v == state.seq and record.token == state.token:
        return True
    return any(h.uri == record.token and h.to_seq == v for h in state.changelog)
