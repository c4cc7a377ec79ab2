"""Changelog growth of a bucket since its base: the second trigger of materialization.

Time alone does not bound a bucket's changelog: a job with short batches adds a section
per bucket per batch, and restore reads, manifest entries and replay grow with it. So a
bucket is also due, whatever its interval, once its changelog since its base (the handles
ending after the snapshot's seq) reaches either limit of
:class:`~gic_runtime.materialization.scheduler.MaterializationSettings`:

* ``max_sections`` handles, or
* ``changelog_ratio`` x the stored size of its snapshot in stored changelog bytes, but
  never less than ``changelog_floor_bytes`` (the floor alone without a snapshot), so
  tiny buckets do not churn.

:func:`growth` gives both fractions; its ``pressure`` (and :func:`growth_pressure`) is
the larger; ``>= 1`` means due. The scheduler
(:func:`~gic_runtime.materialization.scheduler.due`) uses it, also to let time snapshot a
bucket only once its changelog bytes reached ``time_min_change`` x its snapshot, and
:mod:`~gic_runtime.materialization.background` serves growth-due buckets highest
pressure first (docs/architecture.md §7).

Thread-safety: pure functions.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Protocol

from gic_runtime.handles import ChangelogHandle


class GrowthLimits(Protocol):
    """The settings :func:`growth_pressure` reads."""

    @property
    def max_sections(self) -> int: ...

    @property
    def changelog_ratio(self) -> float: ...

    @property
    def changelog_floor_bytes(self) -> int: ...


def byte_limit(snapshot_size: int | None, limits: GrowthLimits) -> float:
    """Changelog bytes since the base that make a bucket due."""
    scaled = limits.changelog_ratio * snapshot_size if snapshot_size is not None else 0.0
    return max(scaled, float(limits.changelog_floor_bytes))


@dataclass(frozen=True, slots=True)
class Growth:
    """A bucket's changelog since its base as fractions of the two limits."""

    sections: float
    """Handles since the base / ``max_sections``."""

    bytes: float
    """Stored changelog bytes since the base / :func:`byte_limit`."""

    changelog_bytes: int
    """Stored changelog bytes since the base."""

    handles: int = 0
    """Changelog handles since the base."""

    @property
    def pressure(self) -> float:
        """The larger fraction: at least 1.0 means due by growth."""
        return max(self.sections, self.bytes)

    def projected(self, handles_ahead: int) -> float:
        """The pressure after ``handles_ahead`` more handles that each grow it as much as
        the handles since the base did on average (the pressure itself without any)."""
        if self.handles == 0:
            return self.pressure
        return self.pressure * (1.0 + handles_ahead / self.handles)


def growth(
    changelog: Iterable[ChangelogHandle],
    base_seq: int,
    snapshot_size: int | None,
    limits: GrowthLimits,
) -> Growth:
    """How far the handles of ``changelog`` ending after ``base_seq`` are toward the
    growth limits, where bytes are the handles' stored lengths and ``snapshot_size`` is
    the stored size of the snapshot at ``base_seq`` (``None``: no snapshot)."""
    sections = nbytes = 0
    for handle in changelog:
        if handle.to_seq > base_seq:
            sections += 1
            nbytes += handle.length
    limit = byte_limit(snapshot_size, limits)
    return Growth(sections / limits.max_sections, nbytes / limit, nbytes, sections)


def growth_pressure(
    changelog: Iterable[ChangelogHandle],
    base_seq: int,
    snapshot_size: int | None,
    limits: GrowthLimits,
) -> float:
    """``max(sections / max_sections, bytes / byte_limit)`` of :func:`growth`: at least
    1.0 means due by growth."""
    return growth(changelog, base_seq, snapshot_size, limits).pressure
