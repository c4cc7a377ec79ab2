"""Background materialization of bucket snapshots.

The rules: settings, due times and growth pressure (:mod:`~gic_runtime.materialization.scheduler`,
:mod:`~gic_runtime.materialization.growth`). The executor-local machinery that applies
them, shared by the worker processes of an executor: what is due, the in-flight markers
and adoption (:mod:`~gic_runtime.materialization.background`), the pool of background snapshot
jobs (:mod:`~gic_runtime.materialization.pool`), the per-bucket record of the newest
snapshot (:mod:`~gic_runtime.materialization.snapshot_record`), and the one way a bucket's view is
uploaded as a snapshot (:mod:`~gic_runtime.materialization.snapshot_upload`).
"""

from gic_runtime.materialization.scheduler import Due, MaterializationSettings, Newest, due

__all__ = ["Due", "MaterializationSettings", "Newest", "due"]
