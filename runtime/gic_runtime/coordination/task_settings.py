"""Executor-side tuning of a state task: changelog writer, uploads, materialization,
restore and the checkpoint timeout. Shipped with every
:class:`~gic_runtime.coordination.barrier.Barrier`; immutable.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from gic_runtime.changelog.uploader import UploaderSettings
from gic_runtime.changelog.writer import WriterSettings
from gic_runtime.materialization.scheduler import MaterializationSettings
from gic_runtime.state.background_restore import BackgroundRestoreSettings

__all__ = ["TaskSettings"]


@dataclass(frozen=True)
class TaskSettings:
    """Tuning of a task's changelog, uploads and materialization."""

    writer: WriterSettings = field(default_factory=WriterSettings)
    uploader: UploaderSettings = field(default_factory=UploaderSettings)
    materialization: MaterializationSettings = field(default_factory=MaterializationSettings)
    checkpoint_timeout_s: float = 300.0
    """Longest wait for a checkpoint's uploads; beyond it the checkpoint fails (the
    uploader's own retries and hedges run well inside it)."""
    restore: BackgroundRestoreSettings = field(default_factory=BackgroundRestoreSettings)
    """How buckets missing from the executor-local copy are rebuilt from storage."""
    unmap_local_state: bool = False
    """Unmap the worker's pages of the executor-local state after each task
    (:func:`~gic_runtime.state.lmdb_store.release_mapped_pages`)."""
