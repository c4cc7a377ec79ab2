"""A clean stop leaves nothing unreferenced: every segment and snapshot under the job's
directory is named by a retained checkpoint (docs/architecture.md I5)."""

from __future__ import annotations

from pathlib import Path

from pyspark.sql import SparkSession

from gic_runtime.checkpoint.catalog import load_retained
from gic_runtime.layout import job_dir
from gic_runtime.storage.uri import StoreResolver, join

from .test_word_count import run_wc, settings
from .words import write_text_batches

DATA_DIRS = ("changelog", "snapshots", "checkpoints")


def unreferenced(root: str, job_id: str) -> tuple[set[str], int]:
    """Objects of the job's data directories no retained manifest names (a retained
    manifest file names itself), and how many objects were listed."""
    resolver = StoreResolver()
    retained = load_retained(resolver, root, job_id)
    referenced = {s.uri for s in retained}
    for stored in retained:
        referenced |= stored.manifest.uris()
    listed: set[str] = set()
    for sub in DATA_DIRS:
        store, prefix = resolver.resolve(join(job_dir(root, job_id), sub))
        listed |= {store.uri_for(info.key) for info in store.list(prefix.rstrip("/") + "/")}
    return listed - referenced, len(listed)


def test_a_clean_stop_leaves_only_what_retained_checkpoints_reference(
    spark: SparkSession, tmp_path: Path
) -> None:
    src, out = tmp_path / "in", tmp_path / "out"
    write_text_batches(src, 5)
    # Every bucket that changed is due after each batch: the last batch's background
    # snapshots are never adopted by a later batch of this launch.
    s = settings(tmp_path, materialization_max_sections=1, num_tasks=2)
    summary = run_wc(spark, s, src, out)
    assert len(summary.batches) == 5
    assert summary.batches[-1].materializations_started > 0
    left, listed = unreferenced(s.storage, s.job_id)
    assert listed > 0
    assert left == set()

    # The next launch resumes from what the stop kept and stops clean again.
    write_text_batches(src, 2, start=5)
    again = run_wc(spark, s, src, out)
    assert again.start.resumed_after == 4
    assert [b.batch_id for b in again.batches] == [5, 6]
    assert unreferenced(s.storage, s.job_id)[0] == set()
