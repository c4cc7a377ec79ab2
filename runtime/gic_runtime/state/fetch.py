"""Parallel, coalesced and bounded reads of what a restore needs (docs/architecture.md §6).

Restoring a task's bucket range needs each bucket's snapshot and its changelog sections
above the snapshot's seq. One segment object (one task's upload of one batch) holds
sections of many buckets, so reading section by section costs *buckets x sections*
requests, one after the other. A :class:`RestoreFetcher` instead:

1. takes the *needs* in apply order: bucket by bucket, the sections its replay reads, in
   sequence order, and its snapshot (before them when the replay reads more than
   :attr:`FetchSettings.merge_stored_bytes`);
2. cuts them into consecutive *windows* of at most ``window_bytes`` fetched bytes (a
   single need larger than that is a window of its own);
3. inside a window, coalesces the sections of one object into as few ranged reads as
   possible: a section joins a read of its object planned in the window when it lies
   inside that read's span or the gap between them is at most ``max_gap_bytes`` (gap
   bytes are read, and counted), whatever order the buckets are applied in (a restore in
   a task's input order visits a segment object's sections out of offset order);
4. runs the reads and snapshot downloads of the window being applied and of the next
   ``ahead`` windows on a pool of ``threads`` threads;
5. hands results out on the caller's thread, when the caller asks for them.

Invariants:

* Every need is planned in exactly one read (or snapshot download) of exactly one
  window; a need asked for but not planned (or whose window was released) is read
  synchronously, on the caller's thread, so a result is never wrong, only slower.
* Fetched bytes held at once are those of at most ``ahead + 1`` windows: windows before
  the one the caller is in are released as soon as the caller asks for a later one.
  Downloaded snapshots are validated and decompressed on the pool thread (by
  :func:`~gic_runtime.state.snapshot.read_snapshot`), so their decompressed bodies count
  against the window by their stored size.
* Nothing is decided here about what a result means: sections are validated against
  their handles by :func:`~gic_runtime.changelog.reader.section_records` on the caller's
  thread when asked for, and the caller checks sequence numbers. An error of a read
  (missing object, storage failure, damaged snapshot) is raised to the caller when it
  asks for a need of that read, never earlier and never swallowed; a missing segment
  object is a :class:`~gic_runtime.errors.RestoreError` naming bucket and range.

Thread-safety: a fetcher belongs to one thread (the one applying the restore). Its pool
threads only read storage through the (thread-safe) resolver and call the injected
reader, if any, which must therefore be thread-safe; they never touch the state store.
"""

from __future__ import annotations

from collections.abc import Container, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Final, Protocol

from gic_runtime.changelog.reader import section_records
from gic_runtime.changelog.records import ChangeRecord, Op
from gic_runtime.errors import ConfigurationError, ObjectNotFoundError, RestoreError
from gic_runtime.handles import ChangelogHandle, SnapshotHandle
from gic_runtime.state.snapshot import SnapshotBody, read_snapshot_body
from gic_runtime.storage.uri import StoreResolver

_MiB: Final = 1024 * 1024


class ChangeReader(Protocol):
    """Reads one bucket's changes from a changelog section, with the signature of
    :func:`gic_runtime.changelog.reader.read_changes`. A restore may call it from
    several threads at once, so an implementation must be thread-safe."""

    def __call__(
        self,
        resolver: StoreResolver,
        handle: ChangelogHandle,
        *,
        from_seq: int = 0,
        to_seq: int | None = None,
    ) -> Iterator[ChangeRecord]: ...


@dataclass(frozen=True, slots=True)
class FetchSettings:
    """Tuning of :class:`RestoreFetcher`. Immutable."""

    threads: int = 8
    """Reads running at once. Eight hide most of an object store's per-request latency
    while staying well inside an S3 client's connection pool (32)."""

    window_bytes: int = 32 * _MiB
    """Fetched bytes per window. With ``ahead = 1`` at most about twice this is held:
    enough to keep eight threads busy on large segments, small next to a task's memory."""

    max_gap_bytes: int = 1 * _MiB
    """Largest gap between two needed sections of one object that one read still spans:
    reading 1 MiB more costs about as much as one more request's latency on S3."""

    ahead: int = 1
    """Windows fetched beyond the one being applied (prefetch)."""

    merge_stored_bytes: int = 16 * _MiB
    """A bucket whose replay reads at most this many stored bytes has its sections
    planned before its snapshot, and its changes merged into the snapshot's entries
    (:mod:`gic_runtime.state.tail_fold`); a longer tail is replayed after the snapshot.
    With the default materialization a tail stays under one snapshot's size."""

    merge_raw_bytes: int = 64 * _MiB
    """Most key and value bytes of changes one bucket's merge folds in memory; past it
    (a tail that expands far beyond its stored size) the restore loads the snapshot,
    applies what was folded and replays the rest one change at a time."""

    def __post_init__(self) -> None:
        if self.threads < 1 or self.window_bytes < 1 or self.max_gap_bytes < 0 or self.ahead < 0:
            raise ConfigurationError(
                "restore fetching needs threads >= 1, window_bytes >= 1, max_gap_bytes >= 0, "
                f"ahead >= 0; got {self.threads}, {self.window_bytes}, {self.max_gap_bytes}, "
                f"{self.ahead}"
            )
        if self.merge_stored_bytes < 0 or self.merge_raw_bytes < 0:
            raise ConfigurationError(
                "restore merging needs merge_stored_bytes >= 0 and merge_raw_bytes >= 0; got "
                f"{self.merge_stored_bytes}, {self.merge_raw_bytes}"
            )


@dataclass(frozen=True, slots=True)
class SectionNeed:
    """A section the replay of its bucket reads: changes ``[lower, upper)`` of it at
    most (``lower`` is what an injected reader is asked for; a coalesced read decodes
    the whole section and the caller skips what it does not need)."""

    handle: ChangelogHandle
    lower: int
    upper: int


Need = SnapshotHandle | SectionNeed


@dataclass(slots=True)
class RangedRead:
    """One ranged read ``[start, stop)`` of object ``uri`` covering ``sections``."""

    uri: str
    start: int
    stop: int
    sections: list[SectionNeed] = field(default_factory=list)


@dataclass(slots=True)
class Window:
    """Consecutive needs fetched together: ``nbytes`` is what their reads fetch."""

    reads: list[RangedRead] = field(default_factory=list)
    snapshots: list[SnapshotHandle] = field(default_factory=list)
    nbytes: int = 0

    @property
    def empty(self) -> bool:
        return not self.reads and not self.snapshots


def plan_windows(
    needs: Sequence[Need], *, window_bytes: int, max_gap_bytes: int | None
) -> list[Window]:
    """Cut ``needs`` (in apply order) into windows and coalesce each window's sections
    (see the module docstring). ``max_gap_bytes=None`` plans one read per section.

    A repeated need is planned once. A section joins the read of its object in the
    window that it adds the fewest bytes to: one whose span already holds it (nothing
    added), or one it extends forwards or backwards across a gap of at most
    ``max_gap_bytes``; otherwise it starts a new read.
    """
    windows: list[Window] = []
    window = Window()
    reads_of: dict[str, list[RangedRead]] = {}
    planned: set[SnapshotHandle | ChangelogHandle] = set()
    for need in needs:
        key = need if isinstance(need, SnapshotHandle) else need.handle
        if key in planned:
            continue
        planned.add(key)
        if isinstance(need, SnapshotHandle):
            if not window.empty and window.nbytes + need.size > window_bytes:
                windows.append(window)
                window, reads_of = Window(), {}
            window.snapshots.append(need)
            window.nbytes += need.size
            continue
        h = need.handle
        read, cost = None, h.length
        for candidate in reads_of.get(h.uri, ()):
            found, added = _extension(candidate, h, max_gap_bytes)
            if found is not None and (read is None or added < cost):
                read, cost = found, added
        if not window.empty and window.nbytes + cost > window_bytes:
            windows.append(window)
            window, reads_of = Window(), {}
            read, cost = None, h.length
        if read is None:
            read = RangedRead(h.uri, h.offset, h.offset + h.length)
            window.reads.append(read)
            reads_of.setdefault(h.uri, []).append(read)
        else:
            read.start = min(read.start, h.offset)
            read.stop = max(read.stop, h.offset + h.length)
        read.sections.append(need)
        window.nbytes += cost
    if not window.empty:
        windows.append(window)
    return windows


def _extension(
    read: RangedRead | None, h: ChangelogHandle, max_gap: int | None
) -> tuple[RangedRead | None, int]:
    """``(read, added bytes)`` when ``h`` may join ``read``, else ``(None, h.length)``."""
    if read is None or max_gap is None:
        return None, h.length
    end = h.offset + h.length
    if read.start <= h.offset and end <= read.stop:
        return read, 0  # inside a gap the read already spans
    if 0 <= h.offset - read.stop <= max_gap:
        return read, end - read.stop
    if 0 <= read.start - end <= max_gap:
        return read, read.start - h.offset
    return None, h.length


class RestoreFetcher:
    """Fetches ``needs`` ahead of the caller (see the module docstring).

    With ``reader`` (a test seam, or another changelog source), every section is read
    by one call of ``reader`` on the pool instead of coalesced ranged reads.
    """

    def __init__(
        self,
        resolver: StoreResolver,
        needs: Sequence[Need],
        *,
        reader: ChangeReader | None = None,
        settings: FetchSettings | None = None,
    ) -> None:
        self._resolver = resolver
        self._reader = reader
        self._settings = s = settings or FetchSettings()
        gap = None if reader is not None else s.max_gap_bytes
        self._windows = plan_windows(needs, window_bytes=s.window_bytes, max_gap_bytes=gap)
        self._window_of: dict[SnapshotHandle | ChangelogHandle, int] = {}
        for index, window in enumerate(self._windows):
            self._window_of.update(dict.fromkeys(window.snapshots, index))
            for read in window.reads:
                self._window_of.update((n.handle, index) for n in read.sections)
        self._snapshots: dict[SnapshotHandle, Future[SnapshotBody]] = {}
        self._spans: dict[ChangelogHandle, tuple[Future[bytes], RangedRead]] = {}
        self._records: dict[ChangelogHandle, Future[list[ChangeRecord]]] = {}
        self._submitted = 0  # windows [0, _submitted) were submitted
        self._current = 0  # windows below this one are released
        self._pool: ThreadPoolExecutor | None = None
        self.reads = 0
        """Object reads issued so far (ranged reads, snapshot downloads, reader calls)."""
        self.planned_bytes = sum(w.nbytes for w in self._windows)
        """Bytes the plan fetches (sections, the gaps between them, snapshots)."""

    @property
    def windows(self) -> Sequence[Window]:
        return self._windows

    @property
    def settings(self) -> FetchSettings:
        return self._settings

    def __enter__(self) -> RestoreFetcher:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Cancel reads not started, wait for running ones, release everything."""
        pool, self._pool = self._pool, None
        self._snapshots.clear()
        self._spans.clear()
        self._records.clear()
        if pool is not None:
            pool.shutdown(wait=True, cancel_futures=True)

    def prefetch(self) -> None:
        """Start the reads of the first ``ahead + 1`` windows now, before the first need
        is asked for (a restore that applies something else meanwhile)."""
        if self._windows and self._current == 0:
            last = min(len(self._windows), self._settings.ahead + 1)
            while self._submitted < last:
                self._submit(self._windows[self._submitted])
                self._submitted += 1

    # --- results, on the caller's thread ---------------------------------------------------

    def snapshot_entries(self, handle: SnapshotHandle) -> Iterator[tuple[bytes, bytes]]:
        """The validated entries of snapshot ``handle`` (see ``read_snapshot``)."""
        return self.snapshot_body(handle).entries()

    def snapshot_body(self, handle: SnapshotHandle) -> SnapshotBody:
        """Snapshot ``handle`` validated and decompressed (see ``read_snapshot_body``):
        its entries, or chosen ones, are read from it."""
        if self._advance(handle):
            future = self._snapshots.get(handle)
            if future is not None:
                return future.result()
        self.reads += 1
        return read_snapshot_body(self._resolver, handle)

    def section(
        self, need: SectionNeed, keep: Container[bytes] | None = None
    ) -> Sequence[ChangeRecord]:
        """The records of ``need``'s section (at least ``[lower, upper)`` of it when an
        injected reader serves it; the whole validated section otherwise); with
        ``keep``, only those of its keys and the prefix deletions."""
        h = need.handle
        try:
            if self._advance(h):
                if (span := self._spans.get(h)) is not None:
                    future, read = span
                    lo = h.offset - read.start
                    view = memoryview(future.result())[lo : lo + h.length]
                    return section_records(h, view, keep)
                if (records := self._records.get(h)) is not None:
                    return _kept(records.result(), keep)
            self.reads += 1
            return _kept(self._read_one(need), keep)
        except ObjectNotFoundError as exc:
            raise RestoreError(
                f"bucket {h.bucket}: changelog segment {h.uri} holding changes "
                f"[{h.from_seq}, {h.to_seq}) is missing; the checkpoint that references it "
                "cannot be restored (restore an older checkpoint or savepoint)"
            ) from exc

    # --- scheduling ----------------------------------------------------------------------

    def _advance(self, key: SnapshotHandle | ChangelogHandle) -> bool:
        """Make ``key``'s window the current one (releasing earlier windows, submitting up
        to ``ahead`` later ones). False when ``key`` is not planned or already released."""
        index = self._window_of.get(key)
        if index is None or index < self._current:
            return False
        if index > self._current:
            for old in range(self._current, index):
                self._release(self._windows[old])
            self._current = index
        last = min(len(self._windows), index + self._settings.ahead + 1)
        while self._submitted < last:
            self._submit(self._windows[self._submitted])
            self._submitted += 1
        return True

    def _release(self, window: Window) -> None:
        for snap in window.snapshots:
            future = self._snapshots.pop(snap, None)
            if future is not None:
                future.cancel()
        for read in window.reads:
            for need in read.sections:
                span = self._spans.pop(need.handle, None)
                if span is not None:
                    span[0].cancel()
                records = self._records.pop(need.handle, None)
                if records is not None:
                    records.cancel()

    def _submit(self, window: Window) -> None:
        if self._pool is None:
            self._pool = ThreadPoolExecutor(
                self._settings.threads, thread_name_prefix="gic-restore-fetch"
            )
        pool = self._pool
        for snap in window.snapshots:
            self._snapshots[snap] = pool.submit(read_snapshot_body, self._resolver, snap)
            self.reads += 1
        for read in window.reads:
            if self._reader is None:
                span = pool.submit(self._read_range, read)
                self.reads += 1
                for need in read.sections:
                    self._spans[need.handle] = (span, read)
            else:
                for need in read.sections:
                    self._records[need.handle] = pool.submit(self._read_one, need)
                    self.reads += 1

    # --- pool threads ----------------------------------------------------------------------

    def _read_range(self, read: RangedRead) -> bytes:
        store, key = self._resolver.resolve(read.uri)
        return store.get(key, start=read.start, length=read.stop - read.start)

    def _read_one(self, need: SectionNeed) -> list[ChangeRecord]:
        h = need.handle
        if self._reader is not None:
            return list(self._reader(self._resolver, h, from_seq=need.lower, to_seq=need.upper))
        store, key = self._resolver.resolve(h.uri)
        return section_records(h, store.get(key, start=h.offset, length=h.length))


def _kept(records: Sequence[ChangeRecord], keep: Container[bytes] | None) -> Sequence[ChangeRecord]:
    """``records`` of ``keep``'s keys and the prefix deletions (all without ``keep``)."""
    if keep is None:
        return records
    return [r for r in records if r.op is Op.DELETE_PREFIX or r.key in keep]
