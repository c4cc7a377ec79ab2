"""Immutable references to durable objects, as stored in manifests.

Objects are named by full URI (``file:///...`` or ``s3://...``) so one manifest can
reference files under several roots (its own job directory and a claimed restore
source). Sequence numbers are per bucket: the n-th change ever applied to a bucket's
lineage has sequence number n (starting at 0). Ranges are half-open ``[from, to)``.

Their JSON form (in task acks, v1 manifests, materialization records) is their fields,
by :mod:`gic_runtime.codec`: ``to_json`` / ``from_json`` (a
:class:`~gic_runtime.codec.RecordError` names a missing or invalid field). A bucket
state's ``snapshot``, ``changelog`` and ``token`` may be absent (none, none, ``""``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from gic_runtime import codec
from gic_runtime.codec import Int, Text, json_record


@json_record("changelog handle")
@dataclass(frozen=True, slots=True)
class ChangelogHandle:
    """One bucket's section inside a changelog segment object.

    Invariant: the section at ``[offset, offset + length)`` of ``uri`` holds exactly the
    changes with sequence numbers ``[from_seq, to_seq)`` of ``bucket``, and its payload
    checksum is ``crc``.
    """

    uri: Text
    offset: Int
    length: Int
    bucket: Int
    from_seq: Int
    to_seq: Int
    crc: Int

    def to_json(self) -> dict[str, Any]:
        return codec.to_json(self)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ChangelogHandle:
        return codec.from_json(cls, data)


@json_record("snapshot handle")
@dataclass(frozen=True, slots=True)
class SnapshotHandle:
    """A materialized snapshot: the full state of ``bucket`` after every change with a
    sequence number below ``seq`` (and none at or above it)."""

    uri: Text
    bucket: Int
    seq: Int
    size: Int
    crc: Int

    def to_json(self) -> dict[str, Any]:
        return codec.to_json(self)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> SnapshotHandle:
        return codec.from_json(cls, data)


@json_record("bucket state")
@dataclass(frozen=True, slots=True)
class BucketState:
    """What a checkpoint needs to rebuild one bucket.

    Invariant: restoring ``snapshot`` (or empty state when ``None``, i.e. ``base = 0``)
    and replaying the changes of ``changelog`` with sequence numbers in ``[base, seq)``
    yields the bucket's state at ``seq``. ``changelog`` is sorted by ``from_seq`` and
    covers ``[base, seq)`` without gaps (sections may start below ``base``; replay skips
    those changes). ``token`` names the last durable object of the lineage, so two
    histories that reach the same ``seq`` differently are told apart.
    """

    bucket: Int
    seq: Int
    snapshot: SnapshotHandle | None = None
    changelog: tuple[ChangelogHandle, ...] = ()
    token: Text = ""

    @property
    def base(self) -> int:
        """Sequence number the snapshot covers up to (0 without a snapshot)."""
        return self.snapshot.seq if self.snapshot is not None else 0

    def uris(self) -> set[str]:
        """Every object this bucket state references."""
        out = {h.uri for h in self.changelog}
        if self.snapshot is not None:
            out.add(self.snapshot.uri)
        return out

    def to_json(self) -> dict[str, Any]:
        return codec.to_json(self)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> BucketState:
        return codec.from_json(cls, data)
