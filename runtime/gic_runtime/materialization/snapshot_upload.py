"""THE way a bucket's state becomes a snapshot object of a job attempt.

Both snapshot paths of the executor use :func:`upload_view`: the background jobs of
:mod:`~gic_runtime.materialization.pool` and the self-contained checkpoint of the task
core (:mod:`~gic_runtime.executor.core`), which snapshots every non-empty bucket before
it acks.

Invariants: the object gets a fresh name under the attempt's snapshot directory
(:func:`~gic_runtime.layout.new_snapshot_uri`) and is written create-if-absent, so an
existing object is never overwritten (a name collision is an error); the file is
spooled to an unnamed file on the executor's local disk and streamed from there, so a
worker's memory holds one frame of a snapshot whatever the bucket's size; the returned
handle describes exactly the bytes written, for the bucket and seq of the view. The
view's read transaction is closed when the upload ends, whatever happens.

Thread-safety: stateless; each call reads its own view (which belongs to one thread at
a time).
"""

from __future__ import annotations

from pathlib import Path

from gic_runtime.handles import SnapshotHandle
from gic_runtime.layout import new_snapshot_uri
from gic_runtime.state.backend import MaterializationView
from gic_runtime.state.snapshot import upload_snapshot
from gic_runtime.storage.uri import StoreResolver

__all__ = ["upload_view"]


def upload_view(
    resolver: StoreResolver,
    view: MaterializationView,
    *,
    root: str,
    job_id: str,
    epoch: int,
    compress: bool,
    spool_dir: Path,
) -> SnapshotHandle:
    """Upload the state ``view`` holds as a new snapshot of attempt ``epoch`` of
    ``job_id`` under ``root`` and return its handle (see the module docstring); the file
    is spooled in ``spool_dir`` on its way (an executor's local directory of the job)."""
    uri = new_snapshot_uri(root, job_id, view.bucket, epoch=epoch)
    with view.view as items:
        return upload_snapshot(
            resolver,
            uri,
            items,
            bucket=view.bucket,
            seq=view.seq,
            compress=compress,
            spool_dir=spool_dir,
        )
