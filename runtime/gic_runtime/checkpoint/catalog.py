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
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from gic_runtime.checkpoint.codec import decode_manifest, encode_manifest
from gic_runtime.checkpoint.manifest import FORMAT_VERSION, Manifest, StoredManifest
from gic_runtime.errors import (
    CorruptFileError,
    ManifestExistsError,
    ObjectExistsError,
    RestoreError,
)
from gic_runtime.layout import checkpoints_dir, parse_checkpoint_id
from gic_runtime.storage.base import ObjectStore
from gic_runtime.storage.uri import StoreResolver
from gic_runtime.storage.writes import create_once


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
    """
    data = encode_manifest(manifest, uri)
    store, key = resolver.resolve(uri)
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
    return StoredManifest(uri, manifest)


def read_manifest(resolver: StoreResolver, uri: str) -> Manifest:
    """Read and verify the manifest at ``uri``.

    Raises :class:`~gic_runtime.errors.ObjectNotFoundError` if absent, and
    :class:`CorruptFileError` / :class:`~gic_runtime.errors.UnsupportedVersionError`
    naming ``uri`` if it cannot be trusted (including a checkpoint id that disagrees
    with the file name).
    """
    store, key = resolver.resolve(uri)
    manifest = decode_manifest(store.get(key), uri)
    named = parse_checkpoint_id(uri)
    if named is not None and named != manifest.checkpoint_id:
        raise CorruptFileError(
            f"manifest file is named for checkpoint {named} but holds checkpoint "
            f"{manifest.checkpoint_id}",
            uri=uri,
        )
    return manifest


def read_checkpoint(resolver: StoreResolver, uri: str) -> StoredManifest:
    """Read a manifest from a job's ``checkpoints/`` directory; it must be a checkpoint
    (savepoints never join the timeline, DESIGN §3.5)."""
    manifest = read_manifest(resolver, uri)
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
    """Every checkpoint manifest of ``job_id`` under ``root``, oldest first (unread)."""
    store, prefix = resolve_prefix(resolver, checkpoints_dir(root, job_id))
    refs = []
    for info in store.list(prefix):
        checkpoint_id = parse_checkpoint_id(info.key)
        if checkpoint_id is not None and "/" not in info.key[len(prefix) :]:
            refs.append(CheckpointRef(checkpoint_id, store.uri_for(info.key)))
    refs.sort(key=lambda ref: ref.checkpoint_id)
    return tuple(refs)


def load_retained(resolver: StoreResolver, root: str, job_id: str) -> tuple[StoredManifest, ...]:
    """Read every checkpoint manifest of the job, oldest first.

    Any unreadable manifest raises: callers (registry rebuild, orphan sweep) must know
    everything retained checkpoints reference before deleting anything.
    """
    return tuple(
        read_checkpoint(resolver, ref.uri) for ref in list_checkpoints(resolver, root, job_id)
    )


def find_latest_checkpoint(
    resolver: StoreResolver, root: str, job_id: str, *, skip_corrupt: bool = False
) -> LatestCheckpoint | None:
    """The newest checkpoint of the job, or ``None`` if it has none.

    A corrupt newest manifest raises :class:`CorruptFileError` naming it, unless
    ``skip_corrupt`` (then older ones are tried and the skipped ones are returned; if
    none is readable, :class:`RestoreError` lists them). See the module docstring.
    """
    skipped: list[SkippedManifest] = []
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
        return LatestCheckpoint(stored, tuple(skipped))
    if skipped:
        listing = "; ".join(f"{s.uri}: {s.reason}" for s in skipped)
        raise RestoreError(f"no readable checkpoint manifest for job {job_id!r}: {listing}")
    return None
