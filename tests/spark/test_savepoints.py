"""Savepoints of a running word count on real Spark (docs/architecture.md I5).

One job runs continuous micro-batches in a background thread while savepoints are
requested through the durable control channel: intermediate ones (native and canonical)
leave the job running and stay out of its checkpoint timeline; a terminal one stops the
query by itself. Recovery after a savepoint starts from the job's own latest checkpoint,
never from the savepoint. Every check reads storage.

The helpers at the top are shared with ``test_restore_modes`` and ``test_bad_input``.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgpack  # type: ignore[import-untyped, unused-ignore]
import pyarrow.parquet as pq
import pytest
from pyspark.sql import SparkSession

from gic_runtime.checkpoint.catalog import list_checkpoints, load_retained
from gic_runtime.checkpoint.manifest import (
    Manifest,
    SavepointFormat,
    SavepointType,
)
from gic_runtime.checkpoint.ownership import Owner, OwnershipPolicy
from gic_runtime.config import GICSettings
from gic_runtime.control import ControlChannel, Outcome
from gic_runtime.errors import GICError
from gic_runtime.savepoint.canonical import INDEX_NAME
from gic_runtime.savepoint.native import load_savepoint
from gic_runtime.spark import BatchReport, GICJob, GICQuery, RunSummary, count
from gic_runtime.state.backend import KeyedStateBackend
from gic_runtime.state.memory_store import InMemoryStore
from gic_runtime.status import JobState, read_status
from gic_runtime.storage.uri import StoreResolver
from gic_runtime.testing.changelog_fakes import TestingChangelogWriter

from .test_word_count import sink_batches, words_of
from .words import WORDS, reference_counts, write_text_batches

BUCKETS = 16
WAIT_S = 120.0

# --- shared helpers ----------------------------------------------------------------------


def job_settings(root: Path, job_id: str, local: Path, **overrides: Any) -> GICSettings:
    """Settings of a small word-count job (16 buckets) storing under ``root``."""
    values: dict[str, Any] = {
        "job_id": job_id,
        "storage": root.as_uri(),
        "num_buckets": BUCKETS,
        "local_dir": str(local),
        "control_poll_s": 0.05,
    }
    values.update(overrides)
    return GICSettings(**values)


def word_count(spark: SparkSession, settings: GICSettings, src: Path, out: Path) -> GICQuery:
    """The word-count query over the text files in ``src``, one file per batch, with
    transactional Parquet output in ``out``."""
    job = GICJob(spark, settings)
    keyed = job.keyed(words_of(spark, src), key="word")
    return keyed.aggregate(count=count()).to_parquet(str(out))


def totals(src: Path, upto: int) -> dict[str, int]:
    """Word counts over the first ``upto`` input files."""
    out: dict[str, int] = {}
    for path in sorted(src.glob("part-*.txt"))[:upto]:
        for word in path.read_text().split():
            out[word] = out.get(word, 0) + 1
    return out


def state_counts(resolver: StoreResolver, manifest: Manifest) -> dict[str, int]:
    """The word counts a manifest's state holds, rebuilt from storage alone."""
    n = manifest.num_buckets
    backend = KeyedStateBackend(range(n), n, InMemoryStore(), TestingChangelogWriter(range(n)))
    backend.restore(dict(manifest.buckets), resolver)
    state = backend.value_state("agg:count")
    found = {word: state.get(word) for word in WORDS}
    return {word: value for word, value in found.items() if value is not None}


def listing(directory: Path) -> dict[str, str]:
    """Every file under ``directory`` (relative path) with the SHA-256 of its bytes."""
    return {
        p.relative_to(directory).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(directory.rglob("*"))
        if p.is_file()
    }


def local_path(uri: str) -> Path:
    assert uri.startswith("file://"), uri
    return Path(uri.removeprefix("file://"))


def add_files(src: Path, count_: int, *, start: int) -> None:
    """Add input files to ``src`` atomically (a running query never sees half a file)."""
    staging = src.parent / f"{src.name}-staging"
    write_text_batches(staging, count_, start=start)
    for i in range(start, start + count_):
        name = f"part-{i:05d}.txt"
        os.replace(staging / name, src / name)


class Background:
    """``query.run(trigger=None)`` (continuous micro-batches) on a thread of its own."""

    def __init__(self, query: GICQuery) -> None:
        self.query = query
        self.summary: RunSummary | None = None
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, name="gic-job", daemon=True)
        self.thread.start()

    def _run(self) -> None:
        try:
            self.summary = self.query.run(trigger=None)
        except BaseException as exc:
            self.error = exc

    def check(self) -> None:
        """Raise the job's error if it failed; fail if it ended unexpectedly."""
        if self.error is not None:
            raise AssertionError(f"the job failed: {self.error}") from self.error
        assert self.thread.is_alive(), f"the job ended early: {self.summary}"

    def join(self, timeout: float) -> RunSummary:
        self.thread.join(timeout)
        assert not self.thread.is_alive(), f"the job did not stop within {timeout} s"
        if self.error is not None:
            raise AssertionError(f"the job failed: {self.error}") from self.error
        assert self.summary is not None
        return self.summary


def wait_for_checkpoint(
    resolver: StoreResolver, s: GICSettings, wanted: int, job: Background
) -> None:
    """Wait until the job's status record reports checkpoint ``wanted``."""
    deadline = time.monotonic() + WAIT_S
    while True:
        status = read_status(resolver, s.storage, s.job_id)
        last = status.last_checkpoint if status is not None else None
        if last is not None and last.id >= wanted:
            assert last.id == wanted, "more batches than input files"
            return
        job.check()
        assert time.monotonic() < deadline, f"no checkpoint {wanted} after {WAIT_S} s: {status}"
        time.sleep(0.05)


# --- the running job ---------------------------------------------------------------------


@dataclass(frozen=True)
class SavepointRun:
    """What the fixture did: job ``a`` ran over 6 files; an intermediate native and an
    intermediate canonical savepoint were taken after file 4 (checkpoint 3), the
    terminal one after file 6 (checkpoint 5)."""

    settings: GICSettings
    root: Path
    src: Path
    out: Path
    summary: RunSummary
    query: GICQuery
    mid: Outcome
    mid_canonical: Outcome
    final: Outcome


@pytest.fixture(scope="module")
def savepoint_run(spark: SparkSession, tmp_path_factory: pytest.TempPathFactory) -> SavepointRun:
    base = tmp_path_factory.mktemp("savepoints")
    root, src, out = base / "store", base / "in", base / "out"
    write_text_batches(src, 4)
    # Three retained checkpoints, so checkpoint 3 (the savepoint's state) is still there.
    s = job_settings(root, "a", base / "local", retained_checkpoints=3)
    resolver = StoreResolver()
    control = ControlChannel(resolver, s.storage, s.job_id)
    query = word_count(spark, s, src, out)
    job = Background(query)
    try:
        wait_for_checkpoint(resolver, s, 3, job)
        control.request_savepoint(
            "intermediate", "native", target=str(root / "savepoints" / "mid"), request_id="mid"
        )
        control.request_savepoint(
            "intermediate",
            "canonical",
            target=str(root / "savepoints" / "mid-canonical"),
            request_id="mid-canonical",
        )
        mid = control.wait("mid", WAIT_S, poll_s=0.05)
        mid_canonical = control.wait("mid-canonical", WAIT_S, poll_s=0.05)
        job.check()  # an intermediate savepoint leaves the job running
        add_files(src, 2, start=4)
        wait_for_checkpoint(resolver, s, 5, job)
        control.request_savepoint(
            "stop", "native", target=str(root / "savepoints" / "final"), request_id="final"
        )
        summary = job.join(WAIT_S)
    finally:
        if job.thread.is_alive():
            control.request_stop(request_id="cleanup")
            job.thread.join(WAIT_S)
    final = control.outcome("final")
    assert final is not None
    return SavepointRun(s, root, src, out, summary, query, mid, mid_canonical, final)


def test_intermediate_savepoint_stays_out_of_the_timeline(savepoint_run: SavepointRun) -> None:
    run, resolver = savepoint_run, StoreResolver()
    root = run.settings.storage
    target = (run.root / "savepoints" / "mid").as_uri()
    assert run.mid.succeeded, run.mid.error
    assert (run.mid.checkpoint_id, run.mid.path) == (3, target)

    savepoint = load_savepoint(resolver, target)
    info = savepoint.manifest.savepoint
    assert info is not None
    assert (info.type, info.format) == (SavepointType.INTERMEDIATE, SavepointFormat.NATIVE)
    assert savepoint.manifest.checkpoint_id == 3

    # Self-contained: every file it needs lives under its own directory.
    files = savepoint.manifest.uris()
    assert files and all(u.startswith(target + "/files/") for u in files)
    assert all(local_path(u).is_file() for u in files)
    policy = OwnershipPolicy.for_job(root, "a")
    assert {policy.classify(u) for u in files} == {Owner.SAVEPOINT}

    # Never among the retained checkpoints, never referenced by them, never registered.
    refs = list_checkpoints(resolver, root, "a")
    assert [r.checkpoint_id for r in refs] == [3, 4, 5]
    assert not any("/savepoints/" in r.uri for r in refs)
    retained = load_retained(resolver, root, "a")
    assert not any(s.manifest.is_savepoint for s in retained)
    assert all(policy.classify(u) is Owner.JOB for s in retained for u in s.manifest.uris())
    driver = run.query.driver
    assert driver is not None and driver.timeline is not None
    registry = driver.timeline.registry
    assert [s.checkpoint_id for s in registry.retained()] == [3, 4, 5]
    assert not registry.referenced() & files
    assert all(registry.refcount(u) == 0 for u in files)

    # Its content is exactly the state of checkpoint 3 (all files up to the fourth).
    chk3 = next(s for s in retained if s.checkpoint_id == 3)
    assert state_counts(resolver, savepoint.manifest) == totals(run.src, 4)
    assert state_counts(resolver, chk3.manifest) == totals(run.src, 4)

    # Savepoints never trigger sink commits: every batch was published once, no more.
    assert sink_batches(run.out) == dict(enumerate(reference_counts(run.src, 6)))


def test_intermediate_canonical_savepoint_is_readable_without_the_runtime(
    savepoint_run: SavepointRun,
) -> None:
    run = savepoint_run
    target = run.root / "savepoints" / "mid-canonical"
    assert run.mid_canonical.succeeded, run.mid_canonical.error
    assert run.mid_canonical.checkpoint_id == 3
    assert run.mid_canonical.path == target.as_uri()

    # Plain json + pyarrow + msgpack: the index lists Parquet files with one row per value.
    index = json.loads((target / INDEX_NAME).read_text())
    assert index["format"] == "gic-canonical-savepoint"
    assert index["body"]["num_buckets"] == BUCKETS
    counts: dict[str, int] = {}
    for entry in index["body"]["files"]:
        table = pq.read_table(target / entry["name"])
        assert table.num_rows == entry["rows"]
        for row in table.to_pylist():
            assert (row["state"], row["kind"]) == ("agg:count", "value")
            word = msgpack.unpackb(row["key"], raw=False)
            assert word not in counts
            counts[word] = msgpack.unpackb(row["value"], raw=False)
    assert counts == totals(run.src, 4)
    # Not a checkpoint of the job either.
    assert not any(
        "/savepoints/" in r.uri
        for r in list_checkpoints(StoreResolver(), run.settings.storage, "a")
    )


def test_terminal_savepoint_stops_the_query_by_itself(savepoint_run: SavepointRun) -> None:
    run, resolver = savepoint_run, StoreResolver()
    assert run.final.succeeded, run.final.error
    assert run.summary.stop_reason is not None and "final" in run.summary.stop_reason
    assert [b.batch_id for b in run.summary.batches] == [0, 1, 2, 3, 4, 5]

    savepoint = load_savepoint(resolver, (run.root / "savepoints" / "final").as_uri())
    info = savepoint.manifest.savepoint
    assert info is not None and info.type is SavepointType.TERMINAL
    # Taken from the last checkpoint, after its output was published.
    assert run.final.checkpoint_id == savepoint.manifest.checkpoint_id == 5
    assert list_checkpoints(resolver, run.settings.storage, "a")[-1].checkpoint_id == 5
    assert state_counts(resolver, savepoint.manifest) == totals(run.src, 6)
    assert sink_batches(run.out) == dict(enumerate(reference_counts(run.src, 6)))

    status = read_status(resolver, run.settings.storage, "a")
    assert status is not None
    assert status.state is JobState.STOPPED
    assert status.last_checkpoint is not None and status.last_checkpoint.id == 5
    assert status.last_savepoint is not None and status.last_savepoint.request_id == "final"


class SimulatedCrashError(Exception):
    """Raised after a manifest is written: the driver dies before Spark commits."""


def test_recovery_after_a_savepoint_starts_from_the_latest_checkpoint(
    spark: SparkSession, savepoint_run: SavepointRun, tmp_path: Path
) -> None:
    run, resolver = savepoint_run, StoreResolver()
    # Work on a copy of the job's storage and output: the other tests read the originals.
    root, out = tmp_path / "store", tmp_path / "out"
    shutil.copytree(run.root, root)
    shutil.copytree(run.out, out)
    s = job_settings(root, "a", tmp_path / "local")
    add_files(run.src, 3, start=6)

    def crash_after_7(report: BatchReport) -> None:
        if report.batch_id == 7:
            raise SimulatedCrashError("driver lost after manifest 7")

    crashed = word_count(spark, s, run.src, out)
    with pytest.raises(GICError, match="SimulatedCrashError: driver lost after manifest 7"):
        crashed.run(trigger="available-now", on_batch=crash_after_7)
    assert crashed.driver is not None and crashed.driver.start_info is not None
    # Savepoints at 3 (intermediate) and 5 (terminal): the start was checkpoint 5.
    assert crashed.driver.start_info.resumed_after == 5
    assert crashed.driver.start_info.own
    assert list_checkpoints(resolver, s.storage, "a")[-1].checkpoint_id == 7

    # Same job id, no restore settings: the attempt resumes its own latest checkpoint.
    summary = word_count(spark, s, run.src, out).run(trigger="available-now")
    assert summary.start.own
    assert summary.start.resumed_after == 7
    assert summary.start.restored_from is None
    assert [b.batch_id for b in summary.batches] == [8]
    assert sink_batches(out) == dict(enumerate(reference_counts(run.src, 9)))
    latest = load_retained(resolver, s.storage, "a")[-1]
    assert latest.checkpoint_id == 8
    assert state_counts(resolver, latest.manifest) == totals(run.src, 9)
    # The savepoints were only read, never touched.
    assert listing(root / "savepoints") == listing(run.root / "savepoints")
