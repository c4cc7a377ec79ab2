"""Driver side of a checkpoint: one job's timeline of manifests.

A :class:`CheckpointTimeline` decides where an attempt starts (the latest checkpoint of
its own timeline, else the requested restore source), commits checkpoints (manifest
written once, registered with the shared-file registry, older checkpoints subsumed off
the critical path), tracks the restore lineage until the source is released, and runs
the orphan sweeps: the start's (:meth:`sweep`), the live one between batches when the
timeline is given ``live_sweep_interval_s`` (:meth:`live_sweep`,
:class:`~gic_runtime.checkpoint.live_sweep.LiveSweeper`, docs/architecture.md §13.9) and
the one after a clean stop (:meth:`sweep_after_stop`).

Invariants:

* A checkpoint of a no-claim restore references the source only until the first
  checkpoint completes: :attr:`must_be_self_contained` is true until then, and
  :meth:`commit` refuses a first checkpoint that still references the source
  (docs/architecture.md I6).
* Savepoints are never registered: they never enter the retained set, never drive
  deletions and are never a crash-recovery start point (docs/architecture.md I5).
* Deletions happen only through the ownership policy (docs/architecture.md I1, I9).
* Only manifests that count are a start point or retained: a manifest superseded by a
  newer launch's claim (:mod:`gic_runtime.checkpoint.claims`) is ignored here; the
  sweep deletes what only it references.
* :meth:`commit` checks the fence before the manifest write (right before it, or a
  check the caller started after the previous manifest landed) and again after it
  landed; a driver superseded in between raises :class:`~gic_runtime.errors.FencedError`
  with the manifest written but never registered: nothing is subsumed or deleted for
  it, and the caller must not publish its output (it may not count).
* A checkpoint id whose manifest name is held by a superseded manifest (a zombie's late
  write of the same id) is written under the alternate name of this epoch; any other
  existing manifest is :class:`~gic_runtime.errors.ManifestExistsError`. Nothing is
  deleted to make room, so no manifest name is ever written twice.

Thread-safety: one driver thread calls every method; deletions run on the registry's
background thread.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Mapping
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any

from gic_runtime.checkpoint.catalog import (
    load_retained,
    read_checkpoint,
    read_manifest,
    write_manifest,
)
from gic_runtime.checkpoint.claims import Claims
from gic_runtime.checkpoint.live_sweep import LiveSweeper
from gic_runtime.checkpoint.manifest import (
    Manifest,
    RestoreLineage,
    RestoreMode,
    SavepointType,
    StoredManifest,
)
from gic_runtime.checkpoint.ownership import OwnershipPolicy
from gic_runtime.checkpoint.registry import (
    DEFAULT_RETAINED_CHECKPOINTS,
    DeletionReport,
    SharedFileRegistry,
)
from gic_runtime.checkpoint.sweep import SweepResult, sweep_orphans
from gic_runtime.clock import Clock, SystemClock
from gic_runtime.errors import (
    BucketCountMismatchError,
    GICError,
    ManifestExistsError,
    ObjectNotFoundError,
    RestoreError,
)
from gic_runtime.event_time import NO_PROGRESS, EventTimeProgress
from gic_runtime.fencing import Fence
from gic_runtime.handles import BucketState
from gic_runtime.layout import (
    MANIFEST_SUFFIX,
    SAVEPOINT_MANIFEST,
    alternate_manifest_uri,
    job_dir,
    manifest_uri,
    parse_snapshot_epoch,
)
from gic_runtime.savepoint.canonical import INDEX_NAME
from gic_runtime.savepoint.native import NativeSavepoint, load_savepoint, write_native_savepoint
from gic_runtime.storage.uri import StoreResolver, join

_log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class RestoreRequest:
    """Start a new job from ``source``: a savepoint directory (native or canonical), a
    savepoint manifest, or a checkpoint manifest of another job."""

    source: str
    mode: RestoreMode = RestoreMode.NO_CLAIM


@dataclass(frozen=True, slots=True)
class StartPoint:
    """Where an attempt starts. Exactly one of ``manifest`` and ``canonical_uri`` is set,
    or neither for a fresh job."""

    manifest: Manifest | None = None
    canonical_uri: str | None = None
    own: bool = False
    """True when resuming the job's own latest checkpoint (crash recovery)."""

    @property
    def checkpoint_id(self) -> int | None:
        return self.manifest.checkpoint_id if self.manifest is not None else None


class CheckpointTimeline:
    """The checkpoint timeline of attempt ``epoch`` of job ``job_id`` under ``root``.

    ``fence`` is checked around every manifest write (default: the fence of ``epoch``;
    without any claimed epoch it never fires); ``live_sweep_interval_s`` enables
    :meth:`live_sweep` (a running driver's).
    """

    def __init__(
        self,
        resolver: StoreResolver,
        root: str,
        job_id: str,
        *,
        epoch: int,
        num_buckets: int,
        retain: int = DEFAULT_RETAINED_CHECKPOINTS,
        restore: RestoreRequest | None = None,
        clock: Clock | None = None,
        fence: Fence | None = None,
        live_sweep_interval_s: float | None = None,
    ) -> None:
        self._resolver = resolver
        self.root = root
        self.job_id = job_id
        self.epoch = epoch
        self.num_buckets = num_buckets
        self._clock = clock or SystemClock()
        self.fence = fence or Fence(resolver, root, job_id, epoch)
        retained = load_retained(resolver, root, job_id)
        self._lineage: RestoreLineage | None = None
        source: Manifest | None = None
        if retained:
            latest = retained[-1].manifest
            self._check_buckets(latest, retained[-1].uri)
            self._lineage = latest.restored_from
            self.start = StartPoint(manifest=latest, own=True)
            if self._lineage is not None and not self._lineage.released:
                source = read_manifest(resolver, self._lineage.source_uri)
        elif restore is not None:
            self.start, source, self._lineage = self._open_source(restore)
        else:
            self.start = StartPoint()
        self.policy = OwnershipPolicy.for_job(
            root, job_id, restore=self._lineage, source=source or ()
        )
        self.registry = SharedFileRegistry.from_manifests(
            resolver, self.policy, retained, retain=retain
        )
        self._live: LiveSweeper | None = None
        if live_sweep_interval_s is not None:
            self._live = LiveSweeper(
                resolver, root, job_id, interval_s=live_sweep_interval_s, epoch=epoch
            )

    # --- start -------------------------------------------------------------------------

    def _open_source(
        self, request: RestoreRequest
    ) -> tuple[StartPoint, Manifest | None, RestoreLineage]:
        src = request.source.rstrip("/")
        store, key = self._resolver.resolve(join(src, INDEX_NAME))
        if not src.endswith(MANIFEST_SUFFIX) and store.exists(key):
            lineage = RestoreLineage(src, request.mode, -1, released=True)
            return StartPoint(canonical_uri=src), None, lineage
        try:
            if src.endswith(MANIFEST_SUFFIX) and not src.endswith(SAVEPOINT_MANIFEST):
                stored = StoredManifest(src, read_manifest(self._resolver, src))
            else:
                stored = load_savepoint(self._resolver, src)
        except ObjectNotFoundError as exc:
            raise RestoreError(
                f"restore source {src} is neither a savepoint nor a checkpoint: expected a "
                f"directory holding {SAVEPOINT_MANIFEST} (native savepoint) or {INDEX_NAME} "
                "(canonical savepoint), or a checkpoint's chk-*.manifest; check the path "
                "(gic checkpoints lists a job's retained checkpoints)"
            ) from exc
        manifest = stored.manifest
        self._check_buckets(manifest, stored.uri)
        lineage = RestoreLineage(stored.uri, request.mode, manifest.checkpoint_id)
        return StartPoint(manifest=manifest), manifest, lineage

    def _check_buckets(self, manifest: Manifest, uri: str) -> None:
        if manifest.num_buckets != self.num_buckets:
            raise BucketCountMismatchError(
                f"{uri} has {manifest.num_buckets} buckets but the job is configured with "
                f"{self.num_buckets}; the bucket count is fixed for a state lineage: set it "
                f"to {manifest.num_buckets}, or restore from a canonical savepoint"
            )

    # --- lineage -----------------------------------------------------------------------

    @property
    def lineage(self) -> RestoreLineage | None:
        """Restore lineage as of the latest committed checkpoint (or the start)."""
        return self._lineage

    @property
    def must_be_self_contained(self) -> bool:
        """True until the first checkpoint after a no-claim restore completes."""
        lineage = self._lineage
        return lineage is not None and lineage.mode is RestoreMode.NO_CLAIM and not lineage.released

    # --- commit ------------------------------------------------------------------------

    def commit(
        self,
        checkpoint_id: int,
        buckets: Mapping[int, BucketState],
        *,
        engine: Mapping[str, Any] | None = None,
        sink: Mapping[str, Any] | None = None,
        query: Mapping[str, Any] | None = None,
        event_time: EventTimeProgress = NO_PROGRESS,
        fence_checked: Future[None] | None = None,
    ) -> tuple[StoredManifest, Callable[[], DeletionReport]]:
        """Write manifest ``checkpoint_id`` (create-if-absent) and register it;
        ``query`` is the fingerprint of the query that wrote it (:mod:`gic_runtime.query`),
        ``event_time`` how far the job's event time had come (its watermark).
        ``fence_checked``, a fence check (:meth:`~gic_runtime.fencing.Fence.check_in_background`)
        started after the previous manifest of this timeline landed, stands for the
        check before the write: its result is awaited instead of another LIST.

        Returns the stored manifest and a function that waits for the background
        deletions this commit caused (callers on the critical path need not call it).
        """
        draft = Manifest(
            job_id=self.job_id,
            checkpoint_id=checkpoint_id,
            epoch=self.epoch,
            created_at=self._clock.wall(),
            num_buckets=self.num_buckets,
            buckets=dict(buckets),
            engine=dict(engine or {}),
            sink=dict(sink or {}),
            query=None if query is None else dict(query),
            event_time=event_time,
        )
        lineage = self._lineage
        if lineage is not None:
            still = self.policy.source_references(draft)
            if still and lineage.mode is RestoreMode.NO_CLAIM:
                raise RestoreError(
                    f"checkpoint {checkpoint_id} still references {len(still)} object(s) of "
                    f"the no-claim restore source {lineage.source_uri} (e.g. {min(still)}); "
                    "the first checkpoint after a no-claim restore must be self-contained"
                )
            lineage = dataclasses.replace(lineage, released=lineage.released or not still)
            draft = dataclasses.replace(draft, restored_from=lineage)
        if fence_checked is None:
            self.fence.check()
        else:
            fence_checked.result()
        stored = self._write(manifest_uri(self.root, self.job_id, checkpoint_id), draft)
        self.fence.check()  # landed after a newer launch claimed the job: may not count
        self._lineage = lineage
        future = self.registry.register(stored)
        return stored, future.result

    def _write(self, uri: str, draft: Manifest) -> StoredManifest:
        """Write ``draft`` once at ``uri``, or under its alternate name when a superseded
        manifest holds ``uri`` (see the class invariants)."""
        try:
            return write_manifest(self._resolver, uri, draft)
        except ManifestExistsError:
            occupant = read_checkpoint(self._resolver, uri)
            claims = Claims(self._resolver, self.root, self.job_id)
            if claims.superseded_by(occupant.manifest.epoch, occupant.checkpoint_id) is None:
                raise
        alternate = alternate_manifest_uri(self.root, self.job_id, draft.checkpoint_id, self.epoch)
        return write_manifest(self._resolver, alternate, draft)

    def retained(self) -> tuple[StoredManifest, ...]:
        """Retained checkpoints, oldest first."""
        return self.registry.retained()

    def latest(self) -> StoredManifest | None:
        retained = self.retained()
        return retained[-1] if retained else None

    def set_retention(self, retain: int) -> DeletionReport:
        """Change the retention count; waits for the deletions it causes."""
        return self.registry.set_retention(retain).result()

    # --- savepoints and cleanup -------------------------------------------------------

    def native_savepoint(
        self,
        directory: str,
        *,
        savepoint_type: SavepointType = SavepointType.INTERMEDIATE,
        progress: Callable[[int, int], None] | None = None,
    ) -> NativeSavepoint:
        """Duplicate the latest checkpoint into ``directory`` (never registered)."""
        latest = self.latest()
        if latest is None:
            raise RestoreError(
                f"job {self.job_id} has no completed checkpoint yet; a native savepoint is "
                "taken from one: wait for the first checkpoint"
            )
        return write_native_savepoint(
            self._resolver,
            latest,
            directory,
            savepoint_type=savepoint_type,
            progress=progress,
            clock=self._clock,
        )

    def sweep(
        self, *, dry_run: bool = False, progress: Callable[[int, int], None] | None = None
    ) -> SweepResult:
        """Delete (or report) objects of the job's directory no retained checkpoint
        references. Only call when no other attempt of the job can still write. With
        live sweeps, the first is due one interval after this (the start's) sweep."""
        self.registry.drain()
        result = sweep_orphans(
            self._resolver,
            self.root,
            self.job_id,
            self.retained(),
            policy=self.policy,
            dry_run=dry_run,
            progress=progress,
            epoch=self.epoch,
        )
        if self._live is not None:
            self._live.due()  # starts the live sweeps' interval
        return result

    def live_sweep(self) -> SweepResult | None:
        """Delete what failed task attempts left, once ``live_sweep_interval_s`` has
        passed since the last sweep; call between batches, under the driver's batch lock.
        ``None``: not due, no live sweeps, or it failed (logged; retried at the next
        interval: orphans cost storage, never correctness)."""
        live = self._live
        if live is None or not live.due():
            return None
        try:
            result = live.sweep(self.retained(), self.policy)
        except GICError as exc:
            _log.warning("live orphan sweep of job %s failed: %s", self.job_id, exc)
            return None
        if result.deleted:
            _log.info(
                "live orphan sweep of job %s deleted %d objects (%d bytes)",
                self.job_id,
                result.deleted,
                result.deleted_bytes,
            )
        return result

    def sweep_after_stop(self) -> SweepResult:
        """Delete what this attempt uploaded and no retained checkpoint references: its
        changelog segments (``changelog/<epoch>/``) and its snapshots (named with its
        epoch), e.g. background snapshots no later batch adopted. Nothing of another
        attempt is looked at, and a newer claim stops the sweep before its next deletion
        (:class:`~gic_runtime.errors.FencedError`).

        Call after a clean stop, once the attempt's last manifest is written, no batch of
        the attempt runs any more and its background materializations have finished: a
        snapshot that lands afterwards stays until the next start's sweep.
        """
        self.registry.drain()
        own_segments = join(job_dir(self.root, self.job_id), "changelog", str(self.epoch)) + "/"

        def not_own(uri: str, subdir: str) -> bool:
            if subdir == "changelog":
                return not uri.startswith(own_segments)
            return parse_snapshot_epoch(uri) != self.epoch

        return sweep_orphans(
            self._resolver,
            self.root,
            self.job_id,
            self.retained(),
            policy=self.policy,
            subdirs=("changelog", "snapshots"),
            defer=not_own,
            epoch=self.epoch,
        )

    def close(self) -> None:
        """Wait for pending deletions and stop the registry's worker."""
        self.registry.close()
