"""Object store on S3 or any S3-compatible server (``s3://bucket/prefix`` URIs), over boto3.

Semantics (the :class:`~gic_runtime.storage.object_store.ObjectStore` contract):

* ``put(if_absent=True)`` is ``PutObject`` with ``If-None-Match: *``: the server creates
  the object only if no object has the key, atomically. Of racing creators exactly one
  wins; the others get :class:`~gic_runtime.errors.ObjectExistsError`.
* ``copy`` is a server-side ``CopyObject`` (no bytes travel through this process; S3
  limits one ``CopyObject`` to sources of at most 5 GiB).
* ``delete_many`` sends ``DeleteObjects`` in batches of at most
  :data:`~gic_runtime.storage.object_store.MAX_DELETE_BATCH` keys.
* ``list`` pages through ``ListObjectsV2`` lazily, 1000 keys per request.

Keys follow the same rules as on the local filesystem (non-empty, no leading ``/``, no
``..`` segment), so a key valid in one store is valid in every store.

Errors are translated here, once, into :mod:`gic_runtime.errors` classes (always
``raise ... from exc``); messages name the object URI and what to do, and never contain
credential values. Retries of individual requests are botocore's ``standard`` mode with
``S3Settings.max_attempts`` attempts; what reaches the caller has exhausted them.

Thread-safety: a store holds one boto3 client, which is safe to share between threads;
the store itself has no mutable state.
"""

from __future__ import annotations

import builtins
import functools
import threading
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any, BinaryIO, cast

import boto3
import botocore.exceptions as bce
from botocore.config import Config

from gic_runtime.errors import (
    ConfigurationError,
    ObjectExistsError,
    ObjectNotFoundError,
    StorageError,
    StoragePermissionError,
    StorageTimeoutError,
    TransientStorageError,
)
from gic_runtime.storage.object_store import MAX_DELETE_BATCH, ObjectInfo
from gic_runtime.storage.s3_settings import CREDENTIAL_SOURCES, S3Settings

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client

_ADDRESSING_STYLES = ("path", "virtual", "auto")

_NOT_FOUND_CODES = frozenset({"NoSuchKey", "NotFound", "404"})
_EXISTS_CODES = frozenset({"PreconditionFailed", "412", "ConditionalRequestConflict", "409"})
_PERMISSION_CODES = frozenset(
    {
        "AccessDenied",
        "403",
        "Forbidden",
        "InvalidAccessKeyId",
        "SignatureDoesNotMatch",
        "ExpiredToken",
        "InvalidToken",
        "TokenRefreshRequired",
        "AllAccessDisabled",
    }
)
_TRANSIENT_CODES = frozenset(
    {
        "SlowDown",
        "503",
        "ServiceUnavailable",
        "500",
        "InternalError",
        "502",
        "BadGateway",
        "504",
        "GatewayTimeout",
        "RequestTimeout",
        "RequestTimeoutException",
        "Throttling",
        "ThrottlingException",
        "ThrottledException",
        "RequestThrottled",
        "RequestLimitExceeded",
        "TooManyRequests",
        "429",
        "OperationAborted",
    }
)

_session_lock = threading.Lock()


@functools.lru_cache(maxsize=1)
def _shared_session() -> boto3.session.Session:
    """One boto3 session for every client; call only while holding ``_session_lock``."""
    return boto3.session.Session()


def create_s3_client(settings: S3Settings) -> S3Client:
    """A boto3 S3 client configured from ``settings`` (timeouts, pool, retries, addressing).

    Credentials: the access key id, secret and session token of ``settings``, passed
    together (temporary credentials need all three); unset ones leave the choice to
    boto3's default chain.

    Thread-safe: boto3 sessions are not, so clients are created from one shared session
    under a lock; the returned client may be shared between threads.
    """
    if settings.addressing_style not in _ADDRESSING_STYLES:
        raise ConfigurationError(
            f"S3 addressing_style {settings.addressing_style!r} is not one of "
            f"{', '.join(_ADDRESSING_STYLES)}; use 'path' for S3-compatible servers"
        )
    if settings.max_attempts < 1:
        raise ConfigurationError(
            f"S3 max_attempts must be at least 1 (the first attempt), got {settings.max_attempts}"
        )
    config = Config(
        connect_timeout=settings.connect_timeout_s,
        read_timeout=settings.read_timeout_s,
        max_pool_connections=settings.max_pool_connections,
        retries={"mode": "standard", "total_max_attempts": settings.max_attempts},
        s3={"addressing_style": cast(Any, settings.addressing_style)},
    )
    with _session_lock:
        return _shared_session().client(
            "s3",
            endpoint_url=settings.endpoint_url,
            region_name=settings.region,
            aws_access_key_id=settings.access_key_id,
            aws_secret_access_key=settings.secret_access_key,
            aws_session_token=settings.session_token,
            config=config,
        )


class S3ObjectStore:
    """:class:`~gic_runtime.storage.object_store.ObjectStore` over one bucket and key prefix.

    ``client`` replaces the client built from ``settings`` (tests pass a stubbed or
    instrumented one). Thread-safe.
    """

    def __init__(
        self,
        bucket: str,
        prefix: str,
        *,
        settings: S3Settings,
        client: Any | None = None,
    ) -> None:
        if not bucket:
            raise ConfigurationError("S3 bucket name is empty; use s3://BUCKET/optional/prefix")
        self._bucket = bucket
        self._prefix = prefix.strip("/")
        self._client: S3Client = client if client is not None else create_s3_client(settings)
        base = f"s3://{bucket}"
        self._root_uri = f"{base}/{self._prefix}" if self._prefix else base

    # --- naming ------------------------------------------------------------------------

    @property
    def root_uri(self) -> str:
        return self._root_uri

    @property
    def bucket(self) -> str:
        """The bucket this store lives in."""
        return self._bucket

    @property
    def prefix(self) -> str:
        """The key prefix of the store root inside the bucket (no leading/trailing ``/``)."""
        return self._prefix

    def uri_for(self, key: str) -> str:
        return f"{self._root_uri}/{key}"

    def _full_key(self, key: str) -> str:
        if not key or key.startswith("/") or ".." in key.split("/"):
            raise StorageError(
                f"invalid object key {key!r}: keys are non-empty relative paths without "
                "'..' segments",
                uri=self.uri_for(key),
            )
        return f"{self._prefix}/{key}" if self._prefix else key

    # --- operations --------------------------------------------------------------------

    def put(self, key: str, data: bytes, *, if_absent: bool = False) -> None:
        """Write ``data`` to ``key`` (see the protocol).

        With ``if_absent``, a request retried by botocore after its first attempt did
        land (response lost on the way back) reports :class:`ObjectExistsError` although
        this call created the object; callers that must tell these apart compare the
        stored bytes with their own.
        """
        self._put(key, data, None, if_absent=if_absent)

    def put_file(self, key: str, file: BinaryIO, size: int, *, if_absent: bool = False) -> None:
        """:meth:`put` of the seekable ``file``'s ``size`` bytes: botocore streams the
        body from the file (and rewinds it to retry a request)."""
        file.seek(0)
        self._put(key, file, size, if_absent=if_absent)

    def _put(self, key: str, body: bytes | BinaryIO, size: int | None, *, if_absent: bool) -> None:
        full = self._full_key(key)
        uri = self.uri_for(key)
        extra: dict[str, Any] = {} if size is None else {"ContentLength": size}
        if if_absent:
            extra["IfNoneMatch"] = "*"
        try:
            self._client.put_object(Bucket=self._bucket, Key=full, Body=body, **extra)
        except bce.ClientError as exc:
            if if_absent and _code(exc) in _EXISTS_CODES:
                raise ObjectExistsError(f"object already exists: {uri}", uri=uri) from exc
            raise _translate(exc, "put", uri, self._bucket) from exc
        except bce.BotoCoreError as exc:
            raise _translate(exc, "put", uri, self._bucket) from exc

    def get(self, key: str, *, start: int = 0, length: int | None = None) -> bytes:
        """Read a byte range with one ``GetObject`` (``Range`` header when not the whole
        object). A range starting at or past the end reads ``b""``, as on a filesystem."""
        full = self._full_key(key)
        uri = self.uri_for(key)
        if start < 0 or (length is not None and length < 0):
            raise StorageError(
                f"invalid byte range start={start} length={length} for {uri}", uri=uri
            )
        if length == 0:
            # An empty range cannot be expressed as an HTTP Range; still check existence.
            self.size(key)
            return b""
        try:
            if start == 0 and length is None:
                resp = self._client.get_object(Bucket=self._bucket, Key=full)
            else:
                end = "" if length is None else str(start + length - 1)
                resp = self._client.get_object(
                    Bucket=self._bucket, Key=full, Range=f"bytes={start}-{end}"
                )
            return resp["Body"].read()
        except bce.ClientError as exc:
            if _code(exc) in ("InvalidRange", "416"):
                return b""
            raise _translate(exc, "get", uri, self._bucket) from exc
        except bce.BotoCoreError as exc:
            raise _translate(exc, "get", uri, self._bucket) from exc

    def size(self, key: str) -> int:
        full = self._full_key(key)
        uri = self.uri_for(key)
        try:
            return self._client.head_object(Bucket=self._bucket, Key=full)["ContentLength"]
        except (bce.ClientError, bce.BotoCoreError) as exc:
            raise _translate(exc, "head", uri, self._bucket) from exc

    def exists(self, key: str) -> bool:
        """Whether the object exists. ``HeadObject`` responses have no body, so a missing
        bucket also reads as ``False`` here; every other operation names it."""
        try:
            self.size(key)
        except ObjectNotFoundError:
            return False
        return True

    def list(self, prefix: str = "") -> Iterator[ObjectInfo]:
        """Objects under ``prefix`` in key order; each page is fetched when the previous
        one has been consumed."""
        full_prefix = f"{self._prefix}/{prefix}" if self._prefix else prefix
        strip = len(self._prefix) + 1 if self._prefix else 0
        uri = self.uri_for(prefix)
        paginator = self._client.get_paginator("list_objects_v2")
        try:
            for page in paginator.paginate(Bucket=self._bucket, Prefix=full_prefix):
                for obj in page.get("Contents", []):
                    yield ObjectInfo(
                        obj["Key"][strip:], obj["Size"], obj["LastModified"].timestamp()
                    )
        except (bce.ClientError, bce.BotoCoreError) as exc:
            raise _translate(exc, "list", uri, self._bucket) from exc

    def delete_many(self, keys: Iterable[str]) -> int:
        """Delete in ``DeleteObjects`` batches of at most ``MAX_DELETE_BATCH`` keys.

        Batches already sent stay deleted when a later one fails. A response listing
        per-key errors raises :class:`StorageError` naming (up to ten of) the keys.
        """
        count = 0
        batch: builtins.list[str] = []
        for key in keys:
            batch.append(self._full_key(key))
            count += 1
            if len(batch) == MAX_DELETE_BATCH:
                self._delete_batch(batch)
                batch = []
        if batch:
            self._delete_batch(batch)
        return count

    def _delete_batch(self, full_keys: builtins.list[str]) -> None:
        uri = self.root_uri
        try:
            resp = self._client.delete_objects(
                Bucket=self._bucket,
                Delete={"Objects": [{"Key": k} for k in full_keys], "Quiet": True},
            )
        except (bce.ClientError, bce.BotoCoreError) as exc:
            raise _translate(exc, "delete", uri, self._bucket) from exc
        errors = [e for e in resp.get("Errors", []) if e.get("Code") != "NoSuchKey"]
        if errors:
            shown = ", ".join(
                f"s3://{self._bucket}/{e.get('Key', '?')} ({e.get('Code', '?')})"
                for e in errors[:10]
            )
            more = f" and {len(errors) - 10} more" if len(errors) > 10 else ""
            raise StorageError(
                f"DeleteObjects failed for {len(errors)} of {len(full_keys)} keys: "
                f"{shown}{more}; the other keys were deleted, retry the failed ones",
                uri=uri,
            )

    def copy(self, src_key: str, dst_key: str) -> None:
        """Server-side copy of ``src_key`` to a new ``dst_key``.

        S3 has no create-if-absent ``CopyObject``, so the destination is checked with
        ``HeadObject`` first. A writer creating ``dst_key`` between that check and the
        copy is overwritten (with the same immutable bytes in the runtime's own use,
        where copy destinations are unique per writer).
        """
        src_full = self._full_key(src_key)
        dst_full = self._full_key(dst_key)
        dst_uri = self.uri_for(dst_key)
        if self.exists(dst_key):
            raise ObjectExistsError(f"copy destination already exists: {dst_uri}", uri=dst_uri)
        try:
            self._client.copy_object(
                Bucket=self._bucket,
                Key=dst_full,
                CopySource={"Bucket": self._bucket, "Key": src_full},
            )
        except (bce.ClientError, bce.BotoCoreError) as exc:
            raise _translate(exc, "copy", self.uri_for(src_key), self._bucket) from exc


def _code(exc: bce.ClientError) -> str:
    code = exc.response.get("Error", {}).get("Code")
    if code:
        return str(code)
    return str(exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", ""))


def _translate(exc: Exception, op: str, uri: str, bucket: str) -> StorageError:
    """The :mod:`gic_runtime.errors` class for a boto3/botocore failure of ``op`` on ``uri``."""
    if isinstance(exc, bce.ClientError):
        code = _code(exc)
        status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0)
        detail = exc.response.get("Error", {}).get("Message") or code
        if code == "NoSuchBucket":
            return StorageError(
                f"S3 bucket {bucket!r} does not exist ({op} {uri}); create the bucket or "
                "fix the storage URI",
                uri=uri,
            )
        if code in _NOT_FOUND_CODES:
            return ObjectNotFoundError(f"no such object: {uri}", uri=uri)
        if code in _PERMISSION_CODES:
            return StoragePermissionError(
                f"S3 refused {op} {uri} ({code}): check the access key id and secret "
                f"({CREDENTIAL_SOURCES}; with temporary credentials also AWS_SESSION_TOKEN, "
                "which expires) and the bucket policy",
                uri=uri,
            )
        if code in _TRANSIENT_CODES or status >= 500:
            return TransientStorageError(
                f"S3 {op} {uri} failed with {code} ({detail}); retry later", uri=uri
            )
        return StorageError(f"S3 {op} {uri} failed with {code}: {detail}", uri=uri)
    if isinstance(exc, bce.ConnectTimeoutError | bce.ReadTimeoutError):
        return StorageTimeoutError(f"S3 {op} {uri} timed out ({type(exc).__name__})", uri=uri)
    if isinstance(exc, bce.SSLError):
        return StorageError(
            f"TLS error on S3 {op} {uri}: check the endpoint URL and its certificate", uri=uri
        )
    if isinstance(exc, bce.ConnectionError | bce.HTTPClientError | bce.IncompleteReadError):
        return TransientStorageError(
            f"connection to S3 failed during {op} {uri} ({type(exc).__name__}); retry later",
            uri=uri,
        )
    if isinstance(exc, bce.FlexibleChecksumError):
        return TransientStorageError(
            f"S3 {op} {uri}: response checksum mismatch in transit; retry", uri=uri
        )
    if isinstance(exc, bce.NoCredentialsError | bce.PartialCredentialsError):
        return StoragePermissionError(
            f"no usable S3 credentials for {op} {uri}: set AWS_ACCESS_KEY_ID and "
            f"AWS_SECRET_ACCESS_KEY ({CREDENTIAL_SOURCES})",
            uri=uri,
        )
    return StorageError(f"S3 {op} {uri} failed: {type(exc).__name__}: {exc}", uri=uri)
