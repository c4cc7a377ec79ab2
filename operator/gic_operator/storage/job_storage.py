"""What the operator reads and writes in a job's checkpoint storage.

The operator never interprets checkpoint data itself: it uses the runtime's formats and
core (status record, manifests, fencing epochs, control records, orphan sweep,
ownership) on the job's directory ``<storage>/jobs/<job_id>/``. :class:`JobStorage`
bundles those calls for one job.

Everything in that directory was written by the job's driver, which runs the tenant's
code: it is input, not truth. So:

* every read of a file a driver writes is bounded: the status record and control
  records go through :func:`~gic_operator.storage.bounded_reads.read_bounded`, manifests (the
  job's and a restore source's) through the runtime's readers, which bound them the
  same way; a larger object is refused instead of loaded;
* so is what a manifest decodes into: every manifest the operator reads (retained
  ones, superseded ones, a restore source's, those a claim lists) is decoded within the
  operator's :class:`~gic_runtime.checkpoint.manifest_limits.ManifestLimits`
  (:data:`~gic_runtime.checkpoint.manifest_limits.OPERATOR_LIMITS` unless its settings
  say otherwise), far below what a driver may write, and the retained manifests are
  read one at a time, keeping only what the pass needs (whether one still references a
  restore source; the objects they reference inside the job's directory, bounded):
  the operator's memory does not grow with what a tenant's driver wrote;
* a status record that cannot be read (too large, too deep, not JSON, wrong types, not
  a file) reads as no record: the pass goes on as for a driver that reported nothing;
* every listing of a prefix a driver writes is bounded the same way: the job's
  checkpoints and epochs and the orphan sweep through the runtime's bounded listings
  (:func:`gic_runtime.storage.listing.list_bounded`), a savepoint's directory here with
  :data:`MAX_SAVEPOINT_OBJECTS`; more objects raise
  :class:`~gic_runtime.errors.TooManyObjectsError` after at most that many were listed,
  before anything is deleted;
* a steady pass lists nothing: the status record and control records are read by their
  derived names, and :meth:`JobStorage.restore_released` lists only
  ``checkpoints/chk-``, bounded, and only when the caller's ``progress`` changed
  (:mod:`gic_operator.storage.release_checks`); :meth:`JobStorage.has_checkpoint` lists
  that prefix up to the first manifest name; full listings of ``checkpoints/`` and
  ``epochs/`` (the highest epoch, the sweep) are for launches and recoveries;
* deletions stay inside what the operator owns: :meth:`JobStorage.sweep_orphans` only
  deletes unreferenced objects it lists under ``jobs/<job_id>/`` that the job's
  ownership policy classifies as the job's own (never a savepoint, another job or a
  restore source), and :meth:`JobStorage.dispose_savepoint` only objects under
  ``<storage>/savepoints/``, at a path the caller derived;
* control requests are idempotent by id, and a request already stored under an id with
  another intent (e.g. another target) is refused, never adopted
  (:mod:`gic_operator.storage.control_files`);
* S3 credentials come only from the operator's own environment
  (:meth:`gic_runtime.storage.S3Settings.from_env`), never from a job's Secret; a job
  may override only the endpoint, and only one the allowlist admits: the operator opens
  every job's storage through :mod:`gic_operator.storage.storage_access`, which checks
  the endpoint before a client exists and every URI resolved against the allowed roots.
  At most :data:`MAX_RESOLVERS` resolvers (one per endpoint) are kept;
* a restore source named in a manifest (driver-written) is read only when it is the
  location the operator recorded (:func:`same_source`).

Thread-safety: a :class:`JobStorage` may be shared between threads (the resolver is
thread-safe; the rest is immutable). The module's caches are guarded by a lock.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable, Iterator

from gic_operator.models.gicjob import GICJobSpec
from gic_operator.operator_errors import UntrustedInputError
from gic_operator.storage.bounded_reads import normalize_uri, read_bounded
from gic_operator.storage.control_files import MAX_CONTROL_BYTES, ControlRequests
from gic_operator.storage.release_checks import (
    MAX_RELEASE_OBJECTS,
    ReleaseChecks,
    has_manifest,
    iter_release_manifests,
    release_limit,
)
from gic_operator.storage.restore_release import same_source, source_released
from gic_runtime.checkpoint.catalog import list_checkpoints
from gic_runtime.checkpoint.manifest import Manifest
from gic_runtime.checkpoint.manifest_limits import OPERATOR_LIMITS, ManifestLimits
from gic_runtime.checkpoint.ownership import OwnershipPolicy
from gic_runtime.checkpoint.retained_refs import collect_retained_refs
from gic_runtime.checkpoint.sweep import MAX_SWEPT_OBJECTS, SweepResult, policy_for, sweep_orphans
from gic_runtime.errors import (
    ConfigurationError,
    CorruptFileError,
    FormatError,
    GICError,
    RestoreError,
    StorageError,
    StoragePermissionError,
    TransientStorageError,
)
from gic_runtime.fencing import claim_epoch, highest_epoch
from gic_runtime.layout import job_dir, validate_id
from gic_runtime.status import JobStatus, decode_status, status_uri
from gic_runtime.storage.listing import count_bounded, list_bounded
from gic_runtime.storage.object_store import MAX_DELETE_BATCH, ObjectInfo, ObjectStore
from gic_runtime.storage.s3_settings import S3Settings
from gic_runtime.storage.uri import StoreResolver, join

__all__ = [
    "MAX_CONTROL_BYTES",
    "MAX_RESOLVERS",
    "MAX_SAVEPOINT_OBJECTS",
    "MAX_STATUS_BYTES",
    "JobStorage",
    "StorageFactory",
    "normalize_uri",
    "open_job_storage",
    "read_bounded",
    "resolver_for",
    "same_source",
]

_log = logging.getLogger(__name__)

#: Largest status record the operator reads (bytes).
MAX_STATUS_BYTES = 1 << 20
#: Most resolvers (one per S3 endpoint) kept at once.
MAX_RESOLVERS = 32
#: Most objects a savepoint directory may hold for the operator to size or dispose of
#: it: a savepoint holds what one checkpoint references (25,600 objects for the largest
#: benchmarked state), like the job directory a sweep lists (the sweep's limit).
MAX_SAVEPOINT_OBJECTS = MAX_SWEPT_OBJECTS
_SAVEPOINT_HINT = (
    "a savepoint holds what one checkpoint references, far fewer: inspect the directory "
    "and delete it by hand (or move out what another process put there)"
)
_CACHE_SIZE = 1024

_resolvers: OrderedDict[str | None, StoreResolver] = OrderedDict()
_release_checks = ReleaseChecks()
_warned: OrderedDict[str, str] = OrderedDict()
_lock = threading.Lock()


def resolver_for(endpoint_url: str | None) -> StoreResolver:
    """The process's resolver for S3 endpoint ``endpoint_url`` (``None``: the one the
    environment names), with credentials from the environment; one per endpoint, at most
    :data:`MAX_RESOLVERS` kept (least recently used dropped)."""
    with _lock:
        resolver = _resolvers.get(endpoint_url)
        if resolver is None:
            settings = S3Settings.from_env()
            if endpoint_url:
                settings = dataclasses.replace(settings, endpoint_url=endpoint_url)
            resolver = _resolvers[endpoint_url] = StoreResolver(settings)
            while len(_resolvers) > MAX_RESOLVERS:
                _resolvers.popitem(last=False)
        _resolvers.move_to_end(endpoint_url)
        return resolver


class JobStorage(ControlRequests):
    """The storage of job ``job_id`` under root URI ``root`` (see the module docstring);
    its control requests and outcomes come with :class:`ControlRequests`; manifests are
    decoded within ``limits``. Thread-safe."""

    def __init__(
        self,
        resolver: StoreResolver,
        root: str,
        job_id: str,
        *,
        limits: ManifestLimits = OPERATOR_LIMITS,
    ) -> None:
        self.resolver = resolver
        self.root = normalize_uri(root)
        self.job_id = validate_id("job id", job_id)
        self.limits = limits

    @classmethod
    def open(
        cls,
        storage: str,
        job_id: str,
        *,
        endpoint_url: str | None = None,
        limits: ManifestLimits = OPERATOR_LIMITS,
    ) -> JobStorage:
        """The storage of ``job_id`` under ``storage``, through the process's resolver
        for ``endpoint_url``."""
        return cls(resolver_for(endpoint_url), storage, job_id, limits=limits)

    # --- what the driver reports -----------------------------------------------------

    def runtime_status(self) -> JobStatus | None:
        """The driver's status record; ``None`` when there is none or it cannot be
        read -- too large, too deep, not JSON, wrong types, not a file -- (logged as a
        warning when that changes: it is a report, not a source of truth, and a pass
        must go on without it, e.g. to recover a driver that died). Only the operator's
        own access failing (a transient error, permission denied) raises."""
        uri = status_uri(self.root, self.job_id)
        try:
            data = read_bounded(self.resolver, uri, MAX_STATUS_BYTES, "status record")
            if data is None:
                return None
            status = decode_status(data, uri)
            if status.job_id != self.job_id:
                raise CorruptFileError(
                    f"it holds the status of job {status.job_id!r}, not {self.job_id!r}", uri=uri
                )
        except (TransientStorageError, StoragePermissionError):
            raise
        except (FormatError, StorageError) as exc:
            self._warn_once(f"status record of job {self.job_id} is unreadable: {exc}")
            return None
        return status

    def _warn_once(self, message: str) -> None:
        with _lock:
            if _warned.get(self.job_id) == message:
                return
            _warned[self.job_id] = message
            while len(_warned) > _CACHE_SIZE:
                _warned.popitem(last=False)
        _log.warning("%s", message)

    def has_checkpoint(self) -> bool:
        """Whether the job has completed a checkpoint (one LIST of ``checkpoints/chk-``
        up to the first manifest name, no reads: ``release_checks.has_manifest``)."""
        return has_manifest(self.resolver, self.root, self.job_id)

    def latest_checkpoint_id(self) -> int | None:
        """Id of the newest checkpoint manifest (unread), ``None`` when there is none."""
        refs = list_checkpoints(self.resolver, self.root, self.job_id)
        return refs[-1].checkpoint_id if refs else None

    def restore_released(
        self, source: str, progress: Hashable = None, *, retained: int = MAX_RELEASE_OBJECTS
    ) -> bool:
        """Whether no checkpoint manifest of the job references an object of restore
        source ``source`` (the URI the operator passed to the driver), judged from the
        job's manifests and the source's manifest, never from the driver's report.
        ``False`` while that cannot be told (no checkpoint yet, a manifest unreadable,
        the manifests naming another source: that one is never read).

        ``progress`` says when to look again (:mod:`gic_operator.storage.release_checks`):
        a judgment is made once per value (the caller derives it from the launch's epoch
        and the driver's last report) and reused while it stays the same, so a steady
        pass lists nothing; a judgment lists only ``checkpoints/chk-``, bounded by what a
        job keeping ``retained`` checkpoints holds there (``release_limit``), and reads
        the manifests newest first, one at a time within the operator's limits, stopping
        at the first that still references the source."""
        source = normalize_uri(source)
        limit = release_limit(retained)
        key = (self.root, self.job_id, source, limit, progress)
        known = _release_checks.get(key)
        if known is not None:
            return known
        try:
            manifests = iter_release_manifests(
                self.resolver, self.root, self.job_id, limit, limits=self.limits
            )
            released = source_released(
                self.resolver, self.root, self.job_id, source, manifests, limits=self.limits
            )
        except GICError as exc:
            self._warn_once(f"cannot tell whether job {self.job_id} released {source}: {exc}")
            released = False
        _release_checks.remember(key, released)
        return released

    # --- fencing and orphans ---------------------------------------------------------

    def highest_epoch(self) -> int:
        """The highest fencing epoch claimed for the job (0: none yet)."""
        return highest_epoch(self.resolver, self.root, self.job_id)

    def claim_epoch(self, claimed_by: str, epoch: int | None = None) -> int:
        """Claim fencing epoch ``epoch`` (default: the next one) for a launch named
        ``claimed_by``; return it. Every driver with a lower epoch stops before its next
        manifest. Claiming an epoch whose marker ``claimed_by`` already holds completes
        that claim (a retry after a failure)."""
        return claim_epoch(
            self.resolver,
            self.root,
            self.job_id,
            epoch=epoch,
            claimed_by=claimed_by,
            limits=self.limits,
        )

    def sweep_orphans(self, recorded_source: str | None) -> SweepResult:
        """Delete what no retained checkpoint references (inside ``jobs/<job_id>/``).

        ``recorded_source`` is the restore source the operator itself recorded for the
        job (``status.restoredFrom.path``, ``None``: none). A restore source the newest
        manifest names is read only when it is that same location
        (:func:`same_source`); any other raises
        :class:`~gic_operator.operator_errors.UntrustedInputError`, nothing read or
        deleted.

        Precondition (the caller's duty): no driver of the job can still write -- the
        old driver is gone and a new epoch was claimed. An unreadable manifest, or an
        unreadable restore source while the lineage still references it, raises before
        anything is deleted; so do retained manifests referencing more objects in the
        job's directory than ``limits.max_references`` (read one at a time).
        """
        refs = collect_retained_refs(
            self.resolver,
            self.root,
            self.job_id,
            within=job_dir(self.root, self.job_id),
            limits=self.limits,
        )
        return sweep_orphans(
            self.resolver,
            self.root,
            self.job_id,
            refs=refs,
            policy=self._policy(refs.newest, recorded_source),
            limits=self.limits,
        )

    def _policy(self, newest: Manifest | None, recorded_source: str | None) -> OwnershipPolicy:
        """The job's ownership policy as its driver builds it from its newest retained
        manifest (the restore source's files are protected or claimed while the lineage
        is not released); refuses when the source is unreadable, since which files
        belong to it is then unknown, and when it is not the source the operator
        recorded (then it is not read at all)."""
        if newest is None:
            return OwnershipPolicy.for_job(self.root, self.job_id)
        lineage = newest.restored_from
        reads_source = (
            lineage is not None and not lineage.released and lineage.source_checkpoint_id >= 0
        )
        if (
            lineage is not None
            and reads_source
            and not (recorded_source and same_source(lineage.source_uri, recorded_source))
        ):
            raise UntrustedInputError(
                f"cannot sweep job {self.job_id}: its newest checkpoint names restore "
                f"source {lineage.source_uri}, which is not the one the operator restored "
                f"the job from ({recorded_source or 'none'}); the operator neither reads "
                "it nor deletes anything. The job's driver wrote that manifest: inspect "
                "its checkpoints (gic checkpoints) and restore the job from a source you "
                "trust"
            )
        policy, warning = policy_for(self.resolver, self.root, newest, limits=self.limits)
        if warning is not None:
            lineage = newest.restored_from
            source = lineage.source_uri if lineage is not None else "?"
            raise RestoreError(
                f"cannot sweep job {self.job_id}: its restore source {source} is "
                f"unreadable ({warning}), so which files belong to it is unknown; nothing "
                "was deleted. Make the source readable again, or wait until a checkpoint "
                "releases it"
            )
        return policy

    # --- savepoints --------------------------------------------------------------------

    def savepoint_size(self, path: str) -> tuple[int, int]:
        """``(files, bytes)`` under savepoint directory ``path`` (a bounded listing: more
        than :data:`MAX_SAVEPOINT_OBJECTS` files raise
        :class:`~gic_runtime.errors.TooManyObjectsError`)."""
        store, key = self.resolver.resolve(normalize_uri(path))
        files = size = 0
        for info in self._savepoint_listing(store, key):
            files += 1
            size += info.size
        return files, size

    @staticmethod
    def _savepoint_listing(store: ObjectStore, key: str) -> Iterator[ObjectInfo]:
        prefix = key.rstrip("/") + "/"
        return list_bounded(store, prefix, MAX_SAVEPOINT_OBJECTS, hint=_SAVEPOINT_HINT)

    def dispose_savepoint(self, path: str) -> int:
        """Delete every object under savepoint directory ``path``; return how many.

        ``path`` must be one the caller derived (never a path read from a status or an
        outcome). Refuses (:class:`~gic_runtime.errors.ConfigurationError`) unless it
        lies under ``<storage>/savepoints/`` of this job's storage. Counts the objects
        first: more than :data:`MAX_SAVEPOINT_OBJECTS` raise
        :class:`~gic_runtime.errors.TooManyObjectsError` and nothing is deleted; then
        deletes them batch by batch as they are listed (memory: one batch).
        """
        target = normalize_uri(path)
        base = join(self.root, "savepoints") + "/"
        rest = target[len(base) :] if target.startswith(base) else ""
        if not rest or any(part in ("", ".", "..") for part in rest.split("/")):
            raise ConfigurationError(
                f"refusing to delete savepoint files at {path}: the operator disposes only "
                f"of savepoints under {base} (this job's storage); delete others yourself"
            )
        store, key = self.resolver.resolve(target)
        prefix = key.rstrip("/") + "/"
        count_bounded(store, prefix, MAX_SAVEPOINT_OBJECTS, hint=_SAVEPOINT_HINT)
        deleted = 0
        batch: list[str] = []
        for info in self._savepoint_listing(store, key):
            batch.append(info.key)
            if len(batch) == MAX_DELETE_BATCH:
                deleted += store.delete_many(batch)
                batch = []
        if batch:
            deleted += store.delete_many(batch)
        return deleted

    def resolve_restore_path(self, path: str) -> str:
        """``path`` normalized for a restore source (a full URI, no trailing ``/``); a
        relative local path is refused (it would mean nothing in the driver's pod)."""
        text = path.strip()
        if "://" not in text and not text.startswith("/"):
            raise ConfigurationError(
                f"restore path {path!r} is relative; use a URI (s3://bucket/prefix/..., "
                "file:///absolute/path) or an absolute path"
            )
        return normalize_uri(text)


def open_job_storage(
    spec: GICJobSpec, job_id: str, *, limits: ManifestLimits = OPERATOR_LIMITS
) -> JobStorage:
    """The storage of a GICJob with ``spec`` and job id ``job_id``, its manifests read
    within ``limits``. The caller has checked ``spec`` against the storage allowlist."""
    cp = spec.checkpointing
    return JobStorage.open(cp.storage, job_id, endpoint_url=cp.s3_endpoint_url, limits=limits)


#: Opens a job's storage: (spec, job id) -> :class:`JobStorage` (:func:`open_job_storage`,
#: or a test's own).
StorageFactory = Callable[[GICJobSpec, str], JobStorage]
