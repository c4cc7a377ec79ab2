"""Spark's own checkpoint directory, derived from our manifests (one source of truth).

Spark keeps its progress in a local checkpoint directory: ``metadata`` (query id),
``offsets/<N>`` (what batch N reads), ``commits/<N>`` (batch N finished) and
``sources/<i>/...`` (a source's own log, e.g. the files a file source has seen). A
manifest of checkpoint N carries a capture of exactly what Spark needs to resume after
N (:func:`capture`), and every driver start wipes the directory and lays it down from
the manifest it starts from (:func:`lay_down`). Spark then plans batch N+1 next.

Invariants:

* A capture for batch N holds ``offsets/N`` (and ``offsets/N-1``, which Spark reads to
  rebuild the committed offsets), a commit entry for N (and N-1 when Spark wrote one),
  ``metadata``, and each source log from its latest compaction at or below N onwards.
* Whatever Spark left in the directory is never trusted: :func:`lay_down` replaces it.

Not thread-safe; called by the driver between batches.
"""

from __future__ import annotations

import json
import re
import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from gic_runtime.errors import FormatError, RestoreError

ENGINE_FORMAT = "spark-checkpoint"
ENGINE_VERSION = 1

_BATCH_FILE = re.compile(r"^(\d+)(\.compact)?$")


def _read(path: Path) -> str:
    return path.read_text(encoding="utf-8")


def _watermark(offsets_text: str) -> int:
    """``batchWatermarkMs`` of an offsets file (0 when absent)."""
    lines = offsets_text.splitlines()
    if len(lines) < 2 or not lines[0].startswith("v"):
        raise FormatError("Spark offsets file has no version line and metadata line")
    try:
        meta = json.loads(lines[1])
    except json.JSONDecodeError as exc:
        raise FormatError(f"Spark offsets metadata is not JSON: {exc}") from exc
    return int(meta.get("batchWatermarkMs", 0))


def _source_files(source_dir: Path, batch_id: int) -> dict[int, Path]:
    """Log files of one source needed to resume after ``batch_id``."""
    found: dict[int, Path] = {}
    for path in source_dir.iterdir():
        m = _BATCH_FILE.match(path.name)
        if m is None or not path.is_file():
            continue
        n = int(m.group(1))
        if n <= batch_id:
            found[n] = path
    compacts = [n for n, p in found.items() if p.name.endswith(".compact")]
    start = max(compacts) if compacts else 0
    return {n: p for n, p in found.items() if n >= start}


def capture(directory: str | Path, batch_id: int) -> dict[str, Any]:
    """What a manifest of checkpoint ``batch_id`` stores about Spark's progress."""
    base = Path(directory)
    offsets = base / "offsets" / str(batch_id)
    if not offsets.is_file():
        raise RestoreError(
            f"Spark has no offsets entry for batch {batch_id} in {base}; the checkpoint "
            "directory is not the one this query runs with"
        )
    files: dict[str, str] = {}
    text = _read(offsets)
    files[f"offsets/{batch_id}"] = text
    files[f"commits/{batch_id}"] = "v1\n" + json.dumps(
        {"nextBatchWatermarkMs": _watermark(text)}, separators=(",", ":")
    )
    if batch_id > 0:
        for kind in ("offsets", "commits"):
            prev = base / kind / str(batch_id - 1)
            if prev.is_file():
                files[f"{kind}/{batch_id - 1}"] = _read(prev)
    metadata = base / "metadata"
    if metadata.is_file():
        files["metadata"] = _read(metadata)
    sources = base / "sources"
    if sources.is_dir():
        for source_dir in sorted(p for p in sources.iterdir() if p.is_dir()):
            for _, path in sorted(_source_files(source_dir, batch_id).items()):
                files[path.relative_to(base).as_posix()] = _read(path)
    return {
        "format": ENGINE_FORMAT,
        "version": ENGINE_VERSION,
        "batch_id": batch_id,
        "files": files,
    }


def add_idle_batch(directory: str | Path, batch_id: int) -> bool:
    """Record in Spark's directory a batch ``batch_id + 1`` that read nothing new (its
    offsets are ``batch_id``'s), as Spark itself records a batch run without new data;
    the runtime runs such a batch to fire timers once the input ended. ``False`` (and
    nothing written) unless ``batch_id`` is Spark's latest batch and committed."""
    base = Path(directory)
    offsets, commits = base / "offsets", base / "commits"
    current, following = offsets / str(batch_id), offsets / str(batch_id + 1)
    if not current.is_file() or following.exists() or (commits / str(batch_id + 1)).exists():
        return False
    text = _read(current)
    following.write_text(text, encoding="utf-8")
    commits.mkdir(parents=True, exist_ok=True)
    (commits / str(batch_id + 1)).write_text(
        "v1\n" + json.dumps({"nextBatchWatermarkMs": _watermark(text)}, separators=(",", ":")),
        encoding="utf-8",
    )
    return True


def lay_down(directory: str | Path, engine: Mapping[str, Any] | None) -> int | None:
    """Replace ``directory`` with Spark's progress from a manifest's ``engine`` record
    (an empty directory when ``engine`` is empty: Spark starts from scratch). Returns
    the batch id Spark resumes after, or ``None``."""
    base = Path(directory)
    if base.exists():
        shutil.rmtree(base)
    base.mkdir(parents=True)
    if not engine:
        return None
    if engine.get("format") != ENGINE_FORMAT:
        raise RestoreError(
            f"the checkpoint's engine record is {engine.get('format')!r}, not "
            f"{ENGINE_FORMAT!r}: it was not written by a Spark job and cannot resume one"
        )
    if engine.get("version") != ENGINE_VERSION:
        raise FormatError(
            f"engine record version {engine.get('version')!r} is not {ENGINE_VERSION}; "
            "upgrade gic to read it"
        )
    files = engine.get("files")
    if not isinstance(files, Mapping):
        raise FormatError("engine record has no files")
    for rel, text in files.items():
        target = (base / rel).resolve()
        if base.resolve() not in target.parents:
            raise FormatError(f"engine record names a file outside the directory: {rel!r}")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(str(text), encoding="utf-8")
    return int(engine["batch_id"])
