"""The status record as a stored file: ``<root>/jobs/<job_id>/status.json``, its
envelope, its writer and its bounded reader.

Format: the text envelope of :mod:`gic_runtime.control.envelope` (magic ``GICT``,
version 1, CRC32C of the JSON body of :class:`~gic_runtime.status.record.JobStatus`).
The record is overwritten in place with a plain put: readers always see one whole
record, never a torn one, because stores publish objects atomically.

Invariants: a writer never writes, and a reader never reads, more than
:data:`STATUS_MAX_BYTES` (the operator reads the record of every job on every
reconcile, and the driver writing it runs tenant code); a record is written and read
only under the job id it names. :func:`write_status` and :func:`read_status` are
stateless.
"""

from __future__ import annotations

from gic_runtime import codec
from gic_runtime.control.envelope import decode_record, encode_record
from gic_runtime.errors import ConfigurationError, CorruptFileError, ObjectNotFoundError
from gic_runtime.layout import job_dir
from gic_runtime.status.record import JobStatus
from gic_runtime.storage.object_store import read_bounded
from gic_runtime.storage.uri import StoreResolver, join

__all__ = [
    "FORMAT_VERSION",
    "MAGIC",
    "STATUS_MAX_BYTES",
    "STATUS_NAME",
    "SUPPORTED_VERSIONS",
    "decode_status",
    "encode_status",
    "read_status",
    "status_uri",
    "write_status",
]

MAGIC = "GICT"
FORMAT_VERSION = 1
SUPPORTED_VERSIONS = frozenset({1})
STATUS_MAX_BYTES = 1024 * 1024
"""Largest status record a reader accepts and a writer writes (real ones are a few KiB:
the driver cuts the error text to 500 characters and a failure's message to
:data:`~gic_runtime.status.failures.FAILURE_MESSAGE_MAX`)."""
STATUS_NAME = "status.json"


def status_uri(root: str, job_id: str) -> str:
    return join(job_dir(root, job_id), STATUS_NAME)


def encode_status(status: JobStatus) -> bytes:
    return encode_record(
        MAGIC, FORMAT_VERSION, status.to_json(), what=f"status of job {status.job_id}"
    )


def decode_status(data: bytes, uri: str) -> JobStatus:
    """Parse a stored status record; errors name ``uri``."""
    _, body = decode_record(data, MAGIC, SUPPORTED_VERSIONS, what="GIC job status", uri=uri)
    return codec.from_stored_json(JobStatus, body, uri=uri)


def write_status(resolver: StoreResolver, root: str, job_id: str, status: JobStatus) -> None:
    """Publish ``status`` as the job's status record (replacing the previous one).

    Refuses (:class:`ConfigurationError`) a record over :data:`STATUS_MAX_BYTES`, which
    no reader would accept.
    """
    if status.job_id != job_id:
        raise ConfigurationError(
            f"status of job {status.job_id!r} cannot be written as the status of job "
            f"{job_id!r}; pass the job id the status belongs to"
        )
    data = encode_status(status)
    if len(data) > STATUS_MAX_BYTES:
        raise ConfigurationError(
            f"status record of job {job_id!r} would be {len(data)} bytes, more than the "
            f"{STATUS_MAX_BYTES} readers accept; keep error texts and extra fields short"
        )
    uri = status_uri(root, job_id)
    store, key = resolver.resolve(uri)
    store.put(key, data)


def read_status(resolver: StoreResolver, root: str, job_id: str) -> JobStatus | None:
    """The job's status record, or ``None`` when no driver has written one yet.

    At most :data:`STATUS_MAX_BYTES` are read: a larger file raises
    :class:`~gic_runtime.errors.ObjectTooLargeError` (a ``CorruptFileError``) before it
    is downloaded, so a reader's memory stays bounded whatever the driver wrote.
    """
    uri = status_uri(root, job_id)
    store, key = resolver.resolve(uri)
    try:
        data = read_bounded(store, key, STATUS_MAX_BYTES, what="job status record")
    except ObjectNotFoundError:
        return None
    status = decode_status(data, uri)
    if status.job_id != job_id:
        raise CorruptFileError(
            f"status record of job {job_id!r} holds the status of job {status.job_id!r}; "
            "a driver wrote to the wrong job directory: check its storage and job id settings",
            uri=uri,
        )
    return status
