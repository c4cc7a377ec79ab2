"""The compact bucket table of manifest format v2 (docs/architecture.md §4.4).

A checkpoint manifest lists, per bucket, the snapshot and every changelog section since
it. Between two materializations of a bucket its sections accumulate, and each section
of one upload sits in the same segment object as the sections of the other buckets of
that upload, so a manifest holds many handles but few distinct objects. Format v2 names
every object once and writes each handle as integers:

* ``objects``: the distinct objects (segments and snapshots) in order of first use,
  each relative to the manifest's base directory where possible (the caller's
  ``relativize``), else a full URI;
* ``tokens``: the distinct lineage tokens, verbatim (a token is an identifier, not a
  reference: it is never relativized);
* ``buckets``: one entry per bucket, ascending::

      {"bucket": b, "seq": s, "token": t, "snapshot": null | [o, seq, size, crc],
       "changelog": [o, offset_gap, length, from_gap, count, ...], "crc": "<8 hex>..."}

  ``token`` indexes ``tokens``; ``o`` indexes ``objects``. ``changelog`` is flat, five
  integers per handle, in the handles' order; ``crc`` holds each handle's CRC32C as 8
  lowercase hex digits, in the same order. The handle's bucket (and the snapshot's) is
  the entry's bucket. Deltas keep the numbers short:

  - ``offset = end + offset_gap``, where ``end`` is where the previous section of the
    same object ended (``offset + length``), in the order the table lists handles
    (ascending bucket, then changelog order), and 0 for its first section. A segment
    lays its sections out back to back in bucket order, so the gap is usually 0;
  - ``from_seq = prev + from_gap`` with ``prev`` the previous handle's ``to_seq`` in the
    bucket, or the bucket's base (the snapshot's ``seq``, 0 without one) for the first;
    usually 0 because the changelog covers ``[base, seq)`` without gaps;
  - ``to_seq = from_seq + count``.

Invariants: decoding the table yields exactly the encoded bucket states (with objects
resolved by the caller); every handle and snapshot of an entry is of the entry's bucket
(the encoder refuses others, restore would reject them anyway); a malformed table -- a
row of the wrong arity, an index out of range, a non-integer -- raises ``ValueError``
with a message that says which bucket and what is wrong (the codec turns it into a
``CorruptFileError`` naming the file), never ``IndexError``/``KeyError``/``TypeError``.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Final

from gic_runtime.errors import ConfigurationError
from gic_runtime.handles import BucketState, ChangelogHandle, SnapshotHandle

#: Integers per changelog handle in a bucket entry's ``changelog`` list.
ROW: Final = 5
#: Hex digits per handle in a bucket entry's ``crc`` string.
CRC_DIGITS: Final = 8
#: Integers in a snapshot row ``[object, seq, size, crc]``.
SNAPSHOT_ROW: Final = 4

_FIELDS: Final = ("bucket", "changelog", "crc", "seq", "snapshot", "token")
_INT: Final = frozenset({int})


class _Interner:
    """Indexes of distinct strings, in order of first use."""

    def __init__(self, transform: Callable[[str], str]) -> None:
        self.index: dict[str, int] = {}
        self.values: list[str] = []
        self._transform = transform

    def ref(self, value: str) -> int:
        found = self.index.get(value)
        if found is None:
            found = self.index[value] = len(self.values)
            self.values.append(self._transform(value))
        return found


def encode_buckets(
    states: Iterable[BucketState], relativize: Callable[[str], str]
) -> tuple[list[str], list[str], list[dict[str, Any]]]:
    """``(objects, tokens, entries)`` of the v2 body for ``states`` (ascending bucket).

    ``relativize`` maps a full object URI to the name written in ``objects``; it is
    called once per distinct object. Raises :class:`ConfigurationError` for a state the
    format cannot represent: a handle or snapshot of another bucket, or a CRC outside
    ``[0, 2**32)``.
    """
    objects = _Interner(relativize)
    tokens = _Interner(str)
    ends: dict[int, int] = {}
    entries: list[dict[str, Any]] = []
    for state in states:
        bucket = state.bucket
        snap = state.snapshot
        snapshot_row: list[int] | None = None
        prev = 0
        if snap is not None:
            if snap.bucket != bucket:
                raise ConfigurationError(
                    f"bucket {bucket} references snapshot {snap.uri} of bucket {snap.bucket}; "
                    "a bucket's state can only hold its own snapshot"
                )
            snapshot_row = [objects.ref(snap.uri), snap.seq, snap.size, snap.crc]
            prev = snap.seq
        rows: list[int] = []
        crcs: list[int] = []
        for h in state.changelog:
            if h.bucket != bucket:
                raise ConfigurationError(
                    f"bucket {bucket} references a changelog section of bucket {h.bucket} "
                    f"in {h.uri}; a bucket's state can only hold its own sections"
                )
            o = objects.ref(h.uri)
            rows += (
                o,
                h.offset - ends.get(o, 0),
                h.length,
                h.from_seq - prev,
                h.to_seq - h.from_seq,
            )
            ends[o] = h.offset + h.length
            prev = h.to_seq
            crcs.append(h.crc)
        try:
            crc_hex = struct.pack(f">{len(crcs)}I", *crcs).hex()
        except struct.error as exc:
            raise ConfigurationError(
                f"bucket {bucket} has a changelog CRC outside [0, 2**32): {exc}"
            ) from exc
        entries.append(
            {
                "bucket": bucket,
                "seq": state.seq,
                "token": tokens.ref(state.token),
                "snapshot": snapshot_row,
                "changelog": rows,
                "crc": crc_hex,
            }
        )
    return objects.values, tokens.values, entries


def decode_buckets(entries: Any, objects: Sequence[str], tokens: Any) -> dict[int, BucketState]:
    """Bucket states from a v2 ``buckets`` list; ``objects`` are already resolved to
    full URIs, ``tokens`` is the body's ``tokens`` list as parsed.

    Raises ``ValueError`` naming the bucket entry and what is wrong with it.
    """
    if not isinstance(entries, list):
        raise ValueError("buckets must be a JSON list")
    if not isinstance(tokens, list) or not all(isinstance(t, str) for t in tokens):
        raise ValueError("tokens must be a JSON list of strings")
    ends = [0] * len(objects)
    out: dict[int, BucketState] = {}
    for n, entry in enumerate(entries):
        if not isinstance(entry, dict):
            raise ValueError(f"bucket entry {n} is not a JSON object")
        missing = [f for f in _FIELDS if f not in entry]
        if missing:
            raise ValueError(f"bucket entry {n} is missing field {missing[0]!r}")
        bucket = _int(entry["bucket"], f"bucket entry {n}: bucket")
        where = f"bucket {bucket}"
        if bucket in out:
            raise ValueError(f"{where} appears more than once")
        seq = _int(entry["seq"], f"{where}: seq")
        token = _index(entry["token"], len(tokens), f"{where}: token", "tokens")
        snapshot = _snapshot(entry["snapshot"], bucket, objects, where)
        rows = entry["changelog"]
        crc_hex = entry["crc"]
        if not isinstance(rows, list) or len(rows) % ROW:
            got = f"{len(rows)} values" if isinstance(rows, list) else type(rows).__name__
            raise ValueError(
                f"{where}: changelog must hold rows of {ROW} integers "
                f"[object, offset_gap, length, from_gap, count], got {got}"
            )
        count = len(rows) // ROW
        crcs = _crcs(crc_hex, count, where)
        if not _INT.issuperset(map(type, rows)):
            bad = next(v for v in rows if type(v) is not int)
            raise ValueError(f"{where}: changelog holds a non-integer {bad!r}")
        handles: list[ChangelogHandle] = []
        prev = snapshot.seq if snapshot is not None else 0
        nobj = len(objects)
        it = iter(rows)
        for o, gap, length, from_gap, span, crc in zip(it, it, it, it, it, crcs, strict=True):
            if not 0 <= o < nobj:
                raise ValueError(
                    f"{where}: changelog row {len(handles)} names object {o}, but the "
                    f"objects table has {nobj} entries"
                )
            offset = ends[o] + gap
            ends[o] = offset + length
            from_seq = prev + from_gap
            prev = from_seq + span
            handles.append(ChangelogHandle(objects[o], offset, length, bucket, from_seq, prev, crc))
        out[bucket] = BucketState(bucket, seq, snapshot, tuple(handles), tokens[token])
    return out


def _snapshot(row: Any, bucket: int, objects: Sequence[str], where: str) -> SnapshotHandle | None:
    if row is None:
        return None
    if (
        not isinstance(row, list)
        or len(row) != SNAPSHOT_ROW
        or any(type(v) is not int for v in row)
    ):
        raise ValueError(
            f"{where}: snapshot must be null or [object, seq, size, crc] (4 integers), "
            f"got {row!r:.80}"
        )
    o, seq, size, crc = row
    _index(o, len(objects), f"{where}: snapshot", "objects")
    return SnapshotHandle(objects[o], bucket, seq, size, crc)


def _crcs(value: Any, count: int, where: str) -> tuple[int, ...]:
    if not isinstance(value, str) or len(value) != CRC_DIGITS * count:
        got = f"{len(value)} characters" if isinstance(value, str) else type(value).__name__
        raise ValueError(
            f"{where}: crc must be {CRC_DIGITS} hex digits per changelog row "
            f"({CRC_DIGITS * count} for {count} rows), got {got}"
        )
    try:
        return struct.unpack(f">{count}I", bytes.fromhex(value))
    except (ValueError, struct.error):
        raise ValueError(f"{where}: crc {value[:24]!r} is not hexadecimal") from None


def _index(value: Any, size: int, what: str, table: str) -> int:
    if type(value) is not int or not 0 <= value < size:
        raise ValueError(f"{what} names entry {value!r} of {table}, which has {size} entries")
    return value


def _int(value: Any, what: str) -> int:
    if type(value) is not int:
        raise ValueError(f"{what} must be an integer, got {value!r:.40}")
    return value
