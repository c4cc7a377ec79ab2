"""Claim and no-claim restores of a word count on real Spark (docs/architecture.md I1, I6).

Job ``a`` counts the first two input files; two native savepoints are taken from its
last checkpoint. Job ``b`` restores one savepoint without claiming it: its first
checkpoint is self-contained and releases the source, which is then deleted without
breaking ``b``. Job ``c`` claims ``a``'s checkpoint: once ``c``'s own checkpoints
subsume the claimed one, ``c`` deletes the claimed files, while the savepoint taken
from the same checkpoint keeps all of its files. Every check reads storage.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from gic_runtime.checkpoint.catalog import load_retained, read_manifest
from gic_runtime.checkpoint.manifest import RestoreMode
from gic_runtime.checkpoint.ownership import Owner, OwnershipPolicy
from gic_runtime.layout import manifest_uri
from gic_runtime.savepoint.native import load_savepoint, write_native_savepoint
from gic_runtime.status import read_status
from gic_runtime.storage.uri import StoreResolver

from .test_savepoints import job_settings, listing, local_path, state_counts, totals, word_count
from .test_word_count import sink_batches
from .words import reference_counts, write_text_batches


@dataclass(frozen=True)
class Source:
    """Job ``a`` after two batches (checkpoints 0 and 1), with savepoints ``for-b`` and
    ``kept`` of checkpoint 1, and two more input files waiting in ``src``."""

    base: Path
    root: Path
    src: Path

    def savepoint(self, name: str) -> Path:
        return self.root / "savepoints" / name


@pytest.fixture(scope="module")
def source(spark: SparkSession, tmp_path_factory: pytest.TempPathFactory) -> Source:
    base = tmp_path_factory.mktemp("restore")
    root, src = base / "store", base / "in"
    write_text_batches(src, 2)
    s = job_settings(root, "a", base / "local")
    summary = word_count(spark, s, src, base / "out-a").run(trigger="available-now")
    assert [b.batch_id for b in summary.batches] == [0, 1]
    resolver = StoreResolver()
    latest = load_retained(resolver, s.storage, "a")[-1]
    for name in ("for-b", "kept"):
        write_native_savepoint(resolver, latest, (root / "savepoints" / name).as_uri())
    write_text_batches(src, 2, start=2)
    return Source(base, root, src)


def test_no_claim_restore_releases_the_source_after_the_first_checkpoint(
    spark: SparkSession, source: Source, tmp_path: Path
) -> None:
    resolver = StoreResolver()
    sp = source.savepoint("for-b")
    sp_uri = sp.as_uri()
    untouched = listing(sp)
    out = tmp_path / "out"
    s = job_settings(
        source.root,
        "b",
        tmp_path / "local",
        restore_source=str(sp),
        restore_mode="no-claim",
        max_batches=1,
    )
    first = word_count(spark, s, source.src, out).run(trigger="available-now")
    assert not first.start.own
    assert first.start.resumed_after == 1
    assert first.start.restored_from == sp_uri + "/_savepoint.manifest"
    assert [b.batch_id for b in first.batches] == [2]
    assert first.batches[0].self_contained

    # The first checkpoint references nothing of the source and says it released it.
    (stored,) = load_retained(resolver, s.storage, "b")
    lineage = stored.manifest.restored_from
    assert lineage is not None
    assert (lineage.mode, lineage.source_checkpoint_id, lineage.released) == (
        RestoreMode.NO_CLAIM,
        1,
        True,
    )
    source_manifest = load_savepoint(resolver, sp_uri).manifest
    policy = OwnershipPolicy.for_job(s.storage, "b", restore=lineage, source=source_manifest)
    assert {policy.classify(u) for u in source_manifest.uris()} == {Owner.NO_CLAIM_SOURCE}
    assert policy.source_references(stored.manifest) == frozenset()
    assert not any(u.startswith(sp_uri + "/") for u in stored.manifest.uris())
    assert {policy.classify(u) for u in stored.manifest.uris()} == {Owner.JOB}
    status = read_status(resolver, s.storage, "b")
    assert status is not None and status.restored_from is not None
    assert status.restored_from.mode is RestoreMode.NO_CLAIM
    assert status.restored_from.released
    assert status.restored_from.checkpoint_id == 1
    # The job never touched the source.
    assert listing(sp) == untouched

    # Released: the user deletes the savepoint; b resumes its own timeline regardless
    # (the restore settings stay as they were, as a redeploy would leave them).
    shutil.rmtree(sp)
    second = word_count(spark, s.model_copy(update={"max_batches": None}), source.src, out).run(
        trigger="available-now"
    )
    assert second.start.own
    assert second.start.resumed_after == 2
    assert [b.batch_id for b in second.batches] == [3]
    latest = load_retained(resolver, s.storage, "b")[-1]
    assert latest.manifest.restored_from is not None and latest.manifest.restored_from.released
    # Counts carried over from a: exact over every file a and b processed.
    reference = reference_counts(source.src, 4)
    assert sink_batches(out) == {2: reference[2], 3: reference[3]}
    assert state_counts(resolver, latest.manifest) == totals(source.src, 4)


def test_claim_restore_deletes_claimed_files_once_subsumed_but_never_savepoints(
    spark: SparkSession, source: Source, tmp_path: Path
) -> None:
    resolver = StoreResolver()
    root = source.root.as_uri()
    claimed_uri = manifest_uri(root, "a", 1)
    claimed = read_manifest(resolver, claimed_uri)
    kept = source.savepoint("kept")
    kept_files = listing(kept)
    job_a = source.root / "jobs" / "a"
    a_before = set(listing(job_a))
    out = tmp_path / "out"
    s = job_settings(
        source.root,
        "c",
        tmp_path / "local",
        restore_source=claimed_uri,
        restore_mode="claim",
        retained_checkpoints=1,
        max_batches=1,
    )
    first = word_count(spark, s, source.src, out).run(trigger="available-now")
    assert first.start.restored_from == claimed_uri
    assert [b.batch_id for b in first.batches] == [2]

    # c's first checkpoint builds on the claimed files (incremental), owned by c now.
    (stored,) = load_retained(resolver, root, "c")
    lineage = stored.manifest.restored_from
    assert lineage is not None
    assert (lineage.mode, lineage.source_uri, lineage.released) == (
        RestoreMode.CLAIM,
        claimed_uri,
        False,
    )
    policy = OwnershipPolicy.for_job(root, "c", restore=lineage, source=claimed)
    assert {policy.classify(u) for u in claimed.uris()} == {Owner.CLAIMED_SOURCE}
    assert policy.source_references(stored.manifest) == claimed.uris()
    assert all(local_path(u).is_file() for u in claimed.uris())
    savepoint_files = load_savepoint(resolver, kept.as_uri()).manifest.uris()
    assert {policy.classify(u) for u in savepoint_files} == {Owner.SAVEPOINT}

    # Self-contained checkpoints from now on: the next one subsumes the claimed lineage.
    second = word_count(
        spark, s.model_copy(update={"max_batches": None, "full_snapshots": True}), source.src, out
    ).run(trigger="available-now")
    assert second.start.own and second.start.resumed_after == 2
    assert [b.batch_id for b in second.batches] == [3]
    (latest,) = load_retained(resolver, root, "c")
    assert latest.manifest.restored_from is not None
    assert latest.manifest.restored_from.released
    assert policy.source_references(latest.manifest) == frozenset()

    # Nothing references the claimed files any more: c deleted exactly those (the
    # claimed manifest itself stays, so the lineage keeps naming something).
    assert not any(local_path(u).exists() for u in claimed.uris())
    assert local_path(claimed_uri).is_file()
    gone = a_before - set(listing(job_a))
    assert {(job_a / g).as_uri() for g in gone} == set(claimed.uris())
    # The savepoint of the same checkpoint lost nothing.
    assert listing(kept) == kept_files
    assert all(local_path(u).is_file() for u in savepoint_files)

    reference = reference_counts(source.src, 4)
    assert sink_batches(out) == {2: reference[2], 3: reference[3]}
    assert state_counts(resolver, latest.manifest) == totals(source.src, 4)
