"""The restore beside a start (docs/architecture.md §6.2) and the first batch on the
keys it names (§6.3) on real Spark (``local[2]``).

A word count runs two batches, then starts again on an empty executor directory: with
``restore_at_start`` (and the first batch's selection off), a Spark job of its own
rebuilds every non-empty bucket before the first batch's tasks take their locks, so the
first batch finds each of them local and restores none; with neither, the first batch
restores them itself; with ``restore_select_keys`` the aggregate's first batch reads
just the counts of its words from storage, runs on them, and its buckets are restored
behind it (no restore ahead). All publish exactly the reference counts.
"""

from __future__ import annotations

import logging
import shutil
from pathlib import Path

import pyarrow as pa
import pytest
from pyspark.sql import SparkSession

from gic_runtime.errors import RestoreError
from gic_runtime.spark import GICJob, count, restore_ahead
from gic_runtime.spark.restore_ahead import RestoreAhead
from gic_runtime.spark.stage import selects_keys

from .test_savepoints import job_settings, word_count
from .test_word_count import sink_batches, words_of
from .words import reference_counts, write_text_batches

pytestmark = pytest.mark.slow


def test_a_start_restores_the_local_copies_beside_the_query_exactly_once(
    spark: SparkSession,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    monkeypatch.setattr(restore_ahead, "PROGRESS_S", 0.02)  # progress lines in a short run
    caplog.set_level(logging.INFO, logger=restore_ahead.__name__)
    root, src, out = tmp_path / "store", tmp_path / "in", tmp_path / "out"
    write_text_batches(src, 2)
    first = word_count(spark, job_settings(root, "wc", tmp_path / "local-0"), src, out)
    assert first.run(trigger="available-now").batches
    assert first.driver is not None and first.driver.restore_ahead is None  # nothing to restore

    for start, mode in ((2, "ahead"), (4, "in-batch"), (6, "select")):
        write_text_batches(src, 2, start=start)
        local = tmp_path / f"local-{start}"  # empty: a restart on new executors
        ahead = mode == "ahead"
        s = job_settings(
            root,
            "wc",
            local,
            restore_at_start=mode != "in-batch",  # skipped by a job that selects
            restore_select_keys=mode == "select",
        )
        query = word_count(spark, s, src, out)
        summary = query.run(trigger="available-now")
        batches = summary.batches
        assert [b.batch_id for b in batches] == [start, start + 1]
        driver = query.driver
        assert driver is not None
        head = batches[0]
        if ahead:
            assert isinstance(driver.restore_ahead, RestoreAhead)
            result = driver.restore_ahead.wait(60)
            assert result is not None and result.error is None, result
            assert result.tasks == driver.num_tasks
            assert result.restored > 0 and result.local_hits == 0
            progress = [
                r.getMessage() for r in caplog.records if "task(s) done after" in r.getMessage()
            ]  # the driver said how far the restore was while it ran
            assert progress, caplog.text
            assert all(f"of {driver.num_tasks} task(s) done" in line for line in progress)
            # every bucket the restore rebuilt is a local hit of the first batch
            assert head.restored == 0 and head.local_hits == result.restored, head
        elif mode == "in-batch":
            assert driver.restore_ahead is None
            assert head.restored > 0 and head.local_hits == 0 and head.selected == 0, head
        else:
            assert driver.first_batch_selects and driver.restore_ahead is None
            assert head.selected > 0 and head.restored == head.selected, head
            assert head.local_hits == 0, head
            after = batches[1]  # restored behind the first batch, to its lineage
            assert after.selected == 0 and after.restored <= head.selected, after
        shutil.rmtree(local)

    assert sink_batches(out) == dict(enumerate(reference_counts(src, 8)))


def test_a_restore_ahead_that_fails_leaves_the_batch_to_report_the_error(
    spark: SparkSession, tmp_path: Path
) -> None:
    """A snapshot the checkpoint needs is gone: the restore ahead fails quietly (logged),
    and the first batch fails with the error that names the missing file."""
    root, src, out = tmp_path / "store", tmp_path / "in", tmp_path / "out"
    write_text_batches(src, 2)
    s = job_settings(root, "wc", tmp_path / "local-0", full_snapshots=True)
    assert word_count(spark, s, src, out).run(trigger="available-now").batches
    snapshots = sorted(root.rglob("*.snap"))
    assert snapshots
    for snap in snapshots:
        snap.unlink()
    write_text_batches(src, 1, start=2)
    s = job_settings(root, "wc", tmp_path / "local-1")
    query = word_count(spark, s, src, out)
    with pytest.raises(RestoreError, match=r"snapshot .* is missing"):
        query.run(trigger="available-now")
    driver = query.driver
    assert driver is not None and driver.restore_ahead is not None
    result = driver.restore_ahead.wait(60)
    assert result is not None and result.error is not None and "missing" in result.error
    # reading the first batch's keys instead reports the same error
    s = job_settings(root, "wc", tmp_path / "local-2", restore_select_keys=True)
    query = word_count(spark, s, src, out)
    with pytest.raises(RestoreError, match=r"snapshot .* is missing"):
        query.run(trigger="available-now")
    assert query.driver is not None and query.driver.restore_ahead is None


def test_which_queries_run_their_first_batch_on_the_keys_they_name(
    spark: SparkSession, tmp_path: Path
) -> None:
    """An aggregate names its keys, also with its output discarded; a function of the
    user's does not (the stage restores before it runs)."""
    src = tmp_path / "in"
    write_text_batches(src, 1)
    job = GICJob(spark, job_settings(tmp_path / "store", "wc", tmp_path / "local"))
    keyed = job.keyed(words_of(spark, src), key="word")
    assert selects_keys(keyed.aggregate(count=count()).discard().processor)
    assert selects_keys(keyed.aggregate(count=count()).to_parquet(str(tmp_path / "o")).processor)
    schema = pa.schema([("word", pa.string())])
    batches = keyed.process_batches(lambda table, states: None, schema)
    assert not selects_keys(batches.discard().processor)
