"""Bad restore sources on real Spark: a clear error before anything is written, and the
source left exactly as it was (docs/architecture.md I1, I8). Also the supported cross-format
case: a canonical savepoint imported into a job with another bucket count.

Job ``src`` counts two input files; while it runs, a native savepoint is requested,
then a terminal canonical one stops it (both through the control channel). Each test
starts a new job from a damaged, missing or mismatched source and checks the error,
that the new job's directory holds no checkpoint (only its fencing epoch marker and the
status record saying why it failed) and that no file of the source changed or went away.
"""

from __future__ import annotations

import itertools
import re
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession

from gic_runtime.checkpoint.catalog import list_checkpoints, load_retained
from gic_runtime.checkpoint.manifest import RestoreMode
from gic_runtime.control import ControlChannel
from gic_runtime.errors import CorruptFileError, GICError, RestoreError
from gic_runtime.layout import SAVEPOINT_MANIFEST
from gic_runtime.savepoint.canonical import INDEX_NAME
from gic_runtime.status import JobState, failure_reason, read_status
from gic_runtime.storage.uri import StoreResolver

from .test_savepoints import (
    WAIT_S,
    Background,
    job_settings,
    listing,
    state_counts,
    totals,
    wait_for_checkpoint,
    word_count,
)
from .test_word_count import sink_batches
from .words import reference_counts, write_text_batches

_JOB_IDS = itertools.count(1)


@dataclass(frozen=True)
class Sources:
    """Storage of job ``src`` after checkpoints 0 and 1, with a native (``native``) and
    a canonical (``canonical``) savepoint of checkpoint 1; ``src`` holds two more files."""

    base: Path
    root: Path
    src: Path

    @property
    def native(self) -> Path:
        return self.root / "savepoints" / "native"

    @property
    def canonical(self) -> Path:
        return self.root / "savepoints" / "canonical"


@pytest.fixture(scope="module")
def sources(spark: SparkSession, tmp_path_factory: pytest.TempPathFactory) -> Sources:
    base = tmp_path_factory.mktemp("bad-input")
    root, src = base / "store", base / "in"
    write_text_batches(src, 2)
    s = job_settings(root, "src", base / "local")
    resolver = StoreResolver()
    control = ControlChannel(resolver, s.storage, s.job_id)
    job = Background(word_count(spark, s, src, base / "out"))
    try:
        wait_for_checkpoint(resolver, s, 1, job)
        for name, kind, fmt in (
            ("native", "intermediate", "native"),
            ("canonical", "stop", "canonical"),
        ):
            control.request_savepoint(
                kind, fmt, target=str(root / "savepoints" / name), request_id=name
            )
            outcome = control.wait(name, WAIT_S, poll_s=0.05)
            assert outcome.succeeded and outcome.checkpoint_id == 1, outcome
        job.join(WAIT_S)
    finally:
        if job.thread.is_alive():
            control.request_stop(request_id="cleanup")
            job.thread.join(WAIT_S)
    write_text_batches(src, 2, start=2)
    return Sources(base, root, src)


def refused(
    spark: SparkSession,
    sources: Sources,
    tmp_path: Path,
    source: Path | str,
    expected: type[GICError],
    *,
    match: str,
    **overrides: Any,
) -> GICError:
    """Start a new job from ``source``; it must fail with ``expected`` (message matching
    ``match``) without writing any checkpoint, changelog or output, and leave every file
    under the storage root as it was. The new job's directory may hold only its epoch
    marker and its status record saying why it failed (whether the error surfaced while
    the driver started or in the first batch)."""
    job_id = f"new-{next(_JOB_IDS)}"
    before = listing(sources.root)
    s = job_settings(
        sources.root, job_id, tmp_path / "local", restore_source=str(source), **overrides
    )
    out = tmp_path / "out"
    with pytest.raises(expected, match=match) as info:
        word_count(spark, s, sources.src, out).run(trigger="available-now")
    resolver = StoreResolver()
    assert list_checkpoints(resolver, s.storage, job_id) == ()
    after = listing(sources.root)
    epoch = f"jobs/{job_id}/epochs/epoch-000000000001"
    # the claim (its marker and its start record) and the report of the failure
    allowed = {epoch, f"{epoch}.start", f"jobs/{job_id}/status.json"}
    status = read_status(resolver, s.storage, job_id)
    assert status is not None and status.state is JobState.FAILED and status.epoch == 1
    assert status.error is not None and re.search(match, status.error)
    assert status.failure is not None
    assert status.failure.reason == failure_reason(info.value).value
    assert re.search(match, status.failure.message)
    assert set(after) - set(before) == allowed
    assert {k: after[k] for k in before} == before
    assert not out.exists()
    return info.value


def stray_files(directory: Path) -> Path:
    """A directory holding files that make no savepoint."""
    (directory / "files").mkdir(parents=True)
    (directory / "notes.txt").write_text("not a savepoint\n")
    (directory / "files" / "blob.bin").write_bytes(bytes(range(256)))
    return directory


@pytest.mark.parametrize("kind", ["missing", "stray-files"])
def test_missing_or_unrecognizable_source_names_the_path(
    spark: SparkSession, sources: Sources, tmp_path: Path, kind: str
) -> None:
    target = sources.root / "savepoints" / f"{kind}-{tmp_path.name}"
    if kind == "stray-files":
        stray_files(target)
    refused(spark, sources, tmp_path, target, GICError, match=re.escape(target.as_uri()))


@pytest.mark.parametrize("kind", ["missing", "stray-files"])
def test_missing_or_unrecognizable_source_is_a_restore_error(
    spark: SparkSession, sources: Sources, tmp_path: Path, kind: str
) -> None:
    target = sources.root / "savepoints" / f"{kind}-{tmp_path.name}"
    if kind == "stray-files":
        stray_files(target)
    error = refused(
        spark, sources, tmp_path, target, RestoreError, match=re.escape(target.as_uri())
    )
    assert "restore" in str(error).lower()


@pytest.mark.parametrize(
    "damage",
    [
        pytest.param(lambda b: b[:40] + bytes([b[40] ^ 0xFF]) + b[41:], id="flipped-body-byte"),
        pytest.param(lambda b: b"GICX" + b[4:], id="bad-magic"),
        pytest.param(lambda b: b[: len(b) // 2], id="truncated"),
    ],
)
def test_corrupt_savepoint_manifest(
    spark: SparkSession, sources: Sources, tmp_path: Path, damage: Any
) -> None:
    broken = sources.root / "savepoints" / f"broken-{tmp_path.name}"
    shutil.copytree(sources.native, broken)
    manifest = broken / SAVEPOINT_MANIFEST
    manifest.write_bytes(damage(manifest.read_bytes()))
    error = refused(spark, sources, tmp_path, broken, CorruptFileError, match="_savepoint.manifest")
    assert isinstance(error, CorruptFileError) and error.uri == manifest.as_uri()


def test_corrupt_checkpoint_manifest(spark: SparkSession, sources: Sources, tmp_path: Path) -> None:
    # A copy of the source job's directory, so the original stays readable.
    jobs = sources.root / "jobs"
    shutil.copytree(jobs / "src", jobs / f"copy-{tmp_path.name}")
    chk = jobs / f"copy-{tmp_path.name}" / "checkpoints" / "chk-000000000001.manifest"
    data = bytearray(chk.read_bytes())
    data[len(data) // 2] ^= 0x01
    chk.write_bytes(bytes(data))
    error = refused(
        spark, sources, tmp_path, chk, CorruptFileError, match="chk-000000000001.manifest"
    )
    assert "crc" in str(error).lower() or "checksum" in str(error).lower()


def test_bucket_count_differs_from_the_native_source(
    spark: SparkSession, sources: Sources, tmp_path: Path
) -> None:
    error = refused(
        spark, sources, tmp_path, sources.native, RestoreError, match="16 buckets", num_buckets=32
    )
    assert "canonical" in str(error)  # says how to change the bucket count


def test_garbage_savepoint_manifest(spark: SparkSession, sources: Sources, tmp_path: Path) -> None:
    garbage = stray_files(sources.root / "savepoints" / "garbage-manifest")
    (garbage / SAVEPOINT_MANIFEST).write_bytes(b"\x00\x01 not a manifest")
    error = refused(spark, sources, tmp_path, garbage, CorruptFileError, match="not a GIC manifest")
    assert isinstance(error, CorruptFileError)
    assert error.uri == (garbage / SAVEPOINT_MANIFEST).as_uri()


def test_garbage_canonical_index(spark: SparkSession, sources: Sources, tmp_path: Path) -> None:
    garbage = stray_files(sources.root / "savepoints" / "garbage-index")
    (garbage / INDEX_NAME).write_text('{"format": "something else"}')
    # The index is first read by the state tasks of the first batch: the driver has
    # started by then, so the failure is also in the job's status record.
    error = refused(spark, sources, tmp_path, garbage, CorruptFileError, match=INDEX_NAME)
    assert "canonical savepoint index" in str(error)


def test_canonical_savepoint_imports_into_another_bucket_count(
    spark: SparkSession, sources: Sources, tmp_path: Path
) -> None:
    resolver = StoreResolver()
    untouched = listing(sources.canonical)
    out = tmp_path / "out"
    s = job_settings(
        sources.root,
        "imported",
        tmp_path / "local",
        num_buckets=8,
        restore_source=str(sources.canonical),
    )
    summary = word_count(spark, s, sources.src, out).run(trigger="available-now")
    # Spark resumes where the savepoint was taken: the two new files, nothing twice.
    assert [b.batch_id for b in summary.batches] == [2, 3]
    reference = reference_counts(sources.src, 4)
    assert sink_batches(out) == {2: reference[2], 3: reference[3]}
    latest = load_retained(resolver, s.storage, "imported")[-1]
    assert latest.manifest.num_buckets == 8
    assert state_counts(resolver, latest.manifest) == totals(sources.src, 4)
    canonical_uri = sources.canonical.as_uri()
    assert not any(u.startswith(canonical_uri + "/") for u in latest.manifest.uris())
    status = read_status(resolver, s.storage, "imported")
    assert status is not None and status.restored_from is not None
    assert status.restored_from.mode is RestoreMode.NO_CLAIM and status.restored_from.released
    assert listing(sources.canonical) == untouched
