"""Orphan sweep: delete what a job's retained checkpoints no longer reference.

Orphans appear after crashes: uploads of a checkpoint that never completed, losers of
hedged uploads whose deletion was lost, objects whose background deletion failed, the
manifest of a checkpoint subsumed just before a crash, what only a superseded manifest
(:mod:`gic_runtime.checkpoint.claims`) references. The sweep lists the job's data
directories -- ``changelog/``, ``snapshots/`` and the manifest files in
``checkpoints/`` -- and deletes every object no retained manifest references. A retained
checkpoint's manifest file counts as referenced. A superseded manifest file stays too
unless its id is below the oldest retained one: its name must never be free to be
written again (see :mod:`gic_runtime.checkpoint.catalog`); what it references goes.
Everything else under the job directory (``control/`` intents, files other components
keep there) is never looked at.

Precondition (docs/architecture.md I10), the caller's duty: no attempt of the job can still write --
the old driver is gone and the epoch is bumped -- so an in-progress upload of a live
attempt can never be mistaken for an orphan.

A launch that claims the job while the sweep runs makes it stop: right before each
deletion batch the sweep lists the job's claims again and raises
:class:`~gic_runtime.errors.FencedError` when an epoch above the sweeper's (``epoch``;
by default the highest claimed when the sweep started) exists. Every object of a
deletion batch was listed before that check, so it was created before any launch the
check did not see: a sweeper that was superseded without knowing it (a paused process
whose retained view is stale) never deletes what a newer launch wrote.

Bounded: before anything is deleted, the listed directories are counted together with
:func:`~gic_runtime.storage.listing.count_bounded`; more than ``max_objects`` (default
:data:`MAX_SWEPT_OBJECTS`) objects raise :class:`~gic_runtime.errors.TooManyObjectsError`
after at most that many were looked at, and nothing is deleted. The sweep then lists
them again with :func:`~gic_runtime.storage.listing.list_bounded` and deletes batch by
batch, so its memory is a deletion batch, not the listing; objects a writer adds between
the count and the sweep count against the same bound (what was deleted by then were
orphans all the same).

Safety: the retained manifests are read before anything is deleted, and an unreadable
one aborts the sweep (its references are unknown). Only objects the ownership policy
classifies as :attr:`~gic_runtime.checkpoint.ownership.Owner.JOB` are deleted, so a
sweep never touches savepoints, other jobs, a restore source (claimed or not) or
anything outside ``jobs/<job_id>/``; deletion goes through the guarded
:func:`~gic_runtime.checkpoint.ownership.delete_keys`.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Final

from gic_runtime.checkpoint.catalog import load_retained, read_manifest, resolve_prefix
from gic_runtime.checkpoint.claims import Claims
from gic_runtime.checkpoint.manifest import Manifest, StoredManifest
from gic_runtime.checkpoint.manifest_limits import DRIVER_LIMITS, ManifestLimits
from gic_runtime.checkpoint.ownership import Owner, OwnershipPolicy, delete_keys
from gic_runtime.checkpoint.retained_refs import RetainedRefs
from gic_runtime.errors import FencedError, GICError, TooManyObjectsError
from gic_runtime.layout import job_dir, parse_checkpoint_id
from gic_runtime.storage.listing import count_bounded, list_bounded
from gic_runtime.storage.object_store import MAX_DELETE_BATCH, ObjectInfo, ObjectStore
from gic_runtime.storage.uri import StoreResolver, join

#: Job subdirectories the sweep lists.
SWEPT_DIRS: tuple[str, ...] = ("changelog", "snapshots", "checkpoints")

MAX_SWEPT_OBJECTS: Final = 1_000_000
"""Most objects one sweep lists (its directories together). The largest benchmarked
state (128 buckets x 200 changelog sections) is 25,600 referenced objects; a million is
40 times that plus crash leftovers. Counting them costs 1,000 LIST requests; memory
stays a deletion batch whatever the count."""

#: ``progress(listed_so_far, deleted_so_far)``.
SweepProgress = Callable[[int, int], None]

#: ``defer(uri, subdir)``: keep this orphan for now (a later sweep decides again).
SweepDefer = Callable[[str, str], bool]


@dataclass(frozen=True, slots=True)
class SweepResult:
    """What one sweep saw and did. Counts are objects; ``*_bytes`` their sizes.

    ``orphaned`` counts unreferenced objects the job owns; ``protected`` counts
    unreferenced objects it does not own (kept). ``orphans`` lists the orphans' URIs on
    a dry run (empty otherwise, to bound memory on large sweeps).
    """

    job_id: str
    dry_run: bool
    listed: int
    listed_bytes: int
    referenced: int
    referenced_bytes: int
    orphaned: int
    orphaned_bytes: int
    deleted: int
    deleted_bytes: int
    protected: int
    orphans: tuple[str, ...] = ()
    deferred: int = 0
    """Orphans kept for now because the caller's ``defer`` said so (live sweeps)."""
    superseded: int = 0
    """Superseded manifest files kept (see the module docstring); counted as referenced."""


def policy_for(
    resolver: StoreResolver,
    root: str,
    manifest: Manifest,
    *,
    savepoint_dirs: Iterable[str] = (),
    limits: ManifestLimits = DRIVER_LIMITS,
) -> tuple[OwnershipPolicy, str | None]:
    """The ownership policy of ``manifest``'s job under ``root``, as its driver builds it
    (the restore source's files count while the lineage is not released), and a warning
    when the source manifest could not be read within ``limits`` (its files then show
    as "other" unless they lie under the source's directory)."""
    lineage = manifest.restored_from
    source: frozenset[str] = frozenset()
    warning = None
    if lineage is not None and not lineage.released and lineage.source_checkpoint_id >= 0:
        try:
            source = read_manifest(resolver, lineage.source_uri, limits=limits).uris()
        except GICError as exc:
            warning = f"restore source manifest unreadable: {exc}"
    policy = OwnershipPolicy.for_job(
        root,
        manifest.job_id,
        restore=lineage,
        source=source,
        savepoint_dirs=savepoint_dirs,
    )
    return policy, warning


def sweep_orphans(
    resolver: StoreResolver,
    root: str,
    job_id: str,
    manifests: Iterable[StoredManifest] | None = None,
    *,
    policy: OwnershipPolicy | None = None,
    dry_run: bool = False,
    batch_size: int = MAX_DELETE_BATCH,
    progress: SweepProgress | None = None,
    subdirs: Sequence[str] = SWEPT_DIRS,
    defer: SweepDefer | None = None,
    epoch: int | None = None,
    max_objects: int | None = None,
    refs: RetainedRefs | None = None,
    limits: ManifestLimits = DRIVER_LIMITS,
) -> SweepResult:
    """Sweep ``jobs/<job_id>/`` under ``root`` (see the module docstring).

    ``manifests`` are the retained checkpoints (default: every manifest in the job's
    ``checkpoints/`` directory, read with
    :func:`~gic_runtime.checkpoint.catalog.load_retained`; an unreadable one raises and
    nothing is deleted). ``policy`` defaults to
    :meth:`OwnershipPolicy.for_job(root, job_id) <OwnershipPolicy.for_job>`; pass the
    job's real policy when it was restored, so source objects inside the job directory
    stay protected. With ``dry_run`` nothing is deleted. ``subdirs`` (a subset of
    :data:`SWEPT_DIRS`) limits what is listed, and ``defer`` keeps chosen orphans for now
    (see :mod:`gic_runtime.checkpoint.live_sweep`). ``epoch`` is the caller's fencing
    epoch: the sweep raises :class:`~gic_runtime.errors.FencedError` before deleting
    anything more once a higher one is claimed (default: the highest claimed when the
    sweep starts; see the module docstring). More than ``max_objects`` (default
    :data:`MAX_SWEPT_OBJECTS`) objects in the listed directories raise
    :class:`~gic_runtime.errors.TooManyObjectsError` before anything is deleted.
    ``refs`` (instead of ``manifests``) is what the retained manifests reference,
    collected one manifest at a time
    (:func:`~gic_runtime.checkpoint.retained_refs.collect_retained_refs`); manifests the
    sweep reads itself (superseded ones) are read within ``limits``.
    """
    unknown = sorted(set(subdirs) - set(SWEPT_DIRS))
    if unknown:
        raise ValueError(f"cannot sweep {unknown}: only {SWEPT_DIRS}")
    if refs is None:
        if manifests is None:
            manifests = load_retained(resolver, root, job_id, limits=limits)
        refs = RetainedRefs.of(manifests)
    policy = policy or OwnershipPolicy.for_job(root, job_id)
    guard = _ClaimGuard(resolver, root, job_id, epoch) if not dry_run else None
    referenced = refs.referenced | refs.manifests
    keep = _SupersededManifests(resolver, root, job_id, refs.oldest, limits)

    bound = _Bound(job_id, job_dir(root, job_id), subdirs, max_objects)
    listed = [(sub, *resolve_prefix(resolver, join(bound.base, sub))) for sub in subdirs]
    bound.count([(store, prefix) for _, store, prefix in listed])

    c = _Counts()
    orphans: list[str] = []
    for sub, store, prefix in listed:
        batch: list[str] = []
        for info in bound.listing(store, prefix, c.seen):
            c.seen += 1
            checkpoint_id = parse_checkpoint_id(info.key) if sub == "checkpoints" else None
            if sub == "checkpoints" and checkpoint_id is None:
                continue
            uri = store.uri_for(info.key)
            c.listed += 1
            c.listed_bytes += info.size
            kept = checkpoint_id is not None and uri not in referenced and keep(uri, checkpoint_id)
            if kept or uri in referenced:
                c.referenced += 1
                c.referenced_bytes += info.size
                c.superseded += kept
            elif policy.classify(uri) is not Owner.JOB:
                c.protected += 1
            elif defer is not None and defer(uri, sub):
                c.deferred += 1
            else:
                c.orphaned += 1
                c.orphaned_bytes += info.size
                if dry_run:
                    orphans.append(uri)
                else:
                    batch.append(info.key)
                    c.batch_bytes += info.size
                    if len(batch) >= batch_size:
                        _flush(policy, store, batch, c, batch_size, guard=guard)
            if progress is not None and c.listed % max(1, batch_size) == 0:
                progress(c.listed, c.deleted)
        _flush(policy, store, batch, c, batch_size, guard=guard)
    if progress is not None:
        progress(c.listed, c.deleted)
    return SweepResult(
        job_id=job_id,
        dry_run=dry_run,
        listed=c.listed,
        listed_bytes=c.listed_bytes,
        referenced=c.referenced,
        referenced_bytes=c.referenced_bytes,
        orphaned=c.orphaned,
        orphaned_bytes=c.orphaned_bytes,
        deleted=c.deleted,
        deleted_bytes=c.deleted_bytes,
        protected=c.protected,
        orphans=tuple(orphans),
        deferred=c.deferred,
        superseded=c.superseded,
    )


class _Counts:
    """Mutable tallies of one sweep (local to one call; not shared)."""

    def __init__(self) -> None:
        self.listed = self.listed_bytes = 0
        self.referenced = self.referenced_bytes = 0
        self.orphaned = self.orphaned_bytes = 0
        self.deleted = self.deleted_bytes = 0
        self.protected = 0
        self.deferred = 0
        self.superseded = 0
        self.batch_bytes = 0
        self.seen = 0  # objects listed, every one (``listed`` leaves out non-manifests)


class _Bound:
    """The sweep's bound on listed objects (see the module docstring). A listing's
    :class:`TooManyObjectsError` names one directory and what was left of the bound;
    this one's name the job, its swept directories and the whole bound."""

    def __init__(
        self, job_id: str, base: str, subdirs: Sequence[str], max_objects: int | None
    ) -> None:
        self.job_id = job_id
        self.base = base
        self.subdirs = subdirs
        self.limit = MAX_SWEPT_OBJECTS if max_objects is None else max_objects

    def count(self, prefixes: Sequence[tuple[ObjectStore, str]]) -> None:
        """Raise unless the prefixes hold at most ``limit`` objects together."""
        with self._translated("the sweep deleted nothing"):
            seen = 0
            for store, prefix in prefixes:
                seen += count_bounded(store, prefix, self.limit - seen)

    def listing(self, store: ObjectStore, prefix: str, seen: int) -> Iterator[ObjectInfo]:
        """``prefix`` in key order, ``seen`` objects of the bound already used."""
        with self._translated(
            "objects were added after the sweep counted them, and it stopped there (what "
            "it deleted before were orphans)"
        ):
            yield from list_bounded(store, prefix, self.limit - seen)

    @contextlib.contextmanager
    def _translated(self, outcome: str) -> Iterator[None]:
        try:
            yield
        except TooManyObjectsError as exc:
            dirs = ", ".join(f"{sub}/" for sub in self.subdirs)
            raise TooManyObjectsError(
                f"more than {self.limit} objects in {dirs} of job {self.job_id!r} under "
                f"{self.base}, the most one sweep lists; {outcome}. That is far more than "
                "a job keeps between sweeps: inspect the job's directory and move out what "
                "another process put there, or delete the whole directory of a job that is "
                "abandoned",
                uri=self.base,
                limit=self.limit,
            ) from exc


class _SupersededManifests:
    """Decides whether an unretained manifest file must stay: superseded, and not below
    the oldest retained id. Reads it (and the job's claims) only when some claim has a
    start record; an unreadable one does not stay (as before claims existed)."""

    def __init__(
        self, resolver: StoreResolver, root: str, job_id: str, oldest: int, limits: ManifestLimits
    ) -> None:
        self._resolver = resolver
        self._oldest = oldest
        self._limits = limits
        self._claims: Claims | None = None
        self._args = (resolver, root, job_id)

    def __call__(self, uri: str, checkpoint_id: int) -> bool:
        if checkpoint_id < self._oldest:
            return False
        if self._claims is None:
            self._claims = Claims(*self._args)
        if not self._claims.recorded:
            return False
        try:
            manifest = read_manifest(self._resolver, uri, limits=self._limits)
        except GICError:
            return False
        return self._claims.superseded_by(manifest.epoch, checkpoint_id) is not None


class _ClaimGuard:
    """Raises :class:`FencedError` once an epoch above the sweeper's is claimed."""

    def __init__(self, resolver: StoreResolver, root: str, job_id: str, epoch: int | None):
        self._args = (resolver, root, job_id)
        self.epoch = Claims(resolver, root, job_id).highest if epoch is None else epoch

    def check(self) -> None:
        highest = Claims(*self._args).highest
        if highest > self.epoch:
            raise FencedError(
                f"the orphan sweep of job {self._args[2]!r} stopped: epoch {highest} claimed "
                f"the job while it ran (the sweep runs for epoch {self.epoch}); what the "
                "newer launch wrote is not this sweep's to judge, and that launch sweeps "
                "at its own start"
            )


def _flush(
    policy: OwnershipPolicy,
    store: ObjectStore,
    batch: list[str],
    c: _Counts,
    batch_size: int,
    *,
    guard: _ClaimGuard | None,
) -> None:
    if not batch:
        return
    if guard is not None:
        guard.check()  # every key of the batch was listed before this check
    c.deleted += delete_keys(policy, store, batch, batch_size=batch_size)
    c.deleted_bytes += c.batch_bytes
    c.batch_bytes = 0
    batch.clear()
