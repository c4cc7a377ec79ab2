"""Immutable references to durable objects, as stored in manifests.

Objects are named by full URI (``file:///...`` or ``s3://...``) so one manifest can
reference files under several roots (its own job directory and a claimed restore
source). Sequence numbers are per bucket: the n-th change ever applied to a bucket's
lineage has sequence number n (starting at 0). Ranges are half-open ``[from, to)``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class ChangelogHandle:
    """One bucket's section inside a changelog segment object.

    Invariant: the section at ``[offset, offset + length)`` of ``uri`` holds exactly the
    changes with sequence numbers ``[from_seq, to_seq)`` of ``bucket``, and its payload
    checksum is ``crc``.
    """

    uri: str
    offset: int
    length: int
    bucket: int
    from_seq: int
    to_seq: int
    crc: int

    def to_json(self) -> dict[str, Any]:
        return {
            "uri": self.uri,
            "offset": self.offset,
            "length": self.length,
            "bucket": self.bucket,
            "from_seq": self.from_seq,
            "to_seq": self.to_seq,
            "crc": self.crc,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ChangelogHandle:
        return cls(
            uri=str(data["uri"]),
            offset=int(data["offset"]),
            length=int(data["length"]),
            bucket=int(data["bucket"]),
            from_seq=int(data["from_seq"]),
            to_seq=int(data["to_seq"]),
            crc=int(data["crc"]),
        )


@dataclass(frozen=True, slots=True)
class SnapshotHandle:
    """A materialized snapshot: the full state of ``bucket`` after every change with a
    sequence number below ``seq`` (and none at or above it)."""

    uri: str
    bucket: int
    seq: int
    size: int
    crc: int

    def to_json(self) -> dict[str, Any]:
        return {
            "uri": self.uri,
            "bucket": self.bucket,
            "seq": self.seq,
            "size": self.size,
            "crc": self.crc,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> SnapshotHandle:
        return cls(
            uri=str(data["uri"]),
            bucket=int(data["bucket"]),
            seq=int(data["seq"]),
            size=int(data["size"]),
            crc=int(data["crc"]),
        )


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

    bucket: int
    seq: int
    snapshot: SnapshotHandle | None = None
    changelog: tuple[ChangelogHandle, ...] = ()
    token: str = ""

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
        return {
            "bucket": self.bucket,
            "seq": self.seq,
            "snapshot": self.snapshot.to_json() if self.snapshot else None,
            "changelog": [h.to_json() for h in self.changelog],
            "token": self.token,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> BucketState:
        snap = data.get("snapshot")
        return cls(
            bucket=int(data["bucket"]),
            seq=int(data["seq"]),
            snapshot=SnapshotHandle.from_json(snap) if snap else None,
            changelog=tuple(ChangelogHandle.from_json(h) for h in data.get("changelog", [])),
            token=str(data.get("token", "")),
        )
