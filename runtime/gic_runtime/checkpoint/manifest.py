"""The manifest model: what one completed checkpoint (or savepoint) consists of.

A manifest is an immutable value. It names, per bucket, the snapshot and changelog
sections needed to rebuild the bucket (:class:`~gic_runtime.handles.BucketState`), plus
what the engine (Spark offsets / commit entries) and the sink need to resume, and where
the state came from when the job was restored (:class:`RestoreLineage`).

Invariants checked on construction (an invalid manifest is never built, read or
written):

* ``checkpoint_id >= 0``, ``epoch >= 0``, ``num_buckets >= 1``;
* every key of ``buckets`` equals its value's ``bucket`` and lies in ``[0, num_buckets)``;
* ``kind == SAVEPOINT`` exactly when ``savepoint`` is set.

The serialized form lives in :mod:`gic_runtime.checkpoint.manifest_codec` (the JSON form of
:class:`SavepointInfo` and :class:`RestoreLineage` is their fields, by
:mod:`gic_runtime.codec`); reading and writing manifests on storage in
:mod:`gic_runtime.checkpoint.catalog`.
"""

from __future__ import annotations

import copy
import dataclasses
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from types import MappingProxyType
from typing import Any

from gic_runtime import codec
from gic_runtime.codec import Flag, Int, Text, json_record
from gic_runtime.errors import ConfigurationError
from gic_runtime.event_time import NO_PROGRESS, EventTimeProgress
from gic_runtime.handles import BucketState

#: Manifest format version written by this runtime (docs/architecture.md §4.4).
FORMAT_VERSION = 2
#: Versions this runtime can read: v1 (a handle per JSON object) and v2 (compact tables).
SUPPORTED_VERSIONS = frozenset({1, 2})


class ManifestKind(StrEnum):
    """Whether a manifest completes a checkpoint of the job timeline or is a savepoint."""

    CHECKPOINT = "checkpoint"
    SAVEPOINT = "savepoint"


class SavepointType(StrEnum):
    """Intermediate savepoints leave the job running and are never part of its checkpoint
    timeline; a terminal savepoint (stop-with-savepoint) is the job's last act."""

    INTERMEDIATE = "intermediate"
    TERMINAL = "terminal"


class SavepointFormat(StrEnum):
    """Native: the checkpoint's own files duplicated. Canonical: a portable export."""

    NATIVE = "native"
    CANONICAL = "canonical"


class RestoreMode(StrEnum):
    """Claim: the restoring job owns the source's files from then on. No-claim: it never
    deletes them and stops referencing them after its first completed checkpoint."""

    CLAIM = "claim"
    NO_CLAIM = "no-claim"


@json_record("savepoint properties", required=("format",))
@dataclass(frozen=True, slots=True)
class SavepointInfo:
    """Properties of a savepoint manifest."""

    type: SavepointType
    format: SavepointFormat = SavepointFormat.NATIVE

    def to_json(self) -> dict[str, Any]:
        return codec.to_json(self)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> SavepointInfo:
        return codec.from_json(cls, data)


@json_record("restore lineage", required=("released",))
@dataclass(frozen=True, slots=True)
class RestoreLineage:
    """Where a restored job's state came from.

    ``source_uri`` is the URI of the source manifest (a checkpoint's or a savepoint's),
    ``source_checkpoint_id`` that manifest's checkpoint id. ``released`` is true once the
    manifest carrying this lineage references no object of the source
    (docs/architecture.md I6: from then on a no-claim source may be deleted by its owner).
    """

    source_uri: Text
    mode: RestoreMode
    source_checkpoint_id: Int
    released: Flag = False

    def to_json(self) -> dict[str, Any]:
        return codec.to_json(self)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> RestoreLineage:
        return codec.from_json(cls, data)


def _frozen_json(value: Mapping[str, Any]) -> Mapping[str, Any]:
    return MappingProxyType(copy.deepcopy(dict(value)))


@dataclass(frozen=True, slots=True)
class Manifest:
    """One completed checkpoint or savepoint of a job (see the module docstring).

    ``buckets`` is a read-only mapping; ``engine``, ``sink`` and ``query`` are read-only
    views of deep copies of free-form JSON objects (the caller's dicts can change afterwards
    without affecting the manifest). Objects are named by full URI everywhere in the
    model; relative naming exists only in the serialized form.
    """

    job_id: str
    checkpoint_id: int
    epoch: int
    created_at: float
    num_buckets: int
    buckets: Mapping[int, BucketState]
    kind: ManifestKind = ManifestKind.CHECKPOINT
    savepoint: SavepointInfo | None = None
    engine: Mapping[str, Any] = field(default_factory=dict)
    sink: Mapping[str, Any] = field(default_factory=dict)
    restored_from: RestoreLineage | None = None
    version: int = FORMAT_VERSION
    query: Mapping[str, Any] | None = None
    """Fingerprint of the query that wrote the checkpoint (a free JSON object, see
    :mod:`gic_runtime.query`); ``None`` in manifests written without one."""
    event_time: EventTimeProgress = NO_PROGRESS
    """How far the job's event time had come when the checkpoint completed (its
    watermark; :mod:`gic_runtime.event_time`); empty for jobs without event time."""

    def __post_init__(self) -> None:
        if self.checkpoint_id < 0 or self.epoch < 0:
            raise ConfigurationError(
                f"manifest of job {self.job_id!r}: checkpoint id ({self.checkpoint_id}) and "
                f"epoch ({self.epoch}) must be >= 0"
            )
        if not math.isfinite(self.created_at):
            raise ConfigurationError(
                f"manifest of checkpoint {self.checkpoint_id}: created_at must be finite"
            )
        if self.num_buckets < 1:
            raise ConfigurationError(
                f"manifest of checkpoint {self.checkpoint_id}: num_buckets must be >= 1, "
                f"got {self.num_buckets}"
            )
        for key, state in self.buckets.items():
            if key != state.bucket or not 0 <= key < self.num_buckets:
                raise ConfigurationError(
                    f"manifest of checkpoint {self.checkpoint_id}: bucket entry {key} holds "
                    f"the state of bucket {state.bucket}; keys must equal the bucket and lie "
                    f"in [0, {self.num_buckets})"
                )
        if (self.kind is ManifestKind.SAVEPOINT) != (self.savepoint is not None):
            raise ConfigurationError(
                f"manifest of checkpoint {self.checkpoint_id}: kind {self.kind.value!r} "
                f"{'requires' if self.savepoint is None else 'forbids'} savepoint properties"
            )
        if self.version not in SUPPORTED_VERSIONS:
            raise ConfigurationError(f"unsupported manifest version {self.version}")
        ordered = dict(sorted(self.buckets.items()))
        object.__setattr__(self, "buckets", MappingProxyType(ordered))
        object.__setattr__(self, "engine", _frozen_json(self.engine))
        object.__setattr__(self, "sink", _frozen_json(self.sink))
        if self.query is not None:
            object.__setattr__(self, "query", _frozen_json(self.query))

    @property
    def is_savepoint(self) -> bool:
        return self.kind is ManifestKind.SAVEPOINT

    def uris(self) -> frozenset[str]:
        """Every object this manifest references (not including the manifest itself)."""
        out: set[str] = set()
        for state in self.buckets.values():
            out |= state.uris()
        return frozenset(out)

    def __hash__(self) -> int:
        return hash((self.job_id, self.checkpoint_id, self.epoch, self.kind))


@dataclass(frozen=True, slots=True)
class StoredManifest:
    """A manifest together with the URI it is (or will be) stored at."""

    uri: str
    manifest: Manifest
    size: int | None = field(default=None, compare=False)
    """Bytes of the manifest's encoding where this process wrote it
    (:func:`~gic_runtime.checkpoint.catalog.write_manifest`); None where it was read or
    built. Not part of equality: the same manifest read back compares equal."""

    @property
    def checkpoint_id(self) -> int:
        return self.manifest.checkpoint_id


def map_uris(manifest: Manifest, fn: Callable[[str], str]) -> Manifest:
    """A copy of ``manifest`` whose every object URI ``u`` is replaced by ``fn(u)``."""
    buckets = {b: _map_state(state, fn) for b, state in manifest.buckets.items()}
    return dataclasses.replace(manifest, buckets=buckets)


def _map_state(state: BucketState, fn: Callable[[str], str]) -> BucketState:
    snapshot = state.snapshot
    if snapshot is not None:
        snapshot = dataclasses.replace(snapshot, uri=fn(snapshot.uri))
    changelog = tuple(dataclasses.replace(h, uri=fn(h.uri)) for h in state.changelog)
    return dataclasses.replace(state, snapshot=snapshot, changelog=changelog)
