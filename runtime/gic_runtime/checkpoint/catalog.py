"""Manifests on storage: write once, read, list a job's checkpoints, find the latest.

A checkpoint is complete exactly when its manifest exists; the manifest is written once
with create-if-absent, so two attempts can never both complete checkpoint N.

Choosing a checkpoint to recover from: a corrupt newest manifest is an error, not a
reason to fall back silently. Manifests are published atomically (create-if-absent), so
a damaged one is never a crash artifact: it means storage damage or a foreign writer.
Falling back to an older checkpoint would replay batches whose sink output was already
published and whose offsets Spark already committed, which only an operator should
accept. :func:`find_latest_checkpoint` therefore raises by default, and with
``skip_corrupt=True`` falls back but returns every skipped manifest in
:attr:`LatestCheckpoint.skipped` so the caller reports it (status, events, logs). A
manifest of an unknown (newer) version is never skipped: it was written by a newer
runtime, and falling back would roll state back behind the newer runtime's commits.

Superseded manifests (:mod:`gic_runtime.checkpoint.claims`: written by a driver after a
newer launch of the job had claimed it and listed the checkpoints) never count:
:func:`load_retained` and :func:`find_latest_checkpoint` leave them out, so restore
never starts from one, the registry never retains one and the sweep deletes what only
they reference. The manifest file itself stays while its id is at or above the
retained ones: a checkpoint id is written again by the newer launch, under the
alternate name ``chk-<id>.e<epoch>.manifest`` when a superseded manifest holds the usual
one, so no manifest name is ever written twice and no deletion by name can remove a
newer manifest. :func:`list_checkpoints` lists names only and shows both.

Manifests are read within a reader's limits
(:class:`~gic_runtime.checkpoint.manifest_limits.ManifestLimits`, by default
:data:`~gic_runtime.checkpoint.manifest_limits.DRIVER_LIMITS`; the operator passes its
own, far smaller): at most ``max_bytes`` bytes
(:func:`~gic_runtime.storage.object_store.read_bounded`: a larger file is refused with
:class:`~gic_runtime.errors.ObjectTooLargeError`, a :class:`CorruptFileError`, before
it is downloaded), decoded within the limits' counts. :func:`iter_retained` yields the
retained manifests one at a time, so a reader that needs only something of each (the
objects they reference, whether one names a source) never holds them all.

The ``checkpoints/`` directory is listed with a bound too
(:func:`~gic_runtime.storage.listing.list_bounded`): more than
:data:`MAX_CHECKPOINT_OBJECTS` objects there raise
:class:`~gic_runtime.errors.TooManyObjectsError` after at most that many were looked
at, so every caller of :func:`list_checkpoints` (recovery, the sweeps, the operator's
reconciles, ``gic gc``) stays bounded whatever a driver wrote there.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import dataclass, replace
from typing import Final

from gic_runtime import crashpoints
from gic_runtime.checkpoint.claims import NO_CHECKPOINT, Claims
from gic_runtime.checkpoint.manifest import FORMAT_VERSION, Manifest, StoredManifest
from gic_runtime.checkpoint.manifest_codec import decode_manifest, encode_manifest
from gic_runtime.checkpoint.manifest_limits import (
    DRIVER_LIMITS,
    ManifestLimits,
    json_value_bound,
)
from gic_runtime.errors import (
    ConfigurationError,
    CorruptFileError,
    FormatError,
    ManifestExistsError,
    ObjectExistsError,
    ObjectNotFoundError,
    RestoreError,
)
from gic_runtime.layout import checkpoints_dir, parse_checkpoint_id, parse_manifest_epoch
from gic_runtime.storage.listing import list_bounded
from gic_runtime.storage.object_store import ObjectStore, read_bounded
from gic_runtime.storage.uri import StoreResolver
from gic_runtime.storage.writes import create_once

_log = logging.getLogger(__name__)

MANIFEST_MAX_BYTES: Final = DRIVER_LIMITS.max_bytes
"""Largest manifest the runtime accepts. Real ones are far smaller: 44 KiB in the 400-batch
soak benchmark, 638 KB for 128 buckets x 200 handles in format v2 (3.9 MB in v1)."""

MAX_CHECKPOINT_OBJECTS: Final = 100_000
"""Most objects :func:`list_checkpoints` accepts in a job's ``checkpoints/`` directory.
A job keeps its retained checkpoints' manifests there (2 by default) plus the few a
crash left for the next sweep; 100,000 is a day of one-second batches whose manifests
were never deleted, and listing them costs 100 LIST requests and about 25 MB."""

_CHECKPOINTS_HINT: Final = (
    "a job keeps only a handful of manifests there, so files another process put there "
    "or manifests that were never deleted fill it: inspect it and move out what does "
    "not belong there (the newest manifests are the job's retained checkpoints)"
)


@dataclass(frozen=True, slots=True)
class CheckpointRef:
    """A checkpoint manifest found by listing, not yet read."""

    checkpoint_id: int
    uri: str


@dataclass(frozen=True, slots=True)
class SkippedManifest:
    """A manifest :func:`find_latest_checkpoint` could not use, and why."""

    checkpoint_id: int
    uri: str
    reason: str


@dataclass(frozen=True, slots=True)
class LatestCheckpoint:
    """The newest readable checkpoint, and any newer manifests skipped to reach it
    (empty unless ``skip_corrupt`` was requested)."""

    stored: StoredManifest
    skipped: tuple[SkippedManifest, ...] = ()


def write_manifest(resolver: StoreResolver, uri: str, manifest: Manifest) -> StoredManifest:
    """Write ``manifest`` at ``uri`` exactly once (create-if-absent).

    Raises :class:`ManifestExistsError` when a different manifest is already there:
    that checkpoint was completed by another attempt (or this one is fenced). Finding
    exactly these bytes there is success: a retried request whose first attempt landed.
    Raises :class:`ConfigurationError` before writing a manifest that the runtime's own
    readers would refuse (beyond :data:`DRIVER_LIMITS`), so no job writes a checkpoint
    it cannot restore.
    """
    data = encode_manifest(manifest, uri)
    values = json_value_bound(data)
    if len(data) > DRIVER_LIMITS.max_bytes or values > DRIVER_LIMITS.max_values:
        raise ConfigurationError(
            f"manifest of checkpoint {manifest.checkpoint_id} of job {manifest.job_id!r} "
            f"would be {len(data)} bytes with up to {values} JSON values, more than the "
            f"{DRIVER_LIMITS.max_bytes} bytes and {DRIVER_LIMITS.max_values} values a "
            "reader accepts; use fewer buckets or materialize snapshots more often (fewer "
            "changelog sections per bucket)"
        )
    store, key = resolver.resolve(uri)
    crashpoints.hit("manifest_put", manifest.checkpoint_id)
    try:
        create_once(store, key, data)
    except ObjectExistsError as exc:
        raise ManifestExistsError(
            f"checkpoint {manifest.checkpoint_id} of job {manifest.job_id!r} already has a "
            f"manifest at {uri}; a checkpoint completes exactly once (another attempt "
            "completed it, or this attempt is fenced and must stop)"
        ) from exc
    if manifest.version != FORMAT_VERSION:  # read from an older format, written as today's
        manifest = replace(manifest, version=FORMAT_VERSION)
    return StoredManifest(uri, manifest, size=len(data))


def read_manifest(
    resolver: StoreResolver, uri: str, *, limits: ManifestLimits = DRIVER_LIMITS
) -> Manifest:
    """Read and verify the manifest at ``uri`` within ``limits``.

    Raises :class:`~gic_runtime.errors.ObjectNotFoundError` if absent, and
    :class:`CorruptFileError` / :class:`~gic_runtime.errors.UnsupportedVersionError`
    naming ``uri`` if it cannot be trusted (including a checkpoint id that disagrees
    with the file name, and :class:`~gic_runtime.errors.ObjectTooLargeError` for a file
    over ``limits.max_bytes``, which is not downloaded).
    """
    store, key = resolver.resolve(uri)
    data = read_bounded(store, key, limits.max_bytes, what="manifest")
    manifest = decode_manifest(data, uri, limits=limits)
    named = parse_checkpoint_id(uri)
    if named is not None and named != manifest.checkpoint_id:
        raise CorruptFileError(
            f"manifest file is named for checkpoint {named} but holds checkpoint "
            f"{manifest.checkpoint_id}",
            uri=uri,
        )
    named_epoch = parse_manifest_epoch(uri)
    if named_epoch is not None and named_epoch != manifest.epoch:
        raise CorruptFileError(
            f"manifest file is named for epoch {named_epoch} but was written by epoch "
            f"{manifest.epoch}",
            uri=uri,
        )
    return manifest


def read_checkpoint(
    resolver: StoreResolver, uri: str, *, limits: ManifestLimits = DRIVER_LIMITS
) -> StoredManifest:
    """Read a manifest from a job's ``checkpoints/`` directory; it must be a checkpoint
    (savepoints never join the timeline, docs/architecture.md I5)."""
    manifest = read_manifest(resolver, uri, limits=limits)
    if manifest.is_savepoint:
        raise CorruptFileError(
            "a savepoint manifest sits among the job's checkpoints; savepoints live under "
            "savepoints/<id>/ and are never used for recovery: move it away",
            uri=uri,
        )
    return StoredManifest(uri, manifest)


def resolve_prefix(resolver: StoreResolver, directory: str) -> tuple[ObjectStore, str]:
    """The store holding ``directory`` and its key prefix, ending in ``/`` (so listing
    ``jobs/a/`` never lists ``jobs/ab/``)."""
    store, key = resolver.resolve(directory.rstrip("/"))
    return store, key.rstrip("/") + "/"


def list_checkpoints(resolver: StoreResolver, root: str, job_id: str) -> tuple[CheckpointRef, ...]:
    """Every checkpoint manifest of ``job_id`` under ``root``, oldest first (unread;
    superseded ones included, an id may appear under both of its names).

    Raises :class:`~gic_runtime.errors.TooManyObjectsError` when the directory holds
    more than :data:`MAX_CHECKPOINT_OBJECTS` objects (no more are listed)."""
    store, prefix = resolve_prefix(resolver, checkpoints_dir(root, job_id))
    refs = []
    listing = list_bounded(store, prefix, MAX_CHECKPOINT_OBJECTS, hint=_CHECKPOINTS_HINT)
    for info in listing:
        checkpoint_id = parse_checkpoint_id(info.key)
        if checkpoint_id is not None and "/" not in info.key[len(prefix) :]:
            refs.append(CheckpointRef(checkpoint_id, store.uri_for(info.key)))
    refs.sort(key=lambda ref: (ref.checkpoint_id, ref.uri))
    return tuple(refs)


def load_retained(
    resolver: StoreResolver, root: str, job_id: str, *, limits: ManifestLimits = DRIVER_LIMITS
) -> tuple[StoredManifest, ...]:
    """Read every checkpoint manifest of the job and return those that count, oldest
    first: superseded manifests (see the module docstring) are left out.

    Any unreadable manifest raises: callers (registry rebuild, orphan sweep) must know
    everything retained checkpoints reference before deleting anything. A manifest
    deleted between the listing and its read (subsumed, or swept as superseded) is
    passed over: it is retained no more. Holds every retained manifest at once: a
    reader that needs less uses :func:`iter_retained`.
    """
    return tuple(iter_retained(resolver, root, job_id, limits=limits))


def iter_retained(
    resolver: StoreResolver,
    root: str,
    job_id: str,
    *,
    newest_first: bool = False,
    limits: ManifestLimits = DRIVER_LIMITS,
) -> Iterator[StoredManifest]:
    """The job's checkpoint manifests that count (as :func:`load_retained`), read one
    at a time within ``limits`` and yielded oldest first (``newest_first``: newest
    first): a consumer that keeps only what it needs of each holds one manifest at a
    time. Any unreadable manifest raises when it is reached; the job's claims are
    listed once, when the first manifest is read."""
    refs = list_checkpoints(resolver, root, job_id)
    claims: Claims | None = None
    for ref in reversed(refs) if newest_first else refs:
        try:
            stored = read_checkpoint(resolver, ref.uri, limits=limits)
        except ObjectNotFoundError:
            continue
        if claims is None:
            claims = Claims(resolver, root, job_id)
        by = claims.superseded_by(stored.manifest.epoch, stored.checkpoint_id)
        if by is None:
            yield stored
        else:
            _log_superseded(job_id, stored, by)


def _log_superseded(job_id: str, stored: StoredManifest, by: int) -> None:
    _log.info(
        "checkpoint %d of job %s (epoch %d) does not count: it was written after "
        "epoch %d claimed the job (%s)",
        stored.checkpoint_id,
        job_id,
        stored.manifest.epoch,
        by,
        stored.uri,
    )


def newest_counting_checkpoint(
    resolver: StoreResolver,
    root: str,
    job_id: str,
    claims: Claims,
    *,
    limits: ManifestLimits = DRIVER_LIMITS,
) -> int:
    """Id of the newest checkpoint manifest that counts under ``claims``, or
    :data:`~gic_runtime.checkpoint.claims.NO_CHECKPOINT` (what a claim records as its
    start). Reads manifests newest first until one counts. An unreadable manifest
    counts (its epoch is unknown; counting it never makes a manifest that was present
    superseded), and one that vanished while being read is passed over. Manifests are
    read within ``limits``."""
    for ref in reversed(list_checkpoints(resolver, root, job_id)):
        try:
            stored = read_checkpoint(resolver, ref.uri, limits=limits)
        except ObjectNotFoundError:
            continue
        except FormatError:
            return ref.checkpoint_id
        if claims.superseded_by(stored.manifest.epoch, stored.checkpoint_id) is None:
            return stored.checkpoint_id
    return NO_CHECKPOINT


def find_latest_checkpoint(
    resolver: StoreResolver, root: str, job_id: str, *, skip_corrupt: bool = False
) -> LatestCheckpoint | None:
    """The newest checkpoint of the job that counts (superseded manifests are passed
    over), or ``None`` if it has none.

    A corrupt newest manifest raises :class:`CorruptFileError` naming it, unless
    ``skip_corrupt`` (then older ones are tried and the skipped ones are returned; if
    none is readable, :class:`RestoreError` lists them). See the module docstring.
    """
    skipped: list[SkippedManifest] = []
    claims: Claims | None = None
    for ref in reversed(list_checkpoints(resolver, root, job_id)):
        try:
            stored = read_checkpoint(resolver, ref.uri)
        except CorruptFileError as exc:
            if not skip_corrupt:
                raise CorruptFileError(
                    f"the newest checkpoint manifest (checkpoint {ref.checkpoint_id}) cannot "
                    f"be read: {exc}. Inspect it (it is text: cat it), restore it from a "
                    "backup, or recover with skip_corrupt to fall back to an older "
                    "checkpoint (batches after it are replayed and their output published "
                    "again)",
                    uri=ref.uri,
                ) from exc
            skipped.append(SkippedManifest(ref.checkpoint_id, ref.uri, str(exc)))
            continue
        if claims is None:
            claims = Claims(resolver, root, job_id)
        if claims.superseded_by(stored.manifest.epoch, stored.checkpoint_id) is not None:
            continue
        return LatestCheckpoint(stored, tuple(skipped))
    if skipped:
        listing = "; ".join(f"{s.uri}: {s.reason}" for s in skipped)
        raise RestoreError(f"no readable checkpoint manifest for job {job_id!r}: {listing}")
    return None
