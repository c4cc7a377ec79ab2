"""Executor side of a checkpoint: one task's keyed state and what makes it durable.

A :class:`StateTask` wires a :class:`~gic_runtime.state.backend.KeyedStateBackend` to a
:class:`~gic_runtime.changelog.writer.BatchingChangelogWriter` (uploads through a
:class:`~gic_runtime.changelog.uploader.HedgingUploader` into the job's ``changelog/``
directory under the attempt's fencing epoch) and a
:class:`~gic_runtime.materialization.scheduler.Materializer`.

Invariants:

* :meth:`checkpoint` returns bucket states that reference only objects that are durable
  when it returns (DESIGN §3.2).
* With ``self_contained=True`` every non-empty bucket is first materialized afresh into
  the job's own directory, so the returned states reference nothing outside it (the
  first checkpoint after a no-claim restore, DESIGN §3.6).
* Materialization never blocks the caller beyond taking a consistent view of a bucket.

Thread-safety: one task thread calls every method.
"""

from __future__ import annotations

from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeoutError
from dataclasses import dataclass, field

from gic_runtime.changelog.uploader import HedgingUploader, UploaderSettings
from gic_runtime.changelog.writer import BatchingChangelogWriter, WriterSettings
from gic_runtime.checkpoint.manifest import Manifest
from gic_runtime.clock import Clock, SystemClock
from gic_runtime.errors import UploadError
from gic_runtime.handles import BucketState, SnapshotHandle
from gic_runtime.layout import new_segment_uri, new_snapshot_uri
from gic_runtime.materialization.scheduler import MaterializationSettings, Materializer
from gic_runtime.state.backend import KeyedStateBackend, RestoreSummary
from gic_runtime.state.snapshot import upload_snapshot
from gic_runtime.state.stores import KVStore
from gic_runtime.storage.uri import StoreResolver


@dataclass(frozen=True)
class TaskSettings:
    """Tuning of a task's changelog, uploads and materialization."""

    writer: WriterSettings = field(default_factory=WriterSettings)
    uploader: UploaderSettings = field(default_factory=UploaderSettings)
    materialization: MaterializationSettings = field(default_factory=MaterializationSettings)
    checkpoint_timeout_s: float = 300.0
    """Longest wait for a checkpoint's uploads; beyond it the checkpoint fails (the
    uploader's own retries and hedges run well inside it)."""


class StateTask:
    """Keyed state of ``bucket_range`` for one attempt (``epoch``) of job ``job_id``.

    ``clock`` drives materialization scheduling; ``upload_clock`` drives upload hedging,
    timeouts and retry delays (the real clock by default, so a test may move
    materialization with a fake clock while uploads keep real deadlines).
    """

    def __init__(
        self,
        *,
        root: str,
        job_id: str,
        epoch: int,
        bucket_range: range,
        num_buckets: int,
        store: KVStore,
        resolver: StoreResolver,
        clock: Clock | None = None,
        upload_clock: Clock | None = None,
        settings: TaskSettings | None = None,
    ) -> None:
        self.root = root
        self.job_id = job_id
        self.settings = s = settings or TaskSettings()
        self._resolver = resolver
        self.uploader = HedgingUploader(
            resolver,
            lambda: new_segment_uri(root, job_id, epoch),
            s.uploader,
            clock=upload_clock or SystemClock(),
        )
        self.writer = BatchingChangelogWriter(bucket_range, self.uploader, s.writer)
        self.backend = KeyedStateBackend(bucket_range, num_buckets, store, self.writer)
        self.materializer = Materializer(
            self.backend,
            resolver,
            root,
            job_id,
            clock=clock or SystemClock(),
            settings=s.materialization,
        )

    def restore(self, manifest: Manifest | None) -> RestoreSummary:
        """Bring the buckets to the state ``manifest`` records (empty when ``None``)."""
        states: Mapping[int, BucketState] = {}
        if manifest is not None:
            states = {b: s for b, s in manifest.buckets.items() if b in self.backend.bucket_range}
        return self.backend.restore(states, self._resolver)

    def poll(self) -> list[SnapshotHandle]:
        """Apply finished materializations and start due ones (cheap; call often)."""
        return self.materializer.poll()

    def checkpoint(self, *, self_contained: bool = False) -> dict[int, BucketState]:
        """Make every change so far durable and return each bucket's state."""
        self.poll()
        if self_contained:
            self._materialize_all()
        future = self.backend.checkpoint()
        timeout = self.settings.checkpoint_timeout_s
        try:
            states = future.result(timeout=timeout)
        except FutureTimeoutError as exc:
            raise UploadError(
                f"checkpoint of job {self.job_id} buckets [{self.backend.bucket_range.start}, "
                f"{self.backend.bucket_range.stop}) did not become durable within {timeout} s "
                "(TaskSettings.checkpoint_timeout_s); check the storage endpoint's health"
            ) from exc
        self.backend.mark_persisted(states)
        return states

    def notify_checkpoint_complete(self, states: Mapping[int, BucketState]) -> None:
        """The checkpoint holding ``states`` completed: changelog below its snapshots may
        be forgotten by the writer (files are the registry's business)."""
        mine = {b: s for b, s in states.items() if b in self.backend.bucket_range}
        self.backend.notify_checkpoint_complete(mine)

    def close(self, *, wait: bool = True) -> None:
        """Stop background work; ``wait=False`` abandons it (what a crash looks like)."""
        self.materializer.close(wait=wait)
        if wait:
            self.writer.close()
        self.uploader.close()

    def _materialize_all(self) -> None:
        """Snapshot every non-empty bucket now, in parallel, into the job's directory."""
        backend = self.backend
        views = [
            backend.materialization_view(b) for b in backend.bucket_range if backend.seq(b) > 0
        ]
        if not views:
            return
        compress = self.settings.materialization.compress

        def upload(view_bucket: int) -> SnapshotHandle:
            view = by_bucket[view_bucket]
            with view.view as items:
                return upload_snapshot(
                    self._resolver,
                    new_snapshot_uri(self.root, self.job_id, view.bucket),
                    items,
                    bucket=view.bucket,
                    seq=view.seq,
                    compress=compress,
                )

        by_bucket = {v.bucket: v for v in views}
        with ThreadPoolExecutor(min(8, len(views)), thread_name_prefix="gic-full") as pool:
            handles = list(pool.map(upload, sorted(by_bucket)))
        for handle in handles:
            backend.on_materialized(handle.bucket, handle)
