"""When a bucket is due for materialization: the settings and the schedule rules.

One scheduler serves every way the core runs a task (the Spark executors'
:func:`~gic_runtime.executor.core.run_task` and the in-process
:class:`~gic_runtime.executor.state_task.StateTask`, which runs the same core): the
executor-local :mod:`~gic_runtime.materialization.background` reads a bucket's
newest background snapshot record, describes it as a :class:`Newest`, and asks
:func:`due` (docs/architecture.md §7, §13.5). A bucket is due by

* *growth*: its changelog since its effective base (the newest snapshot that lies on the
  bucket's history, else the state's own snapshot) reached ``max_sections`` handles or
  ``changelog_ratio`` x that snapshot's stored size in bytes (at least
  ``changelog_floor_bytes``), whatever the time
  (:func:`~gic_runtime.materialization.growth.growth_pressure`); or by
* *time*: ``interval_s * (1 +/- jitter)`` after the newest snapshot of the attempt was
  recorded. The jitter is derived from a hash of job, bucket and that record's time, so
  every process computes the same due time and buckets drift apart; without a snapshot
  the first due time is spread over one interval by a per-bucket offset from the
  *anchor* (when the attempt was first seen), so buckets never all start at once. Time
  snapshots a bucket that has a base snapshot only once its changelog bytes since that
  base reached ``time_min_change`` x the snapshot's stored size: replaying less costs a
  restore under that fraction of downloading the snapshot, so a new snapshot would buy
  little, while it costs a whole bucket's encoding and upload (this also keeps a restored
  attempt, whose first due times all fall within one interval, from re-snapshotting
  every bucket).

A bucket whose newest fitting snapshot is already at the state's seq is never due.

*Turns* (``growth_turns``): task ranges whose buckets grow alike reach the growth limit in
the same checkpoint, and their snapshots, the previous ones the fallback checkpoint still
names and the changelog both pin then stand in storage at once. So the ranges of a job
take turns: at checkpoint ``c`` range ``c mod ranges`` (:class:`Turn`) also starts the
buckets that would reach a growth limit before its next turn
(:meth:`~gic_runtime.materialization.growth.Growth.projected` over ``ranges - 1`` more
handles), up to ``ranges - 1`` checkpoints early. Ranges that grow in step then snapshot
in different checkpoints; the limit itself still binds at every checkpoint.

Invariant: the rules are pure functions of their arguments (times are whatever clock the
caller uses, :class:`~gic_runtime.clock.Clock` ``wall()`` seconds in the core), so every
process and every test gets the same answer for the same inputs.

Thread-safety: immutable settings and pure functions.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from gic_runtime.errors import ConfigurationError
from gic_runtime.handles import BucketState
from gic_runtime.materialization.growth import Growth, growth

__all__ = [
    "Due",
    "MaterializationSettings",
    "Newest",
    "Turn",
    "due",
    "growth_since_base",
    "unit",
]


@dataclass(frozen=True, slots=True)
class MaterializationSettings:
    """Tuning of background materialization. Immutable."""

    interval_s: float = 120.0
    """Seconds between materializations of one bucket. Two minutes keeps a bucket's
    replay at restore to two minutes of changes while uploading each bucket's full state
    only 30 times an hour."""

    jitter: float = 0.2
    """Each next due time is ``interval_s * (1 +/- jitter)`` so buckets drift apart."""

    max_in_flight: int = 1
    """Materialization jobs running at once for time-due buckets (across buckets; a job
    uploads one snapshot at a time; a growth job counts, and runs even when they are
    taken); one keeps the upload bandwidth left for changelog segments, which are on the
    checkpoint's critical path."""

    max_sections: int = 128
    """Changelog handles since its base that make a bucket due whatever its interval.
    Restore reads about one object per handle of the busiest bucket plus one snapshot per
    bucket (coalesced per object), and every handle is a row of every manifest (about 25
    bytes in v2): 128 keeps a task's restore to about a hundred reads, 16 at a time, and
    a manifest of 128 buckets under 450 KB. A bucket gains a section per segment upload
    that carries its changes, so one per checkpoint when a task's changelog of a batch
    fits one upload, but more when it spans several preemptive uploads: two per batch in
    the ``state_sweep`` at 4 GB, where 32 snapshotted the whole state every 16 batches
    (2.8x the changelog's bytes) and 64 every 32 (86 MB uploaded per checkpoint against
    21 MB of changelog); at 128 the interval brings its snapshots instead (54 MB per
    checkpoint over the same 64 batches, 11 % more rows/s, a restart replaying a longer
    tail: first batch 30.5 against 27.0 s; docs/architecture.md §7). With one section a
    checkpoint a bucket is snapshotted at least once per 128 checkpoints."""

    changelog_ratio: float = 1.0
    """Changelog bytes since its base, as a multiple of its snapshot's size, that make a
    bucket due. A restore replays at most this much (a snapshot's worth of changes at
    1.0), and storage holds about half of it on average besides the snapshots; a lower
    ratio snapshots more often, which keeps more previous and not yet adopted snapshots
    and uploads more in the background (docs/architecture.md §7 has the storage model
    and the ``soak`` figures: at 1.0 the job kept 2.4x its state in the median sample,
    at 0.5 2.75x, and wrote 31 % fewer bytes per checkpoint)."""

    time_min_change: float = 0.25
    """A bucket with a base snapshot is snapshotted by time only once its changelog
    bytes since that base reached this fraction of the snapshot's stored size. Until
    then a restore replays under a quarter of what it downloads for the snapshot
    anyway, and a new snapshot would re-encode and upload the whole bucket for that:
    with gigabytes of slowly changing state, time alone would upload the whole state
    every interval. 0 lets time snapshot any change (growth is not affected)."""

    changelog_floor_bytes: int = 4 * 1024
    """The byte limit is never below this (and is this without a snapshot), so tiny
    buckets are not snapshotted after every few changes. 4 KiB: a snapshot costs a
    request or two, while a floor above a bucket's snapshot lets the floor, not the
    ratio, decide, and the changelog (and the segments it pins in storage) grows to
    several times the state: W1's 128 buckets of a 2 MB state are 16 KB each, and with
    a 16 KiB floor the soak kept 3.4x its state instead of the ratio's bound."""

    companion_pressure: float = 0.5
    """When a task range's growth job starts, the range's buckets at least this far
    toward a growth limit (:func:`~gic_runtime.materialization.growth.growth_pressure`)
    join it. A segment holds a section of every bucket of its range and stays in
    storage until each of them has a newer snapshot, so buckets snapshotted together
    free their segments together instead of one straggler pinning them; 1.0 turns
    companions off."""

    growth_turns: bool = True
    """Task ranges take turns by checkpoint to start their growth jobs up to ``ranges -
    1`` checkpoints early (module docstring), so ranges that grow in step do not all
    snapshot in one checkpoint. False: each range starts only at a limit."""

    max_consecutive_failures: int = 3
    """Failures in a row of one bucket after which each further failure is logged as an
    error instead of a warning: the bucket's changelog keeps growing (restores get
    slower) until a materialization succeeds. A failure never fails a task."""

    retry_delay_s: float = 10.0
    """Seconds before a failed bucket is tried again (by time and by growth)."""

    compress: bool = True
    """Compress snapshot bodies with zstd (msgpack state compresses well)."""

    def __post_init__(self) -> None:
        if self.interval_s <= 0 or not 0 <= self.jitter < 1 or self.max_in_flight < 1:
            raise ConfigurationError(
                "materialization needs interval_s > 0, 0 <= jitter < 1, max_in_flight >= 1; "
                f"got {self.interval_s}, {self.jitter}, {self.max_in_flight}"
            )
        if (
            self.max_sections < 1
            or not self.changelog_ratio > 0
            or self.changelog_ratio == float("inf")
            or self.changelog_floor_bytes < 1
            or not 0 < self.companion_pressure <= 1
            or not 0 <= self.time_min_change <= 1
        ):
            raise ConfigurationError(
                "materialization needs max_sections >= 1, a finite changelog_ratio > 0, "
                "changelog_floor_bytes >= 1, 0 < companion_pressure <= 1 and "
                "0 <= time_min_change <= 1; got "
                f"{self.max_sections}, {self.changelog_ratio}, {self.changelog_floor_bytes}, "
                f"{self.companion_pressure}, {self.time_min_change}"
            )
        if self.max_consecutive_failures < 0 or self.retry_delay_s < 0:
            raise ConfigurationError(
                "materialization needs max_consecutive_failures >= 0 and retry_delay_s >= 0; "
                f"got {self.max_consecutive_failures}, {self.retry_delay_s}"
            )


@dataclass(frozen=True, slots=True)
class Newest:
    """A bucket's newest background snapshot of the current attempt, as the scheduler
    needs it: its ``seq``, stored ``size``, when it was recorded (``time``) and whether
    it ``fits`` (lies on the history of the state being scheduled)."""

    seq: int
    size: int
    time: float
    fits: bool


@dataclass(frozen=True, slots=True)
class Turn:
    """Where a task range stands in the job's rotation at a checkpoint: range ``index``
    of ``count`` has its turn at checkpoint ``checkpoint_id`` when ``checkpoint_id mod
    count == index`` (the same answer in every process)."""

    checkpoint_id: int
    index: int
    count: int

    def __post_init__(self) -> None:
        if not 0 <= self.index < self.count or self.checkpoint_id < 0:
            raise ConfigurationError(
                f"a turn needs 0 <= index < count and checkpoint_id >= 0; got range "
                f"{self.index} of {self.count} at checkpoint {self.checkpoint_id}"
            )

    @property
    def ours(self) -> bool:
        """Whether it is this range's turn."""
        return self.checkpoint_id % self.count == self.index


@dataclass(frozen=True, slots=True)
class Due:
    """Why a bucket is due: ``pressure`` is its changelog growth pressure
    (:func:`~gic_runtime.materialization.growth.growth_pressure`); at least 1.0 means
    due by growth, below that the bucket is due by time."""

    pressure: float

    @property
    def by_growth(self) -> bool:
        return self.pressure >= 1.0


def unit(*parts: object) -> float:
    """A deterministic number in ``[0, 1)`` from ``parts`` (the same in every process)."""
    digest = hashlib.blake2b(repr(parts).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") / 2.0**64


def _base(state: BucketState, newest: Newest | None) -> tuple[int, int | None] | None:
    """The bucket's effective base: the seq and stored size of the newest snapshot when
    it fits the state's history, else of the state's own snapshot (size ``None``: no
    snapshot); ``None`` when the newest fitting snapshot already holds every change."""
    if newest is not None and newest.fits:
        if newest.seq >= state.seq:
            return None
        return newest.seq, newest.size  # the bucket's next task adopts it
    return state.base, state.snapshot.size if state.snapshot is not None else None


def growth_since_base(
    settings: MaterializationSettings, state: BucketState, newest: Newest | None
) -> Growth | None:
    """The bucket's changelog growth since its effective base (see :func:`_base`);
    ``None`` when the newest fitting snapshot already holds every change of ``state``."""
    base = _base(state, newest)
    return None if base is None else growth(state.changelog, *base, settings)


def due(
    settings: MaterializationSettings,
    job_id: str,
    state: BucketState,
    newest: Newest | None,
    *,
    now: float,
    anchor: float,
) -> Due | None:
    """Whether the bucket at ``state`` is due at ``now`` (see the module docstring), and
    how urgent its growth is; ``None`` when not due. ``newest`` is the bucket's newest
    snapshot of this attempt (``None``: none yet); ``anchor`` is when the attempt was
    first seen (first due times count from there)."""
    base = _base(state, newest)
    if base is None:
        return None  # nothing changed since the newest snapshot
    current = growth(state.changelog, *base, settings)
    result = Due(current.pressure)
    if result.by_growth:
        return result
    size = base[1]
    if size is not None and current.changelog_bytes < settings.time_min_change * size:
        return None  # too little to replay for a snapshot to pay (time_min_change)
    bucket = state.bucket
    if newest is None:
        timed = now - anchor >= settings.interval_s * unit(job_id, bucket, "first")
    else:
        factor = 1.0 + settings.jitter * (2.0 * unit(job_id, bucket, newest.time) - 1.0)
        timed = now - newest.time >= settings.interval_s * factor
    return result if timed else None
