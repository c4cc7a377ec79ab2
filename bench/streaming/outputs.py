"""What a system wrote, reduced to a fingerprint every system computes the same way, and
the reference outputs of the event-time workloads (pure Python, for tests and checks;
:func:`table_fingerprint` takes a pyarrow table).

A system's output is a table of rows plus the micro-batch that wrote each. Its
:func:`fingerprint` sorts the rows of the batches ``[0, batches)`` (timestamps as integer
microseconds since the epoch, UTC; strings by a hash, :func:`cell`) and hashes them, once
without and once with the batch id; two systems wrote the same rows when the
``rows_sha256`` agree, and wrote them in the same batches when the
``rows_by_batch_sha256`` agree. :func:`agreement` compares the fingerprints of every run
of a benchmark.

Stateless and thread-safe.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

Row = tuple[int, ...]
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def micros(value: Any) -> int:
    """A timestamp (aware or naive-as-UTC datetime) or integer as epoch microseconds."""
    if isinstance(value, datetime):
        stamp = value if value.tzinfo is not None else value.replace(tzinfo=UTC)
        delta = stamp - _EPOCH
        return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds
    return int(value)


def cell(value: Any) -> int:
    """One value of a row as an integer: :func:`micros`, except that a string becomes the
    first 8 bytes of its SHA-256 (the state sweep's payloads)."""
    if isinstance(value, str):
        return int.from_bytes(hashlib.sha256(value.encode()).digest()[:8], "big")
    return micros(value)


def normalize(rows: Iterable[Sequence[Any]]) -> list[Row]:
    """Rows as sorted tuples of integers (timestamps in microseconds, strings hashed)."""
    return sorted(tuple(cell(v) for v in row) for row in rows)


def fingerprint(
    rows: Iterable[Sequence[Any]], batch_ids: Iterable[int], batches: int
) -> dict[str, Any]:
    """The fingerprint of the rows written by batches ``[0, batches)`` (others ignored)."""
    kept = [
        (int(b), tuple(cell(v) for v in row))
        for row, b in zip(rows, batch_ids, strict=True)
        if 0 <= int(b) < batches
    ]
    plain = sorted(row for _, row in kept)
    tagged = sorted((b, *row) for b, row in kept)
    return {
        "rows": len(plain),
        "batches": batches,
        "rows_sha256": _digest(plain),
        "rows_by_batch_sha256": _digest(tagged),
    }


def table_fingerprint(table: Any, batches: int) -> dict[str, Any]:
    """:func:`fingerprint` of a pyarrow table of output rows with a ``batch_id`` column,
    as both GIC's sink and Spark's Parquet batches read back; timestamp columns are
    taken as UTC microseconds whatever unit the file stored them in (Spark writes
    INT96, read as nanoseconds)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    micros_utc = pa.timestamp("us", tz="UTC")
    columns = [
        (pc.cast(c, micros_utc) if pa.types.is_timestamp(c.type) else c).to_pylist()
        for c in table.drop_columns(["batch_id"]).columns
    ]
    ids = table.column("batch_id").to_pylist()
    return fingerprint(zip(*columns, strict=True), ids, batches)


def _digest(rows: Sequence[Row]) -> str:
    h = hashlib.sha256()
    for row in rows:
        h.update(repr(row).encode())
        h.update(b"\n")
    return h.hexdigest()


def agreement(fingerprints: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """Whether every run (``name -> fingerprint``) wrote the same rows, and in the same
    batches. ``identical`` is None when fewer than two runs have a fingerprint."""
    known = {n: f for n, f in fingerprints.items() if f}
    rows = {f["rows_sha256"] for f in known.values()}
    tagged = {f["rows_by_batch_sha256"] for f in known.values()}
    enough = len(known) >= 2
    return {
        "identical": (len(rows) == 1) if enough else None,
        "identical_batches": (len(tagged) == 1) if enough else None,
        "runs_compared": sorted(known),
        "rows": {n: f["rows"] for n, f in known.items()},
        "how": (
            "every run's output rows of batches 0..N-1 (N = warm-up + measured), sorted, "
            "timestamps as epoch microseconds, hashed (sha256); identical: every hash equal; "
            "identical_batches: the same with each row's batch id"
        ),
    }


# --- reference outputs ------------------------------------------------------------------


def reference_sessions(
    events: Iterable[tuple[int, int, int]], gap: int, watermark_bound: int = 0
) -> list[tuple[int, int, int, int, int]]:
    """Sessions ``(batch, key, start, end, events)`` of ``events`` ``(batch, key, time)``
    given in batch order, as the W3 logic emits them: batch ``b`` runs with the watermark
    ``max time of batches < b - watermark_bound``; its rows extend (or, after more than
    ``gap``, close and reopen) their key's session and move its timer to ``end + gap``;
    then every timer at or before the watermark fires and emits its session."""
    by_batch: dict[int, list[tuple[int, int]]] = {}
    for batch, key, t in events:
        by_batch.setdefault(batch, []).append((key, t))
    sessions: dict[int, list[int]] = {}
    out: list[tuple[int, int, int, int, int]] = []
    max_seen: int | None = None
    for batch in range(min(by_batch, default=0), max(by_batch, default=-1) + 1):
        watermark = None if max_seen is None else max_seen - watermark_bound
        rows = sorted(by_batch.get(batch, []))
        for key, t in rows:
            current = sessions.get(key)
            if current is not None and t > current[1] + gap:
                out.append((batch, key, current[0], current[1], current[2]))
                current = None
            if current is None:
                current = [t, t, 0]
            sessions[key] = [min(current[0], t), max(current[1], t), current[2] + 1]
        if watermark is not None:
            for key in sorted(k for k, s in sessions.items() if s[1] + gap <= watermark):
                s = sessions.pop(key)
                out.append((batch, key, s[0], s[1], s[2]))
        if rows:
            top = max(t for _, t in rows)
            max_seen = top if max_seen is None else max(max_seen, top)
    return out


def reference_windows(
    events: Iterable[tuple[int, int, int]], size: int, watermark_bound: int
) -> list[tuple[int, int, int, int, int]]:
    """Tumbling counts ``(batch, key, start, end, n)`` of ``events`` ``(batch, key, time)``:
    a window is written in the first batch whose watermark (``max time of earlier batches -
    watermark_bound``) is at or past its end."""
    by_batch: dict[int, list[tuple[int, int]]] = {}
    for batch, key, t in events:
        by_batch.setdefault(batch, []).append((key, t))
    open_: dict[tuple[int, int], int] = {}
    out: list[tuple[int, int, int, int, int]] = []
    max_seen: int | None = None
    for batch in range(min(by_batch, default=0), max(by_batch, default=-1) + 1):
        watermark = None if max_seen is None else max_seen - watermark_bound
        rows = by_batch.get(batch, [])
        for key, t in rows:
            if watermark is not None and t < watermark:
                continue  # late
            start = t - t % size
            open_[(key, start)] = open_.get((key, start), 0) + 1
        if watermark is not None:
            for key, start in sorted(k for k in open_ if k[1] + size <= watermark):
                out.append((batch, key, start, start + size, open_.pop((key, start))))
        if rows:
            top = max(t for _, t in rows)
            max_seen = top if max_seen is None else max(max_seen, top)
    return out
