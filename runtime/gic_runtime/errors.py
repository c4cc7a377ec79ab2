"""The project's one exception tree.

Every error raised by the runtime derives from :class:`GICError`. Errors from boto3,
botocore and the operating system are translated at the storage boundary
(``raise ... from exc``), so callers never need to import a third-party exception.

The retry policy (:mod:`gic_runtime.changelog.retrying`) keys off these classes:

* :class:`StorageTimeoutError` -> start a new attempt at once;
* :class:`TransientStorageError` -> retry after a delay;
* anything else -> fail.
"""

from __future__ import annotations


class GICError(Exception):
    """Base class of every error the runtime raises on purpose."""


class ConfigurationError(GICError):
    """Settings or arguments are invalid; the message says what to change."""


# --- storage -------------------------------------------------------------------------


class StorageError(GICError):
    """An object-store operation failed.

    ``uri`` names the object or prefix involved, when there is one.
    """

    def __init__(self, message: str, *, uri: str | None = None) -> None:
        super().__init__(message)
        self.uri = uri


class ObjectNotFoundError(StorageError):
    """The object does not exist."""


class ObjectExistsError(StorageError):
    """A create-if-absent write found the object already there."""


class TransientStorageError(StorageError):
    """A failure that may succeed when retried after a delay (503 SlowDown, reset...)."""


class StorageTimeoutError(TransientStorageError):
    """An operation took longer than its deadline; a new attempt may start at once."""


class StoragePermissionError(StorageError):
    """Credentials are missing or do not allow the operation."""


class UnsafePathError(StorageError):
    """A local object path crosses a symbolic link (or is not a regular file), which the
    local store refuses to follow: a link planted under the storage root must never make
    a read, write or deletion reach outside it. ``path`` is the offending file system
    path."""

    def __init__(self, message: str, *, uri: str | None = None, path: str) -> None:
        super().__init__(message, uri=uri)
        self.path = path


class TooManyObjectsError(StorageError):
    """A listing of a prefix others can fill found more than ``limit`` objects there, so
    it stopped and nothing was acted on.

    Raised by :func:`gic_runtime.storage.listing.list_bounded` and
    :func:`~gic_runtime.storage.listing.count_bounded` once the ``limit + 1``-th object
    was seen, without fetching further pages, so a reader's memory and time stay bounded
    whatever another party wrote under the prefix. ``uri`` names the prefix, ``limit``
    the most objects accepted there. Not transient: retrying lists the same objects.
    """

    def __init__(self, message: str, *, uri: str, limit: int) -> None:
        super().__init__(message, uri=uri)
        self.limit = limit


# --- file formats --------------------------------------------------------------------


class FormatError(GICError):
    """A stored file cannot be read as what it claims to be.

    Always names the file (``uri``) so an operator can find and inspect it.
    """

    def __init__(self, message: str, *, uri: str | None = None) -> None:
        where = f" ({uri})" if uri else ""
        super().__init__(f"{message}{where}")
        self.uri = uri


class CorruptFileError(FormatError):
    """Bad magic, truncated data or a checksum mismatch."""


class UnsupportedVersionError(FormatError):
    """The file was written by a format version this runtime does not know."""


class ObjectTooLargeError(CorruptFileError):
    """A stored file is larger than the limit for its kind, so it was not read.

    Raised by :func:`gic_runtime.storage.object_store.read_bounded` before more than ``limit + 1``
    bytes were transferred, so a reader's memory stays bounded whatever another party
    wrote there. ``size`` is the object's size in bytes (``None`` when it could not be
    determined), ``limit`` the largest size accepted. A subclass of
    :class:`CorruptFileError` because no file the runtime writes comes near its limit:
    callers that handle an unreadable file handle an oversized one alike.
    """

    def __init__(
        self, message: str, *, uri: str | None = None, size: int | None, limit: int
    ) -> None:
        super().__init__(message, uri=uri)
        self.size = size
        self.limit = limit


# --- state, checkpoints, lifecycle ---------------------------------------------------


class StateError(GICError):
    """Invalid use of keyed state (unknown state name, wrong state kind, bad bucket)."""


class RestoreError(GICError):
    """A checkpoint or savepoint cannot be restored; the message says why."""


class UploadError(GICError):
    """A changelog or snapshot upload failed after its retry policy gave up."""


class MaterializationError(GICError):
    """Materialization failed more often in a row than the configured tolerance."""


class ManifestExistsError(GICError):
    """A manifest for this checkpoint id was already written (create-if-absent lost)."""


class OwnershipError(GICError):
    """A job attempted to delete an object it does not own (a bug; nothing was deleted)."""


class FencedError(GICError):
    """A newer attempt (higher fencing epoch) of this job exists; this one must stop."""


class BucketCountMismatchError(RestoreError, ConfigurationError):
    """The job is configured with another bucket count than the state it restores (the
    count is fixed for a state lineage). A settings error: a relaunch with the same
    settings meets it again, so it is recorded as ``InvalidSettings``."""


class QueryMismatchError(RestoreError):
    """A job's checkpoints were written by a different query (another source,
    processing or output schema); the message names the job, what differs and how to go
    on. Raised before the driver claims the job: nothing but the refusal itself (in the
    job's status record, when the launch was given its fencing epoch) is written."""


class OutputOwnedError(GICError):
    """A transactional output location belongs to another job: it was claimed by a job
    of another state lineage, or taken over from this one. The message names both jobs
    and the ways on (another output path, or an explicit takeover). Raised before the
    job processes anything (at start) or before it publishes a batch (when another job
    took the output over meanwhile); nothing in the output is changed by the refusal."""
