"""Which checkpoint manifests count: fencing claims and the manifests they supersede.

A launch of a job claims its epoch ``E`` in two write-once steps
(:func:`gic_runtime.fencing.claim_epoch`)::

    <root>/jobs/<job_id>/epochs/epoch-<E:012d>          marker: E is taken
    <root>/jobs/<job_id>/epochs/epoch-<E:012d>.start    start record (GICB): S

From the marker on, every driver of a lower epoch is fenced at its next check. After
the marker exists, the claimer lists the checkpoints and records ``S``, the id of the
newest checkpoint that counts at that moment (``-1``: none). A manifest is *superseded*
when it was written by an epoch ``e`` and a claim above ``e`` started from a lower
checkpoint than the manifest's id::

    superseded(e, n)  <=>  some epoch E > e has a start record with S(E) < n

Such a manifest was not there when ``E`` listed the checkpoints, so it landed after
``E``'s marker existed: its writer had been superseded (a zombie's late PUT). It never
counts as a completed checkpoint: restore ignores it, and the sweep deletes what only it
references (the file itself once its id is below the retained ones; until then its name
is never written again, see :mod:`gic_runtime.checkpoint.catalog`).

A claimer also records the start of every lower claim that has a marker but no start
record yet (its claimer died, or is slow), with the same ``S`` and create-if-absent,
before recording its own; if such a record appears first, it lists again. So when a
claim's record exists, every lower claim whose marker it listed has one too, and ``S``
was computed with all of those known.

Invariants:

* Start records are write-once and never deleted, so a superseded manifest stays
  superseded.
* A manifest that was present and counted when a claim listed the checkpoints is never
  superseded by that claim (``n <= S``), nor by a later one (the newest counting
  checkpoint never moves back, so later claims record ``S`` at least as high).
* Epochs whose markers predate start records (older runtimes) supersede nothing until
  a claim records their start.
* The ``epochs/`` directory is listed with a bound (:func:`epoch_file_names`): more
  than :data:`MAX_EPOCH_OBJECTS` objects there raise
  :class:`~gic_runtime.errors.TooManyObjectsError`, so claiming, fencing checks and the
  sweeps' claim checks stay bounded whatever a driver wrote there.

Thread-safety: :class:`Claims` caches what it read and is for one thread; the
functions are stateless.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Final

from gic_runtime.errors import CorruptFileError
from gic_runtime.formats import decode_text_record, encode_text_record, load_json
from gic_runtime.layout import epoch_start_uri, epochs_dir, parse_epoch, parse_epoch_start
from gic_runtime.storage.listing import list_bounded
from gic_runtime.storage.object_store import read_bounded
from gic_runtime.storage.uri import StoreResolver

START_MAGIC: Final = "GICB"
START_VERSION: Final = 1
SUPPORTED_START_VERSIONS: Final = frozenset({1})
NO_CHECKPOINT: Final = -1
"""``start_checkpoint`` of a launch that starts without any checkpoint of its own."""
CLAIM_RECORD_MAX_BYTES: Final = 64 * 1024
"""Largest epoch marker or start record a reader accepts (real ones are ~150 bytes)."""
MAX_EPOCH_OBJECTS: Final = 100_000
"""Most objects a job's ``epochs/`` directory may hold. Each launch of the job (and each
``gic gc``) adds two, a marker and a start record: 50,000 launches is more than a job
restarted every ten minutes for a year, and listing them costs 100 LIST requests."""

_EPOCHS_HINT: Final = (
    "each launch of the job adds two files there, so no job comes near this: move out "
    "what another process put there (files other than epoch-<N> markers and their "
    ".start records), keeping every marker and start record"
)


@dataclass(frozen=True, slots=True)
class EpochStart:
    """Where epoch ``epoch`` starts: the newest checkpoint that counted when its start
    was recorded (``NO_CHECKPOINT`` for none), recorded by ``recorded_by`` (the claimer,
    or a later claimer that found the claim without a record)."""

    epoch: int
    start_checkpoint: int
    recorded_by: str
    recorded_at: float

    def __post_init__(self) -> None:
        if self.epoch < 1:
            raise ValueError(f"epochs start at 1, got {self.epoch}")
        if self.start_checkpoint < NO_CHECKPOINT:
            raise ValueError(f"start checkpoint must be >= -1, got {self.start_checkpoint}")

    def encode(self) -> bytes:
        body = {
            "epoch": self.epoch,
            "start_checkpoint": self.start_checkpoint,
            "recorded_by": self.recorded_by,
            "recorded_at": self.recorded_at,
        }
        text = json.dumps(body, indent=1, sort_keys=True, allow_nan=False)
        return encode_text_record(START_MAGIC, START_VERSION, text.encode("ascii"))

    @classmethod
    def decode(cls, data: bytes, uri: str) -> EpochStart:
        """Parse a stored start record; errors (:class:`CorruptFileError`,
        :class:`~gic_runtime.errors.UnsupportedVersionError`) name ``uri``."""
        _, payload = decode_text_record(
            data, START_MAGIC, SUPPORTED_START_VERSIONS, what="GIC claim start record", uri=uri
        )
        body = load_json(payload, what="GIC claim start record", uri=uri)
        try:
            record = cls(
                epoch=_int(body["epoch"]),
                start_checkpoint=_int(body["start_checkpoint"]),
                recorded_by=str(body["recorded_by"]),
                recorded_at=float(body["recorded_at"]),
            )
        except (ValueError, TypeError, KeyError) as exc:
            raise CorruptFileError(f"claim start record is malformed: {exc!r}", uri=uri) from exc
        if parse_epoch_start(uri) != record.epoch:
            raise CorruptFileError(
                f"start record is named {uri.rsplit('/', 1)[-1]!r} but holds epoch "
                f"{record.epoch}; records are never renamed: move it away",
                uri=uri,
            )
        return record


def _int(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"expected an integer, got {value!r}")
    return value


def superseding_claim(epoch: int, checkpoint_id: int, starts: Mapping[int, int]) -> int | None:
    """The lowest epoch whose claim supersedes checkpoint ``checkpoint_id`` written by
    ``epoch``, or ``None`` when the manifest counts (the rule of the module docstring).

    ``starts`` maps each epoch with a start record to its start checkpoint; only epochs
    above ``epoch`` are looked up, lowest first, so a lazy mapping reads no more
    records than it must.
    """
    for claim in sorted(e for e in starts if e > epoch):
        if checkpoint_id > starts[claim]:
            return claim
    return None


def read_start(resolver: StoreResolver, root: str, job_id: str, epoch: int) -> EpochStart:
    """The start record of ``epoch`` (ObjectNotFoundError when it has none yet)."""
    uri = epoch_start_uri(root, job_id, epoch)
    store, key = resolver.resolve(uri)
    data = read_bounded(store, key, CLAIM_RECORD_MAX_BYTES, what="claim start record")
    return EpochStart.decode(data, uri)


def epoch_file_names(resolver: StoreResolver, root: str, job_id: str) -> list[str]:
    """Names of the files directly in the job's ``epochs/`` directory, in key order (one
    bounded LIST: :class:`~gic_runtime.errors.TooManyObjectsError` past
    :data:`MAX_EPOCH_OBJECTS` objects, counting those in subdirectories)."""
    store, key = resolver.resolve(epochs_dir(root, job_id).rstrip("/"))
    prefix = key.rstrip("/") + "/"
    names = []
    for info in list_bounded(store, prefix, MAX_EPOCH_OBJECTS, hint=_EPOCHS_HINT):
        name = info.key[len(prefix) :]
        if "/" not in name:
            names.append(name)
    return names


class Claims(Mapping[int, int]):
    """The claims of job ``job_id`` as one LIST of its ``epochs/`` directory saw them.

    As a mapping: every epoch with a start record -> its start checkpoint; a record is
    read (and cached) when first looked up. ``markers`` are the claimed epochs,
    :attr:`pending` those without a start record. One thread.
    """

    def __init__(self, resolver: StoreResolver, root: str, job_id: str) -> None:
        self._resolver = resolver
        self._root = root
        self._job_id = job_id
        markers: set[int] = set()
        recorded: set[int] = set()
        for name in epoch_file_names(resolver, root, job_id):
            marker = parse_epoch(name)
            if marker is not None:
                markers.add(marker)
            start = parse_epoch_start(name)
            if start is not None:
                recorded.add(start)
        self.markers: frozenset[int] = frozenset(markers)
        self.recorded: frozenset[int] = frozenset(recorded)
        self._records: dict[int, EpochStart] = {}

    @property
    def pending(self) -> tuple[int, ...]:
        """Claimed epochs without a start record, ascending."""
        return tuple(sorted(self.markers - self.recorded))

    @property
    def highest(self) -> int:
        """The highest claimed epoch (0: none)."""
        return max(self.markers, default=0)

    def record(self, epoch: int) -> EpochStart:
        """The start record of ``epoch`` (which must be in :attr:`recorded`)."""
        cached = self._records.get(epoch)
        if cached is None:
            cached = read_start(self._resolver, self._root, self._job_id, epoch)
            self._records[epoch] = cached
        return cached

    def superseded_by(self, epoch: int, checkpoint_id: int) -> int | None:
        """The epoch superseding checkpoint ``checkpoint_id`` of ``epoch``, else None."""
        return superseding_claim(epoch, checkpoint_id, self)

    def __contains__(self, epoch: object) -> bool:
        return epoch in self.recorded

    def __getitem__(self, epoch: int) -> int:
        if epoch not in self.recorded:
            raise KeyError(epoch)
        return self.record(epoch).start_checkpoint

    def __iter__(self) -> Iterator[int]:
        return iter(sorted(self.recorded))

    def __len__(self) -> int:
        return len(self.recorded)
