"""What the operator reads and writes in a job's checkpoint storage.

The operator never interprets checkpoint data itself: it uses the runtime's core
(status record, manifests, fencing epochs, control channel, orphan sweep) on the job's
directory ``<storage>/jobs/<job_id>/``. :class:`JobStorage` bundles those calls for one
job.

Invariants:

* deletions stay inside what the operator owns: :meth:`JobStorage.sweep_orphans` only
  deletes unreferenced objects the job's ownership policy classifies as the job's own
  (never a savepoint, another job or a restore source), and
  :meth:`JobStorage.dispose_savepoint` only objects under ``<storage>/savepoints/<id>/``;
* control requests are idempotent by id (the runtime's control channel), so a
  reconciler repeating itself after a crash never asks twice;
* S3 credentials come only from the operator's own environment
  (:meth:`gic_runtime.storage.S3Settings.from_env`), never from a job's Secret; a job
  may override only the endpoint.

Thread-safety: a :class:`JobStorage` may be shared between threads (the resolver and
the control channel are thread-safe; the rest is immutable). The module's resolver
cache is guarded by a lock.
"""

from __future__ import annotations

import dataclasses
import logging
import threading

from gic_operator.models.gicjob import GICJobSpec
from gic_runtime.checkpoint.catalog import list_checkpoints, load_retained
from gic_runtime.checkpoint.manifest import StoredManifest
from gic_runtime.checkpoint.ownership import OwnershipPolicy
from gic_runtime.checkpoint.sweep import SweepResult, policy_for, sweep_orphans
from gic_runtime.control import ControlChannel, Outcome
from gic_runtime.control.model import OutcomeState
from gic_runtime.coordination.savepoints import directory_size
from gic_runtime.errors import (
    ConfigurationError,
    FormatError,
    RestoreError,
)
from gic_runtime.fencing import claim_epoch, highest_epoch
from gic_runtime.layout import validate_id
from gic_runtime.status import JobStatus, read_status
from gic_runtime.storage.base import MAX_DELETE_BATCH
from gic_runtime.storage.s3_settings import S3Settings
from gic_runtime.storage.uri import StorageURI, StoreResolver, join

_log = logging.getLogger(__name__)

_resolvers: dict[str | None, StoreResolver] = {}
_resolvers_lock = threading.Lock()


def resolver_for(endpoint_url: str | None) -> StoreResolver:
    """The process's resolver for S3 endpoint ``endpoint_url`` (``None``: the one the
    environment names), with credentials from the environment; one per endpoint."""
    with _resolvers_lock:
        resolver = _resolvers.get(endpoint_url)
        if resolver is None:
            settings = S3Settings.from_env()
            if endpoint_url:
                settings = dataclasses.replace(settings, endpoint_url=endpoint_url)
            resolver = _resolvers[endpoint_url] = StoreResolver(settings)
        return resolver


def normalize_uri(uri: str) -> str:
    """``uri`` as the runtime writes URIs: a full URI without a trailing ``/``."""
    return str(StorageURI.parse(uri.strip())).rstrip("/")


class JobStorage:
    """The storage of job ``job_id`` under root URI ``root`` (see the module docstring).
    Thread-safe."""

    def __init__(self, resolver: StoreResolver, root: str, job_id: str) -> None:
        self.resolver = resolver
        self.root = normalize_uri(root)
        self.job_id = validate_id("job id", job_id)
        self._control = ControlChannel(resolver, self.root, self.job_id)

    @classmethod
    def open(cls, storage: str, job_id: str, *, endpoint_url: str | None = None) -> JobStorage:
        """The storage of ``job_id`` under ``storage``, through the process's resolver
        for ``endpoint_url``."""
        return cls(resolver_for(endpoint_url), storage, job_id)

    # --- what the driver reports -----------------------------------------------------

    def runtime_status(self) -> JobStatus | None:
        """The driver's status record; ``None`` when there is none or it cannot be
        read (logged as a warning: it is a report, not a source of truth)."""
        try:
            return read_status(self.resolver, self.root, self.job_id)
        except FormatError as exc:
            _log.warning("status record of job %s is unreadable: %s", self.job_id, exc)
            return None

    def has_checkpoint(self) -> bool:
        """Whether the job has completed a checkpoint (one LIST, no reads)."""
        return bool(list_checkpoints(self.resolver, self.root, self.job_id))

    def latest_checkpoint_id(self) -> int | None:
        """Id of the newest checkpoint manifest (unread), ``None`` when there is none."""
        refs = list_checkpoints(self.resolver, self.root, self.job_id)
        return refs[-1].checkpoint_id if refs else None

    # --- fencing and orphans ---------------------------------------------------------

    def highest_epoch(self) -> int:
        """The highest fencing epoch claimed for the job (0: none yet)."""
        return highest_epoch(self.resolver, self.root, self.job_id)

    def claim_epoch(self, claimed_by: str) -> int:
        """Claim the next fencing epoch for a launch named ``claimed_by``; return it.
        Every driver with a lower epoch stops before its next manifest."""
        return claim_epoch(self.resolver, self.root, self.job_id, claimed_by=claimed_by)

    def sweep_orphans(self) -> SweepResult:
        """Delete what no retained checkpoint references (inside ``jobs/<job_id>/``).

        Precondition (the caller's duty): no driver of the job can still write -- the
        old driver is gone and a new epoch was claimed. An unreadable manifest, or an
        unreadable restore source while the lineage still references it, raises before
        anything is deleted.
        """
        retained = load_retained(self.resolver, self.root, self.job_id)
        return sweep_orphans(
            self.resolver, self.root, self.job_id, retained, policy=self._policy(retained)
        )

    def _policy(self, retained: tuple[StoredManifest, ...]) -> OwnershipPolicy:
        """The job's ownership policy as its driver builds it (the restore source's files
        are protected or claimed while the lineage is not released); refuses when the
        source is unreadable, since which files belong to it is then unknown."""
        if not retained:
            return OwnershipPolicy.for_job(self.root, self.job_id)
        policy, warning = policy_for(self.resolver, self.root, retained[-1].manifest)
        if warning is not None:
            lineage = retained[-1].manifest.restored_from
            source = lineage.source_uri if lineage is not None else "?"
            raise RestoreError(
                f"cannot sweep job {self.job_id}: its restore source {source} is "
                f"unreadable ({warning}), so which files belong to it is unknown; nothing "
                "was deleted. Make the source readable again, or wait until a checkpoint "
                "releases it"
            )
        return policy

    # --- control requests ------------------------------------------------------------

    def request_savepoint(
        self, request_id: str, *, kind: str, format: str, requested_by: str
    ) -> str:
        """Ask the driver for a savepoint (``kind``: ``intermediate`` or ``terminal``)
        into ``<storage>/savepoints/<request_id>``; return that URI. Asking again with
        the same id and intent returns the same target."""
        request = self._control.request_savepoint(
            kind, format, request_id=request_id, requested_by=requested_by
        )
        return request.target

    def request_stop(self, request_id: str, requested_by: str) -> None:
        """Ask the driver to stop without a savepoint (idempotent by id)."""
        self._control.request_stop(request_id=request_id, requested_by=requested_by)

    def abandon_request(self, request_id: str, reason: str) -> Outcome:
        """Record a failed outcome for a request no driver served, so no later driver
        serves it (a stale stop request would stop the next launch). If a driver wrote
        an outcome first, that one stands and is returned."""
        try:
            return self._control.complete(
                Outcome(request_id, OutcomeState.FAILED, error=f"abandoned: {reason}")
            )
        except ConfigurationError:
            existing = self._control.outcome(request_id)
            if existing is None:
                raise
            return existing

    def outcome(self, request_id: str) -> Outcome | None:
        """How request ``request_id`` ended, ``None`` while it is pending (or unknown)."""
        return self._control.outcome(request_id)

    # --- savepoints --------------------------------------------------------------------

    def savepoint_size(self, path: str) -> tuple[int, int]:
        """``(files, bytes)`` under savepoint directory ``path``."""
        return directory_size(self.resolver, normalize_uri(path))

    def dispose_savepoint(self, path: str) -> int:
        """Delete every object under savepoint directory ``path``; return how many.

        Refuses (:class:`~gic_runtime.errors.ConfigurationError`) unless ``path`` lies
        under ``<storage>/savepoints/`` of this job's storage: savepoints elsewhere were
        not made by the operator and are never deleted by it.
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
        keys = [info.key for info in store.list(key.rstrip("/") + "/")]
        for start in range(0, len(keys), MAX_DELETE_BATCH):
            store.delete_many(keys[start : start + MAX_DELETE_BATCH])
        return len(keys)

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


def open_job_storage(spec: GICJobSpec, job_id: str) -> JobStorage:
    """The storage of a GICJob with ``spec`` and job id ``job_id``."""
    cp = spec.checkpointing
    return JobStorage.open(cp.storage, job_id, endpoint_url=cp.s3_endpoint_url)
