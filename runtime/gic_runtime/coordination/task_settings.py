"""Executor-side tuning of a state task: changelog writer, uploads, materialization,
restore and the checkpoint timeout. Shipped with every
:class:`~gic_runtime.coordination.barrier.Barrier`; immutable.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Final

from gic_runtime.changelog.uploader import UploaderSettings
from gic_runtime.changelog.writer import WriterSettings
from gic_runtime.materialization.scheduler import MaterializationSettings
from gic_runtime.state.background_restore import BackgroundRestoreSettings

__all__ = ["DEFAULT_MAPPED_LIMIT", "TaskSettings"]

DEFAULT_MAPPED_LIMIT: Final = 256 * 1024 * 1024
"""Default of ``local_state_mapped_limit``: a few batches' worth of pages a worker
touches at gigabytes of state, far below the state itself (docs/architecture.md §13.3)."""


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
    local_state_mapped_limit: int = DEFAULT_MAPPED_LIMIT
    """After a task, unmap the worker's pages of the executor-local state once its
    resident file-backed memory has grown by more than this many bytes since it last did
    (:func:`~gic_runtime.state.lmdb_store.bound_mapped_pages`); 0: never."""
