"""Batch reports for tests that consume them (run summaries, benchmark records)."""

from __future__ import annotations

import dataclasses
from typing import Any

from gic_runtime.spark import BatchReport

_BASE = BatchReport(
    batch_id=0,
    rows_in=10,
    rows_out=10,
    tasks=2,
    batch_ms=5.0,
    commit_ms=2.0,
    bytes_uploaded=300,
    changelog_bytes=100,
    snapshot_bytes=200,
    local_hits=2,
    restored=0,
    empty=0,
    materializations_adopted=0,
    materializations_started=0,
    self_contained=False,
    manifest_uri="file:///m",
    published_rows=10,
)


def batch_report(**changes: Any) -> BatchReport:
    """A plausible report of one committed batch, with ``changes`` applied."""
    return dataclasses.replace(_BASE, **changes)
