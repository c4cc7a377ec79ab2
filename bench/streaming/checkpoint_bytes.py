"""Bytes a checkpoint directory gained in each micro-batch, attributed after the run.

Measuring the directory between batches would race with the next batch, which Spark
starts as soon as the previous one commits. Instead, after the run every file under the
directory is attributed to one batch:

* ``offsets/<N>`` and ``commits/<N>`` (Spark's write-ahead and commit logs) by name, to
  batch ``N``;
* every other file by its modification time: to the first batch whose window ends at
  or after it (a window is ``(end of the previous batch, end of this batch]``; the
  first one starts at the beginning of time). Background writes (state store
  maintenance, snapshot uploads) land in the batch during which they happened. Files
  written after the last window (a batch interrupted by stopping the query) count for
  no batch.

Hadoop's local-filesystem checksum sidecars (``.<name>.crc``) are counted apart: object
stores do not get them. The attribution is only complete if nothing was deleted during
the run, so callers must keep every version (Spark: ``minBatchesToRetain`` above the
number of batches) and check it with :func:`logs_complete` (:func:`missing_log_entries`
names what is gone). On S3 the attribution is also only as complete as the listing:
:func:`s3_log_check` lists again when a listing lacks log entries and, if they stay
missing, lists the log directories apart to tell a listing the server cut short from
deleted files.

:func:`attribute` reads a local directory; :func:`attribute_entries` does the same for any
listing of ``(relative path, size, modification time)``, e.g. an S3 prefix
(:func:`s3_entries`; S3 reports modification times in whole seconds, so there a file can
land one batch early). :func:`directory_bytes` totals a directory, :func:`stored_sample`
also splits a GIC storage root's bytes by kind (``jobs/<job>/<kind>/...``: snapshots,
changelog, checkpoints, ...), and :class:`StoredBytesSampler` takes such samples on a
background thread at chosen batches.

Pure functions over the filesystem except :class:`StoredBytesSampler`, whose methods
may be called from any thread.
"""

from __future__ import annotations

import bisect
import os
import queue
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

from bench.streaming.records import BenchmarkError

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client

LOG_DIRS = ("offsets", "commits")


@dataclass(frozen=True)
class Entry:
    """One stored file: path relative to the checkpoint root, size, modification time."""

    path: str
    size: int
    mtime_ns: int


@dataclass(frozen=True)
class BatchWindow:
    """A micro-batch and the wall-clock time (ns since the epoch) at which it ended."""

    batch_id: int
    end_ns: int


@dataclass
class BatchBytes:
    """What one batch added: data bytes and files, checksum-sidecar bytes apart."""

    bytes: int = 0
    files: int = 0
    crc_bytes: int = 0


def _log_batch(relative: Path) -> int | None:
    """Batch id of a Spark offsets/commits log file (or its ``.crc``), else None."""
    if len(relative.parts) != 2 or relative.parts[0] not in LOG_DIRS:
        return None
    name = relative.name
    if name.startswith(".") and name.endswith(".crc"):
        name = name[1:-4]
    return int(name) if name.isdigit() else None


def local_entries(root: Path) -> Iterator[Entry]:
    """Every file under ``root``."""
    for dirpath, _dirs, files in os.walk(root):
        for name in files:
            path = Path(dirpath, name)
            stat = path.stat()
            yield Entry(path.relative_to(root).as_posix(), stat.st_size, stat.st_mtime_ns)


def s3_entries(client: S3Client, bucket: str, prefix: str) -> Iterator[Entry]:
    """Every object under ``prefix`` (a directory, without trailing slash)."""
    base = prefix.rstrip("/") + "/"
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=base):
        for item in page.get("Contents", []):
            when = item["LastModified"]
            mtime_ns = int(when.timestamp()) * 1_000_000_000 + when.microsecond * 1000
            yield Entry(item["Key"][len(base) :], int(item["Size"]), mtime_ns)


def attribute(root: Path, windows: Sequence[BatchWindow]) -> dict[int, BatchBytes]:
    """Bytes added under ``root`` per batch of ``windows`` (ordered by batch id and time)."""
    return attribute_entries(local_entries(root), windows)


def attribute_entries(
    entries: Iterable[Entry], windows: Sequence[BatchWindow]
) -> dict[int, BatchBytes]:
    """Bytes of ``entries`` per batch of ``windows`` (ordered by batch id and time)."""
    if not windows:
        return {}
    ids = [w.batch_id for w in windows]
    ends = [w.end_ns for w in windows]
    if ends != sorted(ends) or ids != sorted(ids):
        raise BenchmarkError(f"batch windows are not in order: {windows}")
    out = {w.batch_id: BatchBytes() for w in windows}
    for entry in entries:
        relative = Path(entry.path)
        batch = _log_batch(relative)
        if batch is None:
            index = bisect.bisect_left(ends, entry.mtime_ns)
            if index == len(ends):
                continue  # written after the last measured batch ended
            batch = ids[index]
        if batch not in out:
            continue  # a log file of a batch outside the windows
        item = out[batch]
        name = relative.name
        if name.startswith(".") and name.endswith(".crc"):
            item.crc_bytes += entry.size
        else:
            item.bytes += entry.size
            item.files += 1
    return out


def logs_complete_entries(paths: Iterable[str], batch_ids: Sequence[int]) -> bool:
    """:func:`logs_complete` over a listing of relative paths."""
    return not missing_log_entries(paths, batch_ids)


def missing_log_entries(paths: Iterable[str], batch_ids: Sequence[int]) -> list[str]:
    """The ``offsets/<N>`` and ``commits/<N>`` of ``batch_ids`` absent from ``paths`` (a
    listing of relative paths), offsets first, each in batch order."""
    present = set(paths)
    return [f"{log}/{b}" for log in LOG_DIRS for b in batch_ids if f"{log}/{b}" not in present]


LISTING_ATTEMPTS = 3
"""Full listings of an S3 checkpoint :func:`s3_log_check` takes before it gives up."""


@dataclass(frozen=True)
class LogCheck:
    """What :func:`s3_log_check` found: the listing to attribute bytes from (the last
    one taken), the log entries missing from it, and those of them that a listing of
    ``offsets/`` and ``commits/`` alone does find (the full listing left them out)."""

    listing: list[Entry]
    missing: list[str]
    listed_apart: list[str]
    attempts: int

    @property
    def complete(self) -> bool:
        return not self.missing

    def problem(self, variant: str, retain: str) -> str:
        """Why the run's bytes cannot be attributed (call only when not complete)."""
        if self.listed_apart:
            shown = _shown(self.missing)
            return (
                f"the S3 listing of {variant}'s checkpoint left out {len(self.missing)} log "
                f"entries ({shown}) in each of {self.attempts} listings, though a listing of "
                f"{' and '.join(f'{log}/' for log in LOG_DIRS)} alone finds "
                f"{len(self.listed_apart)} of them: the S3 server returned incomplete "
                "listings, so the run's bytes cannot be attributed"
            )
        return deleted_message(variant, self.missing, retain)


def deleted_message(variant: str, missing: Sequence[str], retain: str) -> str:
    """The error for log entries ``missing`` because Spark deleted them during the run."""
    return (
        f"Spark deleted checkpoint files during the run of {variant}: {_shown(missing)} are "
        f"gone; raise {retain}"
    )


def _shown(missing: Sequence[str]) -> str:
    """The first few of ``missing``, for a message."""
    return ", ".join(missing[:6]) + (" ..." if len(missing) > 6 else "")


def s3_log_check(list_prefix: Callable[[str], list[Entry]], batch_ids: Sequence[int]) -> LogCheck:
    """List an S3 checkpoint whole (``list_prefix("")``; paths relative to it) until the
    listing holds every log entry of ``batch_ids``, at most :data:`LISTING_ATTEMPTS`
    times; when entries stay missing, list each log directory apart
    (``list_prefix("offsets")``, paths relative to the checkpoint) to tell a listing the
    server cut short from files that are gone."""
    listing: list[Entry] = []
    missing: list[str] = []
    attempts = 0
    while attempts < LISTING_ATTEMPTS:
        attempts += 1
        listing = list_prefix("")
        missing = missing_log_entries((e.path for e in listing), batch_ids)
        if not missing:
            return LogCheck(listing, [], [], attempts)
    apart = {e.path for log in LOG_DIRS for e in list_prefix(log)}
    return LogCheck(listing, missing, [m for m in missing if m in apart], attempts)


def _walk(root: Path) -> Iterator[tuple[str, int]]:
    """``(path, size)`` of every regular file under ``root`` (nothing if it does not
    exist); files deleted while it walks are skipped."""
    stack = [str(root)]
    while stack:
        try:
            with os.scandir(stack.pop()) as it:
                for entry in it:
                    try:
                        if entry.is_dir(follow_symlinks=False):
                            stack.append(entry.path)
                        elif entry.is_file(follow_symlinks=False):
                            yield entry.path, entry.stat(follow_symlinks=False).st_size
                    except FileNotFoundError:
                        continue
        except FileNotFoundError:
            continue


def directory_bytes(root: Path) -> tuple[int, int]:
    """Total bytes and number of files under ``root`` (0, 0 if it does not exist);
    files deleted while it walks are skipped."""
    sample = stored_sample(root)
    return sample.bytes, sample.files


class StoredSample(NamedTuple):
    """Bytes and files under a storage root, and its bytes by kind."""

    bytes: int
    files: int
    kinds: dict[str, int]
    """Bytes per ``<kind>`` of ``jobs/<job>/<kind>/...`` (snapshots, changelog,
    checkpoints, ...); ``other`` for files elsewhere."""


def _kind(relative: tuple[str, ...]) -> str:
    return relative[2] if len(relative) > 3 and relative[0] == "jobs" else "other"


def top_directory(relative: tuple[str, ...]) -> str:
    """The kind of a file of a Spark checkpoint directory: its top-level directory
    (``offsets``, ``commits``, ``state``, ...; ``other`` for files at the top)."""
    return relative[0] if len(relative) > 1 else "other"


KindFn = Callable[[tuple[str, ...]], str]


def stored_sample(root: Path, kind: KindFn | None = None) -> StoredSample:
    """Totals of ``root`` split by kind (see :class:`StoredSample`; ``kind`` maps a
    relative path's parts to its kind, by default GIC's ``jobs/<job>/<kind>/``)."""
    kind_of = kind or _kind
    total = files = 0
    kinds: dict[str, int] = {}
    for path, size in _walk(root):
        total += size
        files += 1
        name = kind_of(Path(path).relative_to(root).parts)
        kinds[name] = kinds.get(name, 0) + size
    return StoredSample(total, files, kinds)


class StoredBytesSampler:
    """Samples a storage root (:func:`stored_sample`) on a background thread whenever
    :meth:`batch_done` is called with a batch id that is a multiple of ``every``, off the
    batch's critical path. ``kind``: as for :func:`stored_sample`. ``coalesce``: when
    batches end faster than a sample takes, sample once for the latest of the waiting
    batches (each sample then belongs to the batch it is filed under; batches in between
    get none) instead of filing late samples under earlier batches."""

    def __init__(
        self, root: Path, every: int, *, kind: KindFn | None = None, coalesce: bool = False
    ) -> None:
        self.root = root
        self.every = every
        self.kind = kind
        self.coalesce = coalesce
        self._lock = threading.Lock()
        self._samples: dict[int, StoredSample] = {}
        self._queue: queue.Queue[int | None] = queue.Queue()
        self._thread = threading.Thread(target=self._run, name="stored-bytes", daemon=True)
        self._thread.start()

    def batch_done(self, batch_id: int) -> None:
        if self.every > 0 and batch_id % self.every == 0:
            self._queue.put(batch_id)

    def close(self) -> dict[int, StoredSample]:
        """Finish pending samples; return ``{batch id: sample}``."""
        self._queue.put(None)
        self._thread.join()
        with self._lock:
            return dict(self._samples)

    def _run(self) -> None:
        while (batch_id := self._queue.get()) is not None:
            last = False
            while self.coalesce and not self._queue.empty():
                later = self._queue.get_nowait()
                if later is None:
                    last = True
                    break
                batch_id = later
            sample = stored_sample(self.root, self.kind)
            with self._lock:
                self._samples[batch_id] = sample
            if last:
                return


def logs_complete(root: Path, batch_ids: Sequence[int]) -> bool:
    """True if Spark's offsets and commits logs still hold every one of ``batch_ids``
    (cleanup deletes the oldest first, so this shows nothing was deleted)."""
    return all((root / log / str(b)).is_file() for log in LOG_DIRS for b in batch_ids)
