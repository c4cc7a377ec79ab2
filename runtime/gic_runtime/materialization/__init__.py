"""Periodic, spread-out materialization of bucket snapshots (off the critical path)."""

from gic_runtime.materialization.scheduler import (
    MaterializationSettings,
    MaterializationStats,
    Materializer,
)

__all__ = ["MaterializationSettings", "MaterializationStats", "Materializer"]
