"""Reference counts of objects shared by a job's retained checkpoints.

Checkpoints share most of their files (a changelog segment or a snapshot stays in every
checkpoint until the bucket materializes past it). The registry counts, for each object,
how many retained checkpoints reference it. Completing checkpoint N registers it; the
oldest checkpoints beyond the retention count are *subsumed*: their manifest files are
deleted, their objects' counts drop, and objects whose count reaches zero are deleted --
if the job owns them (:mod:`gic_runtime.checkpoint.ownership`). Savepoint files,
no-claim restore sources and foreign objects are never deleted (docs/architecture.md I1);
they
are reported as *kept*.

Deletion is off the critical path: it runs on a background executor (one worker by
default), and :meth:`SharedFileRegistry.register` returns a future of the
:class:`DeletionReport`. Within one subsumption the manifest files go first and the
objects after (and only if the manifests are gone), so a crash or a failed delete in
between leaves unreferenced objects (orphans, swept on recovery), never a manifest that
references missing objects.

Invariants:

* the retained set is always the newest ``retain`` registered checkpoints (``retain >=
  1``), and ``refcount(u)`` equals the number of retained manifests whose ``uris()``
  contain ``u``;
* an object is deleted only when its count is zero at deletion time and the ownership
  policy allows it;
* intermediate savepoints are never registered (``register`` refuses savepoint
  manifests, docs/architecture.md I5).

The state is rebuildable after a restart from the retained manifests alone
(:meth:`SharedFileRegistry.from_manifests`); nothing else is persisted.

Thread-safety: every public method may be called from any thread; state changes are
serialized by one lock, which is never held during storage I/O.
"""

from __future__ import annotations

import logging
import threading
from collections import Counter
from collections.abc import Iterable, Mapping
from concurrent.futures import Executor, Future, ThreadPoolExecutor
from dataclasses import dataclass
from types import TracebackType
from typing import Final

from gic_runtime.checkpoint.manifest import StoredManifest
from gic_runtime.checkpoint.ownership import OwnershipPolicy, delete_uris
from gic_runtime.errors import ConfigurationError, StorageError
from gic_runtime.storage.uri import StoreResolver

_log = logging.getLogger(__name__)

DEFAULT_RETAINED_CHECKPOINTS: Final = 2
"""Checkpoints a job keeps unless told otherwise: the newest and one fallback. Every
further one keeps, for as long as it is retained, the previous snapshot of each bucket
materialized since it and the changelog since that snapshot: in the ``soak`` benchmark
(a fifth of the keys updated per batch, growth ratio 0.5) 3 retained checkpoints held
3.1-3.8x the state's snapshot size and 2 held 2.5-2.9x (docs/architecture.md §7)."""


@dataclass(frozen=True, slots=True)
class DeletionReport:
    """Outcome of one subsumption's background deletion."""

    subsumed: tuple[int, ...] = ()
    """Checkpoint ids whose manifests were deleted."""
    manifests_deleted: int = 0
    objects_deleted: int = 0
    bytes_deleted: int = 0
    """Bytes of the deleted objects (not counting manifest files)."""
    kept: tuple[str, ...] = ()
    """Unreferenced objects the job does not own (savepoint, no-claim source): kept."""
    failed: tuple[str, ...] = ()
    """Objects whose deletion failed; they are orphans now and the next sweep gets them."""


@dataclass(frozen=True, slots=True)
class RegistryStats:
    """Cumulative counters since the registry was created."""

    retained: int
    referenced_objects: int
    manifests_deleted: int
    objects_deleted: int
    bytes_deleted: int
    objects_kept: int
    delete_failures: int
    pending: int
    """Deletion tasks scheduled and not finished."""


@dataclass(frozen=True, slots=True)
class RegistrySnapshot:
    """Comparable view of the registry's state (retained ids and reference counts)."""

    retained: tuple[int, ...]
    refcounts: Mapping[str, int]


_DONE: Future[DeletionReport] = Future()
_DONE.set_result(DeletionReport())


class SharedFileRegistry:
    """Reference counts across a job's retained checkpoints (see the module docstring)."""

    def __init__(
        self,
        resolver: StoreResolver,
        policy: OwnershipPolicy,
        *,
        retain: int = 1,
        executor: Executor | None = None,
    ) -> None:
        _check_retain(retain)
        self._resolver = resolver
        self._policy = policy
        self._retain = retain
        self._owns_executor = executor is None
        self._executor = executor or ThreadPoolExecutor(1, thread_name_prefix="gic-registry")
        # Re-entrant: a deletion that finishes before add_done_callback runs its
        # callback (which takes the lock) on the registering thread.
        self._lock = threading.RLock()
        self._retained: dict[int, StoredManifest] = {}
        self._refs: dict[int, frozenset[str]] = {}
        self._counts: Counter[str] = Counter()
        self._pending: set[Future[DeletionReport]] = set()
        self._totals: Counter[str] = Counter()
        self._closed = False

    @classmethod
    def from_manifests(
        cls,
        resolver: StoreResolver,
        policy: OwnershipPolicy,
        manifests: Iterable[StoredManifest],
        *,
        retain: int = 1,
        executor: Executor | None = None,
    ) -> SharedFileRegistry:
        """Rebuild after a restart from the retained manifests (e.g.
        :func:`~gic_runtime.checkpoint.catalog.load_retained`). Manifests beyond
        ``retain`` are subsumed at once (their deletion is pending; see :meth:`drain`)."""
        registry = cls(resolver, policy, retain=retain, executor=executor)
        for stored in sorted(manifests, key=lambda s: s.checkpoint_id):
            registry.register(stored)
        return registry

    # --- state changes ---------------------------------------------------------------

    def register(self, stored: StoredManifest) -> Future[DeletionReport]:
        """Add a completed checkpoint and subsume those beyond the retention count.

        Returns a future of the background deletion (already done when nothing was
        subsumed). Raises :class:`ConfigurationError` for a savepoint manifest or a
        checkpoint id registered twice.
        """
        if stored.manifest.is_savepoint:
            raise ConfigurationError(
                f"{stored.uri} is a savepoint; savepoints are never part of the checkpoint "
                "timeline and must not be registered"
            )
        uris = stored.manifest.uris()
        with self._lock:
            self._check_open()
            if stored.checkpoint_id in self._retained:
                raise ConfigurationError(
                    f"checkpoint {stored.checkpoint_id} is already registered "
                    f"({self._retained[stored.checkpoint_id].uri})"
                )
            self._retained[stored.checkpoint_id] = stored
            self._refs[stored.checkpoint_id] = uris
            self._counts.update(uris)
            return self._subsume_locked()

    def set_retention(self, retain: int) -> Future[DeletionReport]:
        """Change how many checkpoints are retained; shrinking subsumes at once."""
        _check_retain(retain)
        with self._lock:
            self._check_open()
            self._retain = retain
            return self._subsume_locked()

    def _subsume_locked(self) -> Future[DeletionReport]:
        excess = len(self._retained) - self._retain
        if excess <= 0:
            return _DONE
        victims = [self._retained.pop(cid) for cid in sorted(self._retained)[:excess]]
        unreferenced: list[str] = []
        for stored in victims:
            for uri in self._refs.pop(stored.checkpoint_id):
                self._counts[uri] -= 1
                if self._counts[uri] == 0:
                    del self._counts[uri]
                    unreferenced.append(uri)
        doomed = sorted(u for u in set(unreferenced) if self._policy.may_delete(u))
        kept = tuple(sorted(set(unreferenced) - set(doomed)))
        future = self._executor.submit(self._delete, victims, doomed, kept)
        self._pending.add(future)
        future.add_done_callback(self._finished)
        return future

    def _finished(self, future: Future[DeletionReport]) -> None:
        with self._lock:
            self._pending.discard(future)

    # --- background deletion -----------------------------------------------------------

    def _delete(
        self, victims: list[StoredManifest], doomed: list[str], kept: tuple[str, ...]
    ) -> DeletionReport:
        failed: list[str] = []
        manifests = [s.uri for s in victims]
        manifests_deleted = self._delete_batch(manifests, failed)
        if failed:
            # Keep the objects while a subsumed manifest that references them survives:
            # a manifest must never reference missing objects. A rebuild after restart
            # subsumes the leftover manifest again.
            failed.extend(doomed)
            doomed = []
        with self._lock:
            # Re-check: an object referenced again since it was scheduled stays.
            resurrected = [u for u in doomed if self._counts.get(u, 0) > 0]
            doomed = [u for u in doomed if self._counts.get(u, 0) == 0]
        for uri in resurrected:
            _log.warning("not deleting %s: a newer checkpoint references it again", uri)
        size = sum(self._size(u) for u in doomed)
        objects_deleted = self._delete_batch(doomed, failed)
        bytes_deleted = size if objects_deleted else 0
        report = DeletionReport(
            subsumed=tuple(s.checkpoint_id for s in victims),
            manifests_deleted=manifests_deleted,
            objects_deleted=objects_deleted,
            bytes_deleted=bytes_deleted,
            kept=kept,
            failed=tuple(failed),
        )
        with self._lock:
            self._totals.update(
                manifests_deleted=report.manifests_deleted,
                objects_deleted=report.objects_deleted,
                bytes_deleted=report.bytes_deleted,
                objects_kept=len(kept),
                delete_failures=len(failed),
            )
        return report

    def _delete_batch(self, uris: list[str], failed: list[str]) -> int:
        if not uris:
            return 0
        try:
            return delete_uris(self._policy, self._resolver, uris)
        except StorageError as exc:
            _log.warning(
                "deleting %d unreferenced objects failed (%s); the orphan sweep removes them later",
                len(uris),
                exc,
            )
            failed.extend(uris)
            return 0

    def _size(self, uri: str) -> int:
        try:
            store, key = self._resolver.resolve(uri)
            return store.size(key)
        except StorageError:  # gone already, or unreachable: counted as 0 bytes
            return 0

    # --- views -------------------------------------------------------------------------

    @property
    def retain(self) -> int:
        with self._lock:
            return self._retain

    def retained(self) -> tuple[StoredManifest, ...]:
        """Retained checkpoints, oldest first."""
        with self._lock:
            return tuple(self._retained[c] for c in sorted(self._retained))

    def refcount(self, uri: str) -> int:
        """How many retained checkpoints reference ``uri``."""
        with self._lock:
            return self._counts.get(uri, 0)

    def referenced(self) -> frozenset[str]:
        """Every object some retained checkpoint references."""
        with self._lock:
            return frozenset(self._counts)

    def snapshot(self) -> RegistrySnapshot:
        with self._lock:
            return RegistrySnapshot(tuple(sorted(self._retained)), dict(self._counts))

    @property
    def pending(self) -> int:
        """Background deletions scheduled and not finished."""
        with self._lock:
            return len(self._pending)

    def stats(self) -> RegistryStats:
        with self._lock:
            t = self._totals
            return RegistryStats(
                retained=len(self._retained),
                referenced_objects=len(self._counts),
                manifests_deleted=t["manifests_deleted"],
                objects_deleted=t["objects_deleted"],
                bytes_deleted=t["bytes_deleted"],
                objects_kept=t["objects_kept"],
                delete_failures=t["delete_failures"],
                pending=len(self._pending),
            )

    # --- lifecycle -----------------------------------------------------------------------

    def drain(self, timeout: float | None = None) -> None:
        """Wait until every deletion scheduled so far has finished (re-raising a
        deletion's unexpected error, e.g. an ownership violation)."""
        with self._lock:
            futures = list(self._pending)
        for future in futures:
            future.result(timeout)

    def close(self) -> None:
        """Finish pending deletions and stop the executor (if the registry created it)."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        if self._owns_executor:
            self._executor.shutdown(wait=True)
        else:
            self.drain()

    def _check_open(self) -> None:
        if self._closed:
            raise ConfigurationError("the shared-file registry is closed")

    def __enter__(self) -> SharedFileRegistry:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


def _check_retain(retain: int) -> None:
    if retain < 1:
        raise ConfigurationError(
            f"checkpoint retention must be >= 1 (the newest checkpoint is always kept), "
            f"got {retain}"
        )
