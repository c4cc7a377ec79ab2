"""Background jobs of the in-process :class:`~gic_runtime.materialization.Materializer`.

A job snapshots one or more buckets one after the other on the materializer's executor
and queues one :class:`Outcome` per bucket for the task thread, which applies them in
``Materializer.poll``. Invariant: every bucket of a job gets exactly one outcome (a
snapshot, an error, or *cancelled* when the job never ran), so a bucket is never stuck
in flight; every view of a job is closed once the job ended or was cancelled.

Thread-safety: see :class:`Job`.
"""

from __future__ import annotations

import queue
from concurrent.futures import Future
from dataclasses import dataclass, field

from gic_runtime.errors import MaterializationError
from gic_runtime.handles import SnapshotHandle
from gic_runtime.state.backend import MaterializationView
from gic_runtime.state.snapshot import upload_snapshot
from gic_runtime.storage.uri import StoreResolver


@dataclass(frozen=True, slots=True)
class Outcome:
    """What became of one bucket of a job (queued for the task thread)."""

    bucket: int
    generation: int
    handle: SnapshotHandle | None
    error: BaseException | None
    cancelled: bool = False


@dataclass(slots=True)
class Job:
    """The buckets of one background job and which of them were reported.

    ``run`` and ``report`` run on the executor thread running the job; ``finished`` (the
    future's done-callback) runs on that thread after the job, on the thread that adds
    it when the job is already done, or on whichever thread cancels the job before it
    ran; the future orders each of these after ``run``, so ``reported`` is never touched
    by two threads at once. A job
    cancelled before it ran closes its views (releasing e.g. LMDB read transactions) and
    queues cancelled outcomes so the task thread releases the buckets.
    """

    done: queue.SimpleQueue[Outcome]
    views: list[MaterializationView]
    resolver: StoreResolver
    uris: list[str]
    """A fresh snapshot name per view."""
    compress: bool
    reported: set[int] = field(default_factory=set)

    def run(self) -> None:
        """Snapshot the views one after the other (executor thread); each outcome is
        queued as soon as it is known. Raises the first failure once all are done."""
        first: Exception | None = None
        for index, (view, uri) in enumerate(zip(self.views, self.uris, strict=True)):
            try:
                with view.view as items:
                    handle = upload_snapshot(
                        self.resolver,
                        uri,
                        items,
                        bucket=view.bucket,
                        seq=view.seq,
                        compress=self.compress,
                    )
            except Exception as exc:
                self.report(index, None, exc)
                first = first or exc
            else:
                self.report(index, handle, None)
        if first is not None:
            raise first

    def report(
        self, index: int, handle: SnapshotHandle | None, error: BaseException | None
    ) -> None:
        view = self.views[index]
        self.reported.add(index)
        self.done.put(Outcome(view.bucket, view.generation, handle, error))

    def finished(self, future: Future[None]) -> None:
        cancelled = future.cancelled()
        error = None if cancelled else future.exception()
        for index, view in enumerate(self.views):
            view.view.close()  # idempotent
            if index in self.reported:
                continue
            self.reported.add(index)
            if cancelled:
                self.done.put(Outcome(view.bucket, view.generation, None, None, cancelled=True))
            else:
                lost = error or MaterializationError("materialization job ended early")
                self.done.put(Outcome(view.bucket, view.generation, None, lost))
