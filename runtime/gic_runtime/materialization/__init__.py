"""Background materialization of bucket snapshots: settings, schedule and growth rules
(the executor-local machinery that runs them is
:mod:`~gic_runtime.coordination.local_materialization`)."""

from gic_runtime.materialization.scheduler import Due, MaterializationSettings, Newest, due

__all__ = ["Due", "MaterializationSettings", "Newest", "due"]
