"""A run's summary keeps the latest batch reports only, and counts them all."""

from __future__ import annotations

import dataclasses

from tests.support.reports import batch_report

from gic_runtime.spark.query_run import REPORTS_KEPT, RecentReports, RunSummary
from gic_runtime.spark.reports import StartInfo

REPORT = batch_report()
START = StartInfo(
    epoch=1,
    resumed_after=41,
    own=True,
    restored_from=None,
    sweep=None,
    republished=0,
    spark_checkpoint_dir="/tmp/x",
)


def test_a_long_run_keeps_its_latest_reports_and_counts_every_batch() -> None:
    summary = RunSummary("job", START, RecentReports(keep=3))
    assert summary.last_checkpoint == 41  # nothing run: where the run resumed
    for i in range(42, 50):
        summary.reports.add(dataclasses.replace(REPORT, batch_id=i))
    assert [b.batch_id for b in summary.batches] == [47, 48, 49]
    assert summary.batches_run == 8
    assert summary.last_checkpoint == 49


def test_the_default_bound() -> None:
    reports = RecentReports()
    for i in range(REPORTS_KEPT + 5):
        reports.add(dataclasses.replace(REPORT, batch_id=i))
    assert len(reports.recent) == REPORTS_KEPT
    assert reports.recent[0].batch_id == 5
    assert reports.count == REPORTS_KEPT + 5
