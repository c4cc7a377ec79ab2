"""Collect, while the job runs, what failed task attempts left behind.

A task attempt that dies with its executor (a spot node reclaimed, an OOM kill) leaves
the changelog segments and snapshots it uploaded; Spark reruns the task elsewhere and
no manifest ever names them. The start-up sweep (:mod:`gic_runtime.checkpoint.sweep`)
removes them only at the next driver start, so a job that runs for weeks on executors
that come and go would collect them without bound. :class:`LiveSweeper` removes them
while the driver runs, between batches (docs/architecture.md §13.9).

Why it is safe without stopping anything (the orphan rule, for a live
attempt):

* **Changelog segments.** A manifest names only segments its own batch's tasks uploaded
  and segments an earlier manifest already named. The driver sweeps after manifest N
  is written and before barrier N+1 exists, holding the batch lock, so every segment
  not named by a retained manifest at that moment was uploaded by an attempt whose
  batch is over (or by a zombie attempt of one) and can never be named again.
* **Snapshots.** A background snapshot is named by a manifest only once a later task
  adopts it, which can happen after any number of batches. Adoption refuses records
  older than :data:`~gic_runtime.materialization.snapshot_record.ADOPTION_MAX_AGE_S` (checked
  on the executor against the executor's own clock, so no clocks are compared), and
  the sweeper deletes an unreferenced snapshot only after it has seen it unreferenced
  for :data:`SNAPSHOT_GRACE_S` by its own monotonic clock, which is longer. A snapshot
  deleted here can no longer be adopted.

Only ``changelog/`` and ``snapshots/`` are listed, only objects the job owns are deleted
(the ownership policy protects restore sources and savepoints), and an unreadable
retained manifest aborts the sweep before anything is deleted, as do more than
:data:`~gic_runtime.checkpoint.sweep.MAX_SWEPT_OBJECTS` objects in those directories
(:class:`~gic_runtime.errors.TooManyObjectsError`, after at most that many were listed).

A sweeper given its driver's ``epoch`` deletes only segments under
``changelog/<epoch>/``: the driver's own batches uploaded those. A driver that was
superseded but does not know it yet (a paused process) may still sweep once; its view
of the retained checkpoints is stale, and without this rule it would delete segments
the newer launch just uploaded. Older epochs' orphans are the start-up sweep's.

Thread-safety: one sweeper per driver attempt, called from the batch thread only.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Final

from gic_runtime.checkpoint.manifest import StoredManifest
from gic_runtime.checkpoint.ownership import OwnershipPolicy
from gic_runtime.checkpoint.sweep import SweepResult, sweep_orphans
from gic_runtime.layout import job_dir
from gic_runtime.materialization.snapshot_record import ADOPTION_MAX_AGE_S
from gic_runtime.storage.uri import StoreResolver, join

__all__ = ["LIVE_SWEPT_DIRS", "SNAPSHOT_GRACE_S", "LiveSweeper"]

SNAPSHOT_GRACE_S: Final = 2 * ADOPTION_MAX_AGE_S
"""How long (seconds, driver's monotonic clock) the sweeper sees a snapshot unreferenced
before deleting it: twice the adoption limit, a margin for clocks running at different
rates and for a batch that adopts right at the limit."""
LIVE_SWEPT_DIRS: Final = ("changelog", "snapshots")


class LiveSweeper:
    """Periodic sweep of a running job's orphans (see the module docstring).

    Invariants: an unreferenced snapshot is deleted only after this sweeper saw it
    unreferenced, continuously, for ``snapshot_grace_s``; a snapshot that became
    referenced or vanished is forgotten. With ``epoch`` set, no segment outside
    ``changelog/<epoch>/`` is deleted.
    """

    def __init__(
        self,
        resolver: StoreResolver,
        root: str,
        job_id: str,
        *,
        interval_s: float,
        snapshot_grace_s: float = SNAPSHOT_GRACE_S,
        clock: Callable[[], float] = time.monotonic,
        epoch: int | None = None,
    ) -> None:
        if interval_s <= 0 or snapshot_grace_s < ADOPTION_MAX_AGE_S:
            raise ValueError(
                "need interval_s > 0 and snapshot_grace_s >= ADOPTION_MAX_AGE_S, got "
                f"{interval_s} and {snapshot_grace_s}"
            )
        self._resolver = resolver
        self._root = root
        self._job_id = job_id
        self._interval_s = interval_s
        self._grace_s = snapshot_grace_s
        self._clock = clock
        self._epoch = epoch
        self._own_segments = (
            None if epoch is None else join(job_dir(root, job_id), "changelog", str(epoch)) + "/"
        )
        self._last: float | None = None
        self._first_seen: dict[str, float] = {}

    def due(self) -> bool:
        """Whether ``interval_s`` has passed since the last sweep (the first is due one
        interval after the sweeper was created, by its first call)."""
        now = self._clock()
        if self._last is None:
            self._last = now
            return False
        return now - self._last >= self._interval_s

    def sweep(self, retained: Sequence[StoredManifest], policy: OwnershipPolicy) -> SweepResult:
        """Delete the job's orphans (call between batches, under the batch lock)."""
        now = self._clock()
        self._last = now
        unreferenced: set[str] = set()

        def defer(uri: str, subdir: str) -> bool:
            if subdir == "changelog":
                own = self._own_segments
                return own is not None and not uri.startswith(own)
            if subdir != "snapshots":
                return False
            unreferenced.add(uri)
            first = self._first_seen.setdefault(uri, now)
            return now - first < self._grace_s

        result = sweep_orphans(
            self._resolver,
            self._root,
            self._job_id,
            retained,
            policy=policy,
            subdirs=LIVE_SWEPT_DIRS,
            defer=defer,
            epoch=self._epoch,
        )
        self._first_seen = {
            u: t
            for u, t in self._first_seen.items()
            if u in unreferenced and now - t < self._grace_s
        }
        return result
