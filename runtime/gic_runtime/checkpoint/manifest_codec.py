"""Manifest serialization: a text header line, then a JSON body (docs/architecture.md §4.4).

::

    GICM 2 crc32c=0a1b2c3d\\n
    { ...JSON body, compact, sorted keys, ASCII... }

The header names the format (``GICM``), its version and the CRC32C of the body (every
byte after the newline), so ``cat`` shows a manifest and a reader rejects a foreign
file, an unknown version or a damaged body with an error naming the file.

Versions: writers write :data:`~gic_runtime.checkpoint.manifest.FORMAT_VERSION` (2);
readers accept 1 and 2, so a job whose latest checkpoint is v1 resumes and writes its
next manifest as v2 (the decoded :class:`Manifest` records in ``version`` the format of
the file it was read from). Both versions carry the same fields: ``job_id``,
``checkpoint_id``, ``epoch``, ``created_at``, ``num_buckets``, ``kind``, ``savepoint``,
``restored_from``, ``base``, ``engine``, ``sink`` and the buckets, and optionally
``query`` (the fingerprint of the query that wrote the checkpoint, :mod:`gic_runtime.query`;
written only when known, absent from manifests of older runtimes, ignored by readers
that predate it). They differ in how buckets are written:

* v1: ``buckets`` is a list of :meth:`BucketState.to_json` objects, every handle a JSON
  object with its full (or relative) object name -- about 170 bytes per handle;
* v2: ``objects`` names every distinct object once, ``tokens`` every distinct lineage
  token, and each bucket entry holds its handles as integer rows referencing
  ``objects`` (:mod:`gic_runtime.checkpoint.bucket_table`) -- about 20 bytes per handle.

Relative naming: objects under the manifest's *base directory* are written relative to
it and resolved against the manifest's URI when read, so a directory can be moved or
copied as a whole (a savepoint directory is relocatable). The base directory is the
manifest's own directory, except for a checkpoint manifest in a job's ``checkpoints/``
directory, whose base is the job directory (so ``changelog/...`` and ``snapshots/...``
are relative). The body records which (``"base": "."`` or ``".."``). Objects elsewhere
(a claimed restore source) keep their full URI, and so does an object under the base
whose relative name would be empty or contain ``..`` or ``://``. Relative names never
contain ``..``: a reader rejects one that does (or is empty or absolute), so a manifest
can only name objects inside its base directory or by full URI. Tokens are identifiers,
not references, and are written verbatim.

Bounded decoding (:mod:`gic_runtime.checkpoint.manifest_limits`): the reader's limits
are applied before anything is allocated for them -- the body's JSON values are
bounded on its raw bytes before it is parsed, the bucket entries against the limit and
``num_buckets``, the ``objects`` table against the handles and snapshots that can
reference it and ``tokens`` against the buckets (a writer lists only what it
references) -- and an object name is resolved to a full URI only when a handle
references it, once. Every failure (depth, size, count, type) is a
:class:`~gic_runtime.errors.CorruptFileError` naming the file.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any, overload

from gic_runtime.checkpoint.bucket_table import ROW, decode_buckets, encode_buckets
from gic_runtime.checkpoint.manifest import (
    FORMAT_VERSION,
    SUPPORTED_VERSIONS,
    Manifest,
    ManifestKind,
    RestoreLineage,
    SavepointInfo,
    map_uris,
)
from gic_runtime.checkpoint.manifest_limits import (
    DRIVER_LIMITS,
    ManifestLimits,
    check_value_bound,
)
from gic_runtime.errors import (
    ConfigurationError,
    CorruptFileError,
    FormatError,
)
from gic_runtime.event_time import NO_PROGRESS, EventTimeProgress
from gic_runtime.formats import decode_text_record, encode_text_record, load_json
from gic_runtime.handles import BucketState
from gic_runtime.layout import parse_checkpoint_id
from gic_runtime.storage.uri import join

MAGIC = "GICM"


def _parent(uri: str) -> str:
    return uri.rstrip("/").rsplit("/", 1)[0]


def _base_rel(manifest_uri: str) -> str:
    parent = _parent(manifest_uri)
    if parse_checkpoint_id(manifest_uri) is not None and parent.endswith("/checkpoints"):
        return ".."
    return "."


def _base_from_rel(manifest_uri: str, rel: str) -> str:
    parent = _parent(manifest_uri)
    return _parent(parent) if rel == ".." else parent


def manifest_base_dir(manifest_uri: str) -> str:
    """The directory that objects named relatively in the manifest at ``manifest_uri``
    are relative to: the job directory for ``jobs/<id>/checkpoints/chk-N.manifest``,
    else the manifest's own directory (a savepoint directory)."""
    return _base_from_rel(manifest_uri, _base_rel(manifest_uri))


def _is_valid_relative(name: str) -> bool:
    return (
        bool(name) and not name.startswith("/") and ".." not in name.split("/")
    ) and "://" not in name


def _relativizer(prefix: str, checkpoint_id: int) -> Callable[[str], str]:
    def relativize(uri: str) -> str:
        if "://" not in uri:
            raise ConfigurationError(
                f"checkpoint {checkpoint_id} references {uri!r}, which is not a "
                "full URI; handles must name objects as file:///... or s3://..."
            )
        if uri.startswith(prefix) and _is_valid_relative(uri[len(prefix) :]):
            return uri[len(prefix) :]
        return uri

    return relativize


def _resolver(base: str) -> Callable[[str], str]:
    def resolve(name: str) -> str:
        if not isinstance(name, str):
            raise ValueError(f"an object name is a JSON {type(name).__name__}, not a string")
        if "://" in name:
            return name
        if not _is_valid_relative(name):
            raise ValueError("a relative object name escapes the manifest's directory")
        return join(base, name)

    return resolve


def encode_manifest(manifest: Manifest, manifest_uri: str) -> bytes:
    """Serialize ``manifest`` for storage at ``manifest_uri`` in format v2 (header line +
    JSON body), whatever ``manifest.version`` says (that is the format it was read from).

    Raises :class:`ConfigurationError` if an object is not named by a full URI, a bucket
    holds a handle of another bucket, or ``engine``/``sink`` are not plain JSON.
    """
    rel = _base_rel(manifest_uri)
    prefix = _base_from_rel(manifest_uri, rel) + "/"
    objects, tokens, entries = encode_buckets(
        manifest.buckets.values(), _relativizer(prefix, manifest.checkpoint_id)
    )
    m = manifest
    body: dict[str, Any] = {
        "job_id": m.job_id,
        "checkpoint_id": m.checkpoint_id,
        "epoch": m.epoch,
        "created_at": m.created_at,
        "num_buckets": m.num_buckets,
        "kind": m.kind.value,
        "savepoint": m.savepoint.to_json() if m.savepoint else None,
        "restored_from": m.restored_from.to_json() if m.restored_from else None,
        "base": rel,
        "engine": dict(m.engine),
        "sink": dict(m.sink),
        "objects": objects,
        "tokens": tokens,
        "buckets": entries,
    }
    if m.query is not None:
        body["query"] = dict(m.query)
    if not m.event_time.empty:
        body["event_time"] = m.event_time.to_json()
    try:
        text = json.dumps(body, separators=(",", ":"), sort_keys=True, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise ConfigurationError(
            f"manifest of checkpoint {m.checkpoint_id} is not serializable as JSON: {exc}; "
            "engine, sink and query entries must be plain JSON values (no NaN, no objects)"
        ) from exc
    return encode_text_record(MAGIC, FORMAT_VERSION, text.encode("ascii"))


def decode_manifest(
    data: bytes, manifest_uri: str, *, limits: ManifestLimits = DRIVER_LIMITS
) -> Manifest:
    """Parse a stored manifest of version 1 or 2 within ``limits``; handles come back as
    full URIs resolved against ``manifest_uri``.

    Raises :class:`CorruptFileError` (foreign file, damaged header, checksum mismatch,
    invalid or missing fields, a malformed bucket table, a relative name with ``..``, a
    bound of ``limits`` exceeded: see the module docstring) or
    :class:`UnsupportedVersionError`, naming the file.
    """
    if len(data) > limits.max_bytes:
        raise CorruptFileError(
            f"manifest is {len(data)} bytes, more than the {limits.max_bytes} this reader decodes",
            uri=manifest_uri,
        )
    version, body = decode_text_record(
        data, MAGIC, SUPPORTED_VERSIONS, what="GIC manifest", uri=manifest_uri
    )
    check_value_bound(body, limits, what="manifest", uri=manifest_uri)
    obj = load_json(body, what="manifest", uri=manifest_uri)
    if not isinstance(obj, dict):
        raise CorruptFileError("manifest body is not a JSON object", uri=manifest_uri)
    try:
        _check_counts(obj, version, limits)
        return _from_body(obj, version, manifest_uri)
    except KeyError as exc:
        raise CorruptFileError(
            f"manifest body is missing field {str(exc.args[0])[:40]!r}", uri=manifest_uri
        ) from exc
    except (TypeError, ValueError, AttributeError, ConfigurationError, RecursionError) as exc:
        raise CorruptFileError(
            f"manifest body has an invalid field: {str(exc)[:300]}", uri=manifest_uri
        ) from exc


def _check_counts(obj: Mapping[str, Any], version: int, limits: ManifestLimits) -> None:
    """Raise ``ValueError`` when the body holds more bucket entries than ``limits``
    admit, or (v2) more objects or tokens than its buckets can reference; checked
    before any of them is decoded or resolved."""
    entries = obj["buckets"]
    if not isinstance(entries, list):
        raise ValueError("buckets must be a JSON list")
    if len(entries) > limits.max_buckets:
        raise ValueError(
            f"{len(entries)} bucket entries, more than the {limits.max_buckets} allowed"
        )
    if version == 1:
        return
    names, tokens = obj["objects"], obj["tokens"]
    if not isinstance(names, list):
        raise ValueError("objects must be a JSON list")
    if isinstance(tokens, list) and len(tokens) > len(entries):
        raise ValueError(f"{len(tokens)} tokens for {len(entries)} bucket entries")
    rows = [e.get("changelog") if isinstance(e, dict) else None for e in entries]
    if not all(isinstance(r, list) for r in rows):
        return  # a malformed entry: the bucket table names it
    handles = sum(len(r) // ROW + 1 for r in rows if isinstance(r, list))
    if len(names) > handles:
        raise ValueError(
            f"the objects table has {len(names)} entries, more than the {handles} handles "
            "and snapshots of its buckets can reference"
        )


class _Resolved(Sequence[str]):
    """The ``objects`` table as full URIs, each name resolved when first looked up."""

    def __init__(self, names: list[Any], resolve: Callable[[str], str]) -> None:
        self._names = names
        self._resolve = resolve
        self._uris: dict[int, str] = {}

    def __len__(self) -> int:
        return len(self._names)

    @overload
    def __getitem__(self, index: int) -> str: ...
    @overload
    def __getitem__(self, index: slice) -> Sequence[str]: ...
    def __getitem__(self, index: int | slice) -> str | Sequence[str]:
        if isinstance(index, slice):
            raise TypeError("the objects table is looked up by index only")
        uri = self._uris.get(index)
        if uri is None:
            uri = self._uris[index] = self._resolve(self._names[index])
        return uri


def _json_object(value: Any, name: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise ValueError(f"{name} must be a JSON object, got {type(value).__name__}")
    return value


def _from_body(obj: Mapping[str, Any], version: int, manifest_uri: str) -> Manifest:
    rel = obj["base"]
    if rel not in (".", ".."):
        raise ValueError("base must be '.' or '..'")
    resolve = _resolver(_base_from_rel(manifest_uri, rel))
    if version == 1:
        buckets = _v1_buckets(obj["buckets"])
    else:
        names = obj["objects"]
        if not isinstance(names, list):
            raise ValueError("objects must be a JSON list")
        buckets = decode_buckets(obj["buckets"], _Resolved(names, resolve), obj["tokens"])
    savepoint = obj["savepoint"]
    restored = obj["restored_from"]
    query = obj.get("query")
    manifest = Manifest(
        job_id=str(obj["job_id"]),
        checkpoint_id=_int(obj["checkpoint_id"], "checkpoint_id"),
        epoch=_int(obj["epoch"], "epoch"),
        created_at=float(obj["created_at"]),
        num_buckets=_int(obj["num_buckets"], "num_buckets"),
        buckets=buckets,
        kind=ManifestKind(obj["kind"]),
        savepoint=SavepointInfo.from_json(_json_object(savepoint, "savepoint"))
        if savepoint is not None
        else None,
        engine=_json_object(obj["engine"], "engine"),
        sink=_json_object(obj["sink"], "sink"),
        restored_from=RestoreLineage.from_json(_json_object(restored, "restored_from"))
        if restored is not None
        else None,
        version=version,
        query=_json_object(query, "query") if query is not None else None,
        event_time=_event_time(obj.get("event_time")),
    )
    return map_uris(manifest, resolve) if version == 1 else manifest


def _event_time(section: Any) -> EventTimeProgress:
    if section is None:
        return NO_PROGRESS
    try:
        return EventTimeProgress.from_json(_json_object(section, "event_time"))
    except FormatError as exc:
        raise ValueError(str(exc)) from exc


def _v1_buckets(buckets_json: Any) -> dict[int, BucketState]:
    """Bucket states of a v1 body, object names as written (resolved by the caller)."""
    if not isinstance(buckets_json, list):
        raise ValueError("buckets must be a JSON list")
    states = [BucketState.from_json(_json_object(b, "bucket entry")) for b in buckets_json]
    buckets = {state.bucket: state for state in states}
    if len(buckets) != len(states):
        raise ValueError("a bucket appears more than once")
    return buckets


def _int(value: Any, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{name} must be an integer, not a JSON {type(value).__name__}")
    return value
