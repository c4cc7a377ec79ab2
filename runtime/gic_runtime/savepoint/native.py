"""Native savepoints: a completed checkpoint's own files, duplicated into a directory.

::

    <savepoint dir>/
        _savepoint.manifest        the checkpoint's manifest, rewritten (kind savepoint)
        files/changelog/...        copies of every object the checkpoint references
        files/snapshots/...
        files/ext/<hash>/<name>    objects from outside the source's directory

Invariants:

* Self-contained: the rewritten manifest references only objects inside the directory,
  named relatively, so the directory can be moved or copied as a whole and the job's
  directory can be deleted without affecting it.
* Complete or absent: the manifest is written last, with create-if-absent, after every
  copy is durable (docs/architecture.md I2). A directory without ``_savepoint.manifest`` is not a
  savepoint; retrying into it reuses copies already there when their size matches.
* Out of the timeline: writing a savepoint never touches the job's shared-file registry,
  and the source checkpoint's files are only read (docs/architecture.md I5).

Copies use the store's server-side copy when source and destination live in the same
store (S3 CopyObject, a hard link on a filesystem), else a read and a create-if-absent
write; they run in parallel on a thread pool. The progress callback is invoked on the
calling thread.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import FIRST_EXCEPTION, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from enum import StrEnum

from gic_runtime.checkpoint.catalog import read_manifest, write_manifest
from gic_runtime.checkpoint.manifest import (
    Manifest,
    ManifestKind,
    SavepointFormat,
    SavepointInfo,
    SavepointType,
    StoredManifest,
    map_uris,
)
from gic_runtime.checkpoint.manifest_codec import manifest_base_dir
from gic_runtime.clock import Clock, SystemClock
from gic_runtime.errors import (
    ConfigurationError,
    ManifestExistsError,
    ObjectExistsError,
    RestoreError,
)
from gic_runtime.formats import crc32c
from gic_runtime.layout import SAVEPOINT_MANIFEST
from gic_runtime.storage.uri import StorageURI, StoreResolver, join

#: ``progress(files_done, files_total)``, called on the caller's thread.
CopyProgress = Callable[[int, int], None]


class CopyMode(StrEnum):
    SERVER_SIDE = "server-side"
    STREAMED = "streamed"
    REUSED = "reused"


@dataclass(frozen=True, slots=True)
class NativeSavepoint:
    """A written savepoint and what writing it took."""

    stored: StoredManifest
    """The savepoint manifest (handles resolved to full URIs) and its URI."""
    directory: str
    files: int
    bytes: int
    server_side_copies: int
    streamed_copies: int
    reused_copies: int


def savepoint_manifest_uri(directory: str) -> str:
    """URI of the manifest of the savepoint in ``directory``."""
    return join(directory, SAVEPOINT_MANIFEST)


def write_native_savepoint(
    resolver: StoreResolver,
    source: StoredManifest | Manifest,
    directory: str,
    *,
    savepoint_type: SavepointType = SavepointType.INTERMEDIATE,
    parallelism: int = 8,
    progress: CopyProgress | None = None,
    clock: Clock | None = None,
) -> NativeSavepoint:
    """Duplicate every object ``source`` references into ``directory`` (e.g.
    :func:`gic_runtime.layout.savepoint_dir`) and write the rewritten manifest.

    Pass the :class:`StoredManifest` (not the bare manifest) so copies keep their paths
    relative to the source's directory (``files/changelog/...``); objects elsewhere go
    to ``files/ext/``. Raises :class:`ManifestExistsError` if the directory already holds
    a savepoint, and :class:`ObjectExistsError` if a leftover file there differs in size
    from what it should be a copy of.
    """
    if parallelism < 1:
        raise ConfigurationError(f"savepoint copy parallelism must be >= 1, got {parallelism}")
    manifest = source.manifest if isinstance(source, StoredManifest) else source
    source_uri = source.uri if isinstance(source, StoredManifest) else None
    target = savepoint_manifest_uri(directory)
    store, key = resolver.resolve(target)
    if store.exists(key):
        raise ManifestExistsError(
            f"{directory} already holds a savepoint ({target}); choose a new savepoint id"
        )
    mapping = _plan(manifest.uris(), source_uri, directory)
    modes, total_bytes = _copy_all(resolver, mapping, parallelism, progress)
    rewritten = dataclasses.replace(
        map_uris(manifest, mapping.__getitem__),
        kind=ManifestKind.SAVEPOINT,
        savepoint=SavepointInfo(savepoint_type, SavepointFormat.NATIVE),
        created_at=(clock or SystemClock()).wall(),
    )
    try:
        stored = write_manifest(resolver, target, rewritten)
    except ManifestExistsError as exc:
        raise ManifestExistsError(
            f"another writer completed a savepoint in {directory} concurrently ({target})"
        ) from exc
    return NativeSavepoint(
        stored=stored,
        directory=directory,
        files=len(mapping),
        bytes=total_bytes,
        server_side_copies=modes.count(CopyMode.SERVER_SIDE),
        streamed_copies=modes.count(CopyMode.STREAMED),
        reused_copies=modes.count(CopyMode.REUSED),
    )


def objects_outside(uris: Iterable[str], within: Sequence[str]) -> list[str]:
    """The objects of ``uris`` that do not lie under one of the directories ``within``
    (sorted). Both sides are compared in their normalized form; an object whose name
    has ``.`` or ``..`` segments, or does not parse, is outside whatever it starts with."""
    prefixes = [n + "/" for n in (_normalized(w) for w in within) if n is not None]
    outside = []
    for uri in uris:
        name = _normalized(uri)
        if name is None or not any(name.startswith(p) for p in prefixes):
            outside.append(uri)
    return sorted(outside)


def check_objects_within(manifest: Manifest, within: Sequence[str], *, what: str) -> None:
    """Refuse (:class:`RestoreError`, before anything is read or written) a manifest that
    names objects outside the directories ``within``: a savepoint taken with the
    caller's credentials copies only what the job owns. ``what`` names the manifest."""
    outside = objects_outside(manifest.uris(), within)
    if outside:
        raise RestoreError(
            f"{what} names {len(outside)} object(s) outside the job's directory and its "
            f"restore source (e.g. {outside[0]}); a savepoint copies only objects the job "
            f"owns, so none was taken: check who wrote the manifest (allowed: "
            f"{', '.join(within)})"
        )


def _normalized(uri: str) -> str | None:
    try:
        location = StorageURI.parse(uri)
    except ConfigurationError:
        return None
    if any(part in (".", "..") for part in location.path.split("/")):
        return None
    return str(location).rstrip("/")


def load_savepoint(resolver: StoreResolver, uri: str) -> StoredManifest:
    """Read the savepoint at ``uri`` (its directory or its manifest); handles come back
    as full URIs inside the directory's current location."""
    target = uri if uri.rstrip("/").endswith(SAVEPOINT_MANIFEST) else savepoint_manifest_uri(uri)
    manifest = read_manifest(resolver, target)
    if not manifest.is_savepoint:
        raise RestoreError(f"{target} is a {manifest.kind.value} manifest, not a savepoint")
    return StoredManifest(target, manifest)


def _plan(uris: frozenset[str], source_uri: str | None, directory: str) -> dict[str, str]:
    """Destination URI of every source object; distinct sources never collide."""
    base = manifest_base_dir(source_uri) + "/" if source_uri else None
    mapping: dict[str, str] = {}
    taken: set[str] = set()
    for uri in sorted(uris):
        if base is not None and uri.startswith(base):
            rel = uri[len(base) :]
            rel = rel.removeprefix("files/")
        else:
            parent, _, name = uri.rpartition("/")
            rel = f"ext/{crc32c(parent.encode()):08x}/{name}"
        if rel in taken:
            rel = f"ext/{crc32c(uri.encode()):08x}/{len(taken)}/{rel.rpartition('/')[2]}"
        taken.add(rel)
        mapping[uri] = join(directory, "files", rel)
    return mapping


def _copy_all(
    resolver: StoreResolver,
    mapping: dict[str, str],
    parallelism: int,
    progress: CopyProgress | None,
) -> tuple[list[CopyMode], int]:
    modes: list[CopyMode] = []
    total = 0
    if progress is not None:
        progress(0, len(mapping))
    with ThreadPoolExecutor(min(parallelism, max(1, len(mapping)))) as pool:
        pending: set[Future[tuple[CopyMode, int]]] = {
            pool.submit(_copy_one, resolver, src, dst) for src, dst in mapping.items()
        }
        while pending:
            done, pending = wait(pending, return_when=FIRST_EXCEPTION)
            for future in done:
                if future.exception() is not None:
                    for other in pending:
                        other.cancel()
                mode, size = future.result()
                modes.append(mode)
                total += size
                if progress is not None:
                    progress(len(modes), len(mapping))
    return modes, total


def _copy_one(resolver: StoreResolver, src: str, dst: str) -> tuple[CopyMode, int]:
    src_store, src_key = resolver.resolve(src)
    dst_store, dst_key = resolver.resolve(dst)
    size = src_store.size(src_key)
    try:
        if src_store is dst_store:
            src_store.copy(src_key, dst_key)
            return CopyMode.SERVER_SIDE, size
        dst_store.put(dst_key, src_store.get(src_key), if_absent=True)
        return CopyMode.STREAMED, size
    except ObjectExistsError as exc:
        existing = dst_store.size(dst_key)
        if existing != size:
            raise ObjectExistsError(
                f"savepoint file {dst} already exists with {existing} bytes but its source "
                f"{src} has {size}; remove the incomplete savepoint directory and retry",
                uri=dst,
            ) from exc
        return CopyMode.REUSED, size
