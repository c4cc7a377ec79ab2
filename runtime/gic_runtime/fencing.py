"""Fencing epochs: each driver launch of a job claims a strictly higher epoch.

::

    <root>/jobs/<job_id>/epochs/epoch-<epoch:012d>          write-once marker (GICE record)
    <root>/jobs/<job_id>/epochs/epoch-<epoch:012d>.start    write-once start record (GICB)

Claiming epoch ``E`` is creating its marker with create-if-absent, so two launches can
never hold the same epoch. A driver holding ``E`` checks its :class:`Fence` once during
each batch (a check started with the batch, beside its stage, that stands for the check
before the manifest write) and again after the manifest landed
(:class:`~gic_runtime.driver.timeline.CheckpointTimeline`): as soon as any marker
above ``E`` exists, it has been superseded, raises :class:`~gic_runtime.errors.FencedError`
and stops -- after a manifest write, before registering, publishing or deleting
anything for it. Only the check after the write is needed for correctness (below); the
one before it only spares a superseded driver a manifest that cannot count.

A check before a write cannot stop the write from landing later (a paused process, a PUT
retried after a timeout). So a claim also records where the new launch starts: after
the marker exists, the claimer lists the job's checkpoints and writes the start record
holding the newest checkpoint that counts. A manifest of a lower epoch with a higher id
landed after that listing and never counts (:mod:`gic_runtime.checkpoint.claims`), so
a superseded driver's late manifest can never become a restore point, whatever order
the writes land in. The post-write check closes the remaining window: a manifest whose
writer saw no higher marker after it landed was present when any later claim listed the
checkpoints, so it counts.

Claim protocol for epoch ``E`` (:func:`claim_epoch`):

1. create marker ``E`` (from now on every lower epoch is fenced at its next check);
2. list ``epochs/`` and find the newest checkpoint that counts (``-1``: none);
3. record that start for every lower claim that has no start record yet (its claimer
   died or is slow), create-if-absent; if one appeared meanwhile, go back to 2;
4. create ``E``'s start record; finding one there already (a later claimer recorded
   it, or this is a retried claim) is fine: it was computed after ``E``'s marker.

Invariants:

* Epochs start at 1 (0 means "none claimed yet") and markers and start records are
  never deleted or rewritten, so the highest marker only ever grows.
* :func:`claim_epoch` without an epoch returns one above every marker it saw, and
  distinct calls never return the same epoch. A given epoch must be above every
  existing marker; finding its marker already created by the same ``claimed_by`` is
  success (a retried claim whose first attempt landed), by anyone else is fencing.
  ``claimed_by`` must therefore identify the launch (e.g. pod name or host and pid).
* A claim that returned has a start record, and so has every lower claim whose marker
  it listed.
* Marker names are the truth for fencing: :meth:`Fence.check` is a single LIST of the
  epochs prefix and reads no marker bodies (they record who claimed and when, for
  humans).

Thread-safety: stateless functions; a :class:`Fence` is immutable and may be shared.
"""

from __future__ import annotations

import threading
from concurrent.futures import Future
from dataclasses import dataclass

from gic_runtime.checkpoint.catalog import newest_counting_checkpoint
from gic_runtime.checkpoint.claims import (
    CLAIM_RECORD_MAX_BYTES,
    Claims,
    EpochStart,
    epoch_file_names,
)
from gic_runtime.checkpoint.manifest_limits import DRIVER_LIMITS, ManifestLimits
from gic_runtime.clock import Clock, SystemClock
from gic_runtime.control.envelope import (
    decode_record,
    encode_record,
    field_float,
    field_int,
    field_str,
    parse_body,
)
from gic_runtime.errors import (
    ConfigurationError,
    CorruptFileError,
    FencedError,
    ObjectExistsError,
)
from gic_runtime.layout import (
    epoch_marker_uri,
    epoch_start_uri,
    epochs_dir,
    parse_epoch,
    validate_id,
)
from gic_runtime.storage.object_store import read_bounded
from gic_runtime.storage.uri import StoreResolver
from gic_runtime.storage.writes import create_once

__all__ = [
    "FORMAT_VERSION",
    "MAGIC",
    "MAX_CLAIM_ATTEMPTS",
    "SUPPORTED_VERSIONS",
    "EpochMarker",
    "Fence",
    "claim_epoch",
    "epoch_marker_uri",
    "epochs_dir",
    "highest_epoch",
    "list_epochs",
    "parse_epoch",
    "read_marker",
]

MAGIC = "GICE"
FORMAT_VERSION = 1
SUPPORTED_VERSIONS = frozenset({1})
#: Auto-claims give up after this many create collisions in a row (each one means
#: another launch claimed the epoch just tried; so many in a row means a claim storm).
MAX_CLAIM_ATTEMPTS = 64


@dataclass(frozen=True, slots=True)
class EpochMarker:
    """Who claimed ``epoch`` and when (seconds since the Unix epoch)."""

    epoch: int
    claimed_at: float
    claimed_by: str

    def encode(self) -> bytes:
        body = {"epoch": self.epoch, "claimed_at": self.claimed_at, "claimed_by": self.claimed_by}
        return encode_record(MAGIC, FORMAT_VERSION, body, what=f"epoch marker {self.epoch}")

    @classmethod
    def decode(cls, data: bytes, uri: str) -> EpochMarker:
        """Parse a stored marker; errors name ``uri``."""
        _, body = decode_record(
            data, MAGIC, SUPPORTED_VERSIONS, what="GIC fencing-epoch marker", uri=uri
        )
        marker = parse_body(
            lambda: cls(
                epoch=field_int(body, "epoch", minimum=1),
                claimed_at=field_float(body, "claimed_at"),
                claimed_by=field_str(body, "claimed_by"),
            ),
            what="fencing-epoch marker",
            uri=uri,
        )
        if parse_epoch(uri) != marker.epoch:
            raise CorruptFileError(
                f"marker is named {uri.rsplit('/', 1)[-1]!r} but holds epoch {marker.epoch}; "
                "markers are never renamed: move it away",
                uri=uri,
            )
        return marker


def list_epochs(resolver: StoreResolver, root: str, job_id: str) -> list[int]:
    """Every claimed epoch of the job, ascending (one bounded LIST, no reads:
    :func:`~gic_runtime.checkpoint.claims.epoch_file_names`)."""
    epochs = []
    for name in epoch_file_names(resolver, root, job_id):
        epoch = parse_epoch(name)
        if epoch is not None:
            epochs.append(epoch)
    return sorted(epochs)


def highest_epoch(resolver: StoreResolver, root: str, job_id: str) -> int:
    """The highest claimed epoch of the job, 0 when none was ever claimed."""
    return max(list_epochs(resolver, root, job_id), default=0)


def read_marker(resolver: StoreResolver, root: str, job_id: str, epoch: int) -> EpochMarker:
    """The marker of ``epoch`` (raises ObjectNotFoundError if it was never claimed)."""
    uri = epoch_marker_uri(root, job_id, epoch)
    store, key = resolver.resolve(uri)
    data = read_bounded(store, key, CLAIM_RECORD_MAX_BYTES, what="fencing-epoch marker")
    return EpochMarker.decode(data, uri)


def claim_epoch(
    resolver: StoreResolver,
    root: str,
    job_id: str,
    *,
    epoch: int | None = None,
    claimed_by: str,
    clock: Clock | None = None,
    limits: ManifestLimits = DRIVER_LIMITS,
) -> int:
    """Claim a fencing epoch for a new launch of ``job_id``; return it.

    ``epoch=None`` claims the next one above the highest existing marker (retrying when
    another launch takes it first). A given ``epoch`` (``>= 1``, e.g. assigned by the
    operator) must be higher than every existing marker. Either way the claim's start is
    recorded (see the module docstring) before it returns. Raises :class:`FencedError`
    when a given epoch is not claimable, see the module docstring. The checkpoint
    manifests step 2 reads are read within ``limits``.
    """
    validate_id("job id", job_id)
    if not claimed_by:
        raise ConfigurationError("claim_epoch needs claimed_by naming the launch (pod, host:pid)")
    now = (clock or SystemClock()).wall()
    if epoch is not None:
        claimed = _claim_given(resolver, root, job_id, epoch=epoch, claimed_by=claimed_by, now=now)
        _record_start(resolver, root, job_id, claimed, claim=(claimed_by, now), limits=limits)
        return claimed
    for _ in range(MAX_CLAIM_ATTEMPTS):
        candidate = highest_epoch(resolver, root, job_id) + 1
        if _create(resolver, root, job_id, EpochMarker(candidate, now, claimed_by)):
            _record_start(resolver, root, job_id, candidate, claim=(claimed_by, now), limits=limits)
            return candidate
    raise FencedError(
        f"could not claim a fencing epoch for job {job_id!r}: {MAX_CLAIM_ATTEMPTS} attempts in "
        "a row lost to other launches claiming the same epoch; make sure only one "
        "controller launches this job's driver, then retry"
    )


def _claim_given(
    resolver: StoreResolver, root: str, job_id: str, *, epoch: int, claimed_by: str, now: float
) -> int:
    if isinstance(epoch, bool) or epoch < 1:
        raise ConfigurationError(f"fencing epochs start at 1; got {epoch!r} for job {job_id!r}")
    highest = highest_epoch(resolver, root, job_id)
    if highest > epoch:
        raise FencedError(
            f"cannot claim epoch {epoch} for job {job_id!r}: epoch {highest} was already "
            "claimed and epochs only go up; assign an epoch above it, or let the driver "
            "claim the next one"
        )
    if highest < epoch and _create(resolver, root, job_id, EpochMarker(epoch, now, claimed_by)):
        return epoch
    holder = read_marker(resolver, root, job_id, epoch)
    if holder.claimed_by != claimed_by:
        raise FencedError(
            f"epoch {epoch} of job {job_id!r} was already claimed by {holder.claimed_by!r}; "
            "each launch needs its own epoch: assign a higher one"
        )
    return epoch


def _create(resolver: StoreResolver, root: str, job_id: str, marker: EpochMarker) -> bool:
    """Create ``marker``; ``False`` when another launch holds that epoch."""
    store, key = resolver.resolve(epoch_marker_uri(root, job_id, marker.epoch))
    try:
        create_once(store, key, marker.encode())
    except ObjectExistsError:
        return False
    return True


def _record_start(
    resolver: StoreResolver,
    root: str,
    job_id: str,
    epoch: int,
    *,
    claim: tuple[str, float],
    limits: ManifestLimits,
) -> None:
    """Steps 2-4 of the claim protocol for ``epoch``, whose marker exists, claimed by
    ``claim`` (who, when)."""
    claimed_by, now = claim
    while True:
        claims = Claims(resolver, root, job_id)
        if epoch in claims.recorded:  # recorded by a later claimer, or a retried claim
            return
        start = newest_counting_checkpoint(resolver, root, job_id, claims, limits=limits)
        lower = [e for e in claims.pending if e < epoch]
        by = f"{claimed_by} (claiming epoch {epoch})"
        if all(_create_start(resolver, root, job_id, EpochStart(e, start, by, now)) for e in lower):
            _create_start(resolver, root, job_id, EpochStart(epoch, start, claimed_by, now))
            return


def _create_start(resolver: StoreResolver, root: str, job_id: str, record: EpochStart) -> bool:
    """Create ``record``; ``False`` when that epoch's start was recorded already."""
    store, key = resolver.resolve(epoch_start_uri(root, job_id, record.epoch))
    try:
        create_once(store, key, record.encode())
    except ObjectExistsError:
        return False
    return True


class Fence:
    """The fencing check of a driver holding ``epoch`` of ``job_id``. Immutable."""

    def __init__(self, resolver: StoreResolver, root: str, job_id: str, epoch: int) -> None:
        self._resolver = resolver
        self.root = root
        self.job_id = validate_id("job id", job_id)
        self.epoch = epoch

    def highest(self) -> int:
        """The highest claimed epoch of the job (0 when none was ever claimed)."""
        return highest_epoch(self._resolver, self.root, self.job_id)

    def check(self) -> None:
        """Raise :class:`FencedError` if a launch with a higher epoch exists."""
        highest = self.highest()
        if highest > self.epoch:
            raise FencedError(
                f"driver epoch {self.epoch} of job {self.job_id!r} was superseded by epoch "
                f"{highest}; this driver stops without writing further checkpoints (a newer "
                "launch of the job owns it now)"
            )

    def check_in_background(self) -> Future[None]:
        """Start :meth:`check` on a thread of its own; the future's ``result()`` waits
        for it and raises what it raised (:class:`FencedError` when superseded). Its LIST
        overlaps whatever the caller does meanwhile; a future nobody waits for is
        harmless (the thread ends with its one request)."""
        future: Future[None] = Future()

        def run() -> None:
            try:
                self.check()
            except BaseException as exc:  # handed to whoever waits for the result
                future.set_exception(exc)
            else:
                future.set_result(None)

        threading.Thread(target=run, name=f"gic-fence-{self.job_id}", daemon=True).start()
        return future
