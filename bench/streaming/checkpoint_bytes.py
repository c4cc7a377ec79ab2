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
number of batches) and check it with :func:`logs_complete`.

Pure functions over the filesystem; no shared state.
"""

from __future__ import annotations

import bisect
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from bench.streaming.records import BenchmarkError

LOG_DIRS = ("offsets", "commits")


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


def attribute(root: Path, windows: Sequence[BatchWindow]) -> dict[int, BatchBytes]:
    """Bytes added under ``root`` per batch of ``windows`` (ordered by batch id and time)."""
    if not windows:
        return {}
    ids = [w.batch_id for w in windows]
    ends = [w.end_ns for w in windows]
    if ends != sorted(ends) or ids != sorted(ids):
        raise BenchmarkError(f"batch windows are not in order: {windows}")
    out = {w.batch_id: BatchBytes() for w in windows}
    for dirpath, _dirs, files in os.walk(root):
        for name in files:
            path = Path(dirpath, name)
            stat = path.stat()
            batch = _log_batch(path.relative_to(root))
            if batch is None:
                index = bisect.bisect_left(ends, stat.st_mtime_ns)
                if index == len(ends):
                    continue  # written after the last measured batch ended
                batch = ids[index]
            if batch not in out:
                continue  # a log file of a batch outside the windows
            entry = out[batch]
            if name.startswith(".") and name.endswith(".crc"):
                entry.crc_bytes += stat.st_size
            else:
                entry.bytes += stat.st_size
                entry.files += 1
    return out


def logs_complete(root: Path, batch_ids: Sequence[int]) -> bool:
    """True if Spark's offsets and commits logs still hold every one of ``batch_ids``
    (cleanup deletes the oldest first, so this shows nothing was deleted)."""
    return all((root / log / str(b)).is_file() for log in LOG_DIRS for b in batch_ids)
