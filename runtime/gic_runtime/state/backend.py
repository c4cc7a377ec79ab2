"""The keyed state backend of one task: named states over a bucket range, dual-writing
every change to a :class:`~gic_runtime.state.stores.KVStore` and a
:class:`~gic_runtime.changelog.api.ChangelogWriter`.

Per bucket it tracks the lineage a checkpoint needs:

* ``seq`` -- the changelog writer's ``next_seq(bucket)``: changes ``[0, seq)`` are applied;
* the current materialized :class:`~gic_runtime.handles.SnapshotHandle` (the *base*);
* changelog handles inherited from a restore (covering up to the restored seq), while the
  writer holds the handles of everything appended since.

Invariants:

* The store's bucket content always equals the result of the changes ``[0, seq)`` (store
  first, then changelog; if either raises, the task fails and restores) for every
  bucket a task reads; a bucket served from selected keys for one batch
  (:meth:`restore` with ``select``) holds there what the changes ``[0, seq)`` leave for
  its named keys, while its local copy, unwritten and without matching metadata, waits
  for :meth:`restore_selected` to rebuild it.
* A :class:`~gic_runtime.handles.BucketState` from :meth:`checkpoint` satisfies its own
  invariant: snapshot + handles cover ``[base, seq)``.
* The writer is truncated below a snapshot's seq only when a *completed* checkpoint that
  references that snapshot is reported to :meth:`notify_checkpoint_complete`
  (docs/architecture.md I7); a newer materialization alone never truncates.

Keys are checked against the backend's range by :mod:`~gic_runtime.state.routing`.

Thread-safety: one task thread owns the backend and calls every method. The future
returned by :meth:`checkpoint` completes on an uploader thread and touches only values
captured when ``checkpoint`` was called. Views from :meth:`materialization_view` may be
read on another thread. :meth:`restore` downloads on a bounded pool of threads
(:mod:`~gic_runtime.state.fetch`) and touches the store only on the calling thread,
unless it restores in the background: then each bucket being rebuilt is written only
by the one thread restoring it (:mod:`~gic_runtime.state.background_restore`), and the
gated :attr:`store` keeps every other thread off it until it is complete.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

from gic_runtime.changelog.api import ChangelogWriter
from gic_runtime.changelog.records import Op
from gic_runtime.errors import RestoreError, StateError
from gic_runtime.handles import BucketState, ChangelogHandle, SnapshotHandle
from gic_runtime.state.background_restore import (
    BackgroundRestore,
    BackgroundRestoreSettings,
    RestoreProgress,
)
from gic_runtime.state.fetch import ChangeReader, FetchSettings
from gic_runtime.state.gated_store import GatedStore
from gic_runtime.state.registry import StateRegistry
from gic_runtime.state.restore import (
    RestoreSummary,
    check_coverage,
    classify_range,
    restore_buckets,
)
from gic_runtime.state.routing import BUCKET_SPOT_CHECKS, check_routed_buckets, route_key
from gic_runtime.state.selected_store import SelectedBuckets
from gic_runtime.state.selective_read import select_keys
from gic_runtime.state.stores import BucketMeta, BucketView, KVStore
from gic_runtime.storage.uri import StoreResolver

__all__ = [
    "BUCKET_SPOT_CHECKS",
    "KeyedStateBackend",
    "MaterializationView",
    "RestoreSummary",
    "StateKeys",
]

StateKeys = Callable[["KeyedStateBackend"], Mapping[int, Collection[bytes]]]
"""Every state key a batch will read, per bucket (store keys, as
:class:`~gic_runtime.state.states.ValueState` locates them): what
:meth:`KeyedStateBackend.restore` reads instead of restoring (``select``)."""


@dataclass
class _Track:
    """Mutable per-bucket lineage bookkeeping (task thread only)."""

    floor: int
    snapshot: SnapshotHandle | None = None
    inherited: tuple[ChangelogHandle, ...] = ()
    token: str = ""
    truncated: int = 0
    generation: int = 0
    captured: bool = True
    """Whether ``snapshot`` was handed to a checkpoint (or came from a manifest). A
    snapshot never captured cannot be referenced by any manifest."""
    persisted: tuple[ChangelogHandle, ...] = ()
    """Changelog handles of the newest durable bucket state known here (the last
    :meth:`KeyedStateBackend.mark_persisted`, or the restored state): what growth-triggered
    materialization measures."""

    @property
    def base(self) -> int:
        return self.snapshot.seq if self.snapshot is not None else 0


@dataclass(frozen=True, slots=True)
class MaterializationView:
    """A consistent view of one bucket at ``seq``; ``generation`` tells whether the
    bucket's lineage was replaced (by a restore) before the snapshot finished."""

    bucket: int
    seq: int
    generation: int
    view: BucketView = field(compare=False)


class KeyedStateBackend(StateRegistry):
    """Keyed state of buckets ``bucket_range`` (contiguous) out of ``num_buckets``.

    Call :meth:`restore` before the first change unless the store and the changelog
    writer are known to be empty for these buckets. See the module docstring for
    invariants and thread-safety.
    """

    def __init__(
        self,
        bucket_range: range,
        num_buckets: int,
        store: KVStore,
        changelog: ChangelogWriter,
    ) -> None:
        if bucket_range.step != 1 or not bucket_range:
            raise StateError(f"bucket range {bucket_range} must be non-empty with step 1")
        if bucket_range.start < 0 or bucket_range.stop > num_buckets:
            raise StateError(
                f"bucket range [{bucket_range.start}, {bucket_range.stop}) does not fit in "
                f"{num_buckets} buckets"
            )
        self.bucket_range = bucket_range
        self.num_buckets = num_buckets
        self.store = GatedStore(store)
        """The local store, gated while a background restore runs (every operation on a
        bucket waits until that bucket is restored)."""
        self.changelog = changelog
        self._lo = bucket_range.start
        self._hi = bucket_range.stop
        self._tracks = {b: _Track(floor=changelog.next_seq(b)) for b in bucket_range}
        StateRegistry.__init__(self)
        self._unreferenced: list[SnapshotHandle] = []
        self._restorer: BackgroundRestore | None = None
        self._selection: SelectedBuckets | None = None
        self._on_restored: list[Callable[[], None]] = []

    # --- routing and the dual write ------------------------------------------------------

    def route(self, key: Any) -> int:
        """Bucket of ``key``; raises StateError if this backend does not own it
        (:func:`~gic_runtime.state.routing.route_key`)."""
        return route_key(key, self.bucket_range, self.num_buckets)

    def check_buckets(self, keys: Sequence[Any], buckets: Sequence[int]) -> None:
        """Raise StateError unless ``buckets`` (each key's bucket, computed outside the
        runtime, e.g. by Spark's ``pmod(xxhash64(key), B)``) are all in this backend's
        range and agree with :func:`~gic_runtime.state.keys.bucket_for` on a sample of the keys
        (:func:`~gic_runtime.state.routing.check_routed_buckets`)."""
        check_routed_buckets(keys, buckets, self.bucket_range, self.num_buckets)

    def key_buckets(self, keys: Sequence[Any], buckets: Sequence[int] | None) -> list[int]:
        """Each key's bucket: routed here (:meth:`route`) when ``buckets`` is None, else
        ``buckets`` (from the routing side) after :meth:`check_buckets`."""
        if buckets is None:
            route = self.route
            return [route(key) for key in keys]
        self.check_buckets(keys, buckets)
        return list(buckets)

    def write(self, bucket: int, op: Op, key: bytes, value: bytes = b"") -> int:
        """Apply one key-value change to the store and append it to the changelog;
        return its sequence number. ``bucket`` must be in range (as :meth:`route` gives)."""
        store = self.store
        if op is Op.PUT:
            store.put(bucket, key, value)
        elif op is Op.APPEND:
            store.append(bucket, key, value)
        elif op is Op.DELETE:
            store.delete(bucket, key)
        else:
            store.delete_prefix(bucket, key)
        return self.changelog.append(bucket, op, key, value)

    def write_many(
        self, bucket: int, op: Op, keys: Sequence[bytes], values: Sequence[bytes]
    ) -> int:
        """:meth:`write` of ``(keys[i], values[i])`` for each ``i``, in order, in bulk
        (store first, then changelog, as for one change); returns how many."""
        n = len(keys)
        if len(values) != n:
            raise StateError(f"{len(values)} values for {n} keys")
        if n == 0:
            return 0
        store = self.store
        if op is Op.PUT:
            store.put_many(bucket, list(zip(keys, values, strict=True)))
        else:
            apply = store.apply
            apply(bucket, ((op, k, v) for k, v in zip(keys, values, strict=True)))
        self.changelog.append_many(bucket, op, keys, values)
        return n

    def write_raw(self, bucket: int, op: Op, key: bytes, value: bytes = b"") -> int:
        """:meth:`write` after checking ``bucket`` is in range (for bulk imports)."""
        self._track(bucket)
        return self.write(bucket, op, key, value)

    def _track(self, bucket: int) -> _Track:
        track = self._tracks.get(bucket)
        if track is None:
            raise StateError(
                f"bucket {bucket} is outside this backend's buckets [{self._lo}, {self._hi})"
            )
        return track

    def seq(self, bucket: int) -> int:
        """Next sequence number of ``bucket`` (changes ``[0, seq)`` are applied)."""
        self._track(bucket)
        return self.changelog.next_seq(bucket)

    def snapshot_of(self, bucket: int) -> SnapshotHandle | None:
        """The bucket's current materialized snapshot (its base), if any."""
        return self._track(bucket).snapshot

    # --- checkpoints ---------------------------------------------------------------------

    def checkpoint(self) -> Future[dict[int, BucketState]]:
        """Persist each bucket's changes since its snapshot base; the future yields the
        :class:`BucketState` of every bucket as of this call (token = URI of the newest
        durable object of its lineage)."""
        captured: dict[int, tuple[int, SnapshotHandle | None, tuple[ChangelogHandle, ...], str]]
        captured = {}
        since: dict[int, int] = {}
        for bucket, track in self._tracks.items():
            base = track.base
            inherited = tuple(h for h in track.inherited if h.to_seq > base)
            captured[bucket] = (
                self.changelog.next_seq(bucket),
                track.snapshot,
                inherited,
                track.token,
            )
            since[bucket] = max(base, track.floor)
            track.captured = True
        persisted = self.changelog.persist(since)
        out: Future[dict[int, BucketState]] = Future()

        def compose(done: Future[dict[int, tuple[ChangelogHandle, ...]]]) -> None:
            try:
                handles_by_bucket = done.result()
                states: dict[int, BucketState] = {}
                for bucket, (seq, snapshot, inherited, old_token) in captured.items():
                    fresh = tuple(h for h in handles_by_bucket.get(bucket, ()) if h.from_seq < seq)
                    handles = inherited + fresh
                    token = old_token
                    if handles:
                        token = handles[-1].uri
                    elif snapshot is not None:
                        token = snapshot.uri
                    state = BucketState(bucket, seq, snapshot, handles, token)
                    try:
                        check_coverage(state)
                    except RestoreError as exc:
                        raise StateError(f"changelog writer returned bad handles: {exc}") from exc
                    states[bucket] = state
            except BaseException as exc:
                out.set_exception(exc)
            else:
                out.set_result(states)

        persisted.add_done_callback(compose)
        return out

    def mark_persisted(self, bucket_states: Mapping[int, BucketState]) -> None:
        """Record in the store that buckets are at the lineage of a finished
        :meth:`checkpoint` (so another worker may reuse the local copy), for each bucket
        that has not changed since. Call on the task thread after the future resolves."""
        for bucket, state in bucket_states.items():
            track = self._tracks.get(bucket)
            if track is None:
                continue
            track.persisted = state.changelog
            if self.changelog.next_seq(bucket) == state.seq:
                track.token = state.token
                if self.restored(bucket):  # a bucket still restoring gets its own metadata
                    self.store.set_meta(bucket, BucketMeta(state.seq, state.token))
        self.store.flush()

    def changelog_since_base(self, bucket: int) -> tuple[ChangelogHandle, ...]:
        """Durable changelog handles of ``bucket`` above its current base (ending after
        the snapshot's seq), as of the newest persisted checkpoint or restore. Changes
        not yet persisted are not counted."""
        track = self._track(bucket)
        base = track.base
        return tuple(h for h in track.persisted if h.to_seq > base)

    def notify_checkpoint_complete(self, bucket_states: Mapping[int, BucketState]) -> None:
        """A checkpoint with these bucket states completed: truncate each bucket's
        changelog below the snapshot it references (never beyond the current base)."""
        for bucket, state in bucket_states.items():
            track = self._tracks.get(bucket)
            if track is None or state.snapshot is None:
                continue
            cut = min(state.snapshot.seq, track.base)
            if cut > track.truncated:
                self.changelog.truncate(bucket, cut)
                track.truncated = cut

    # --- materialization -----------------------------------------------------------------

    def materialization_view(self, bucket: int) -> MaterializationView:
        """A consistent view of ``bucket`` at its current seq (cheap; the copy or read
        transaction is taken here, the reading happens wherever the view goes)."""
        track = self._track(bucket)
        seq = self.changelog.next_seq(bucket)
        return MaterializationView(bucket, seq, track.generation, self.store.snapshot_items(bucket))

    def generation(self, bucket: int) -> int:
        """Changes whenever :meth:`restore` replaces the bucket's lineage."""
        return self._track(bucket).generation

    def on_materialized(self, bucket: int, handle: SnapshotHandle) -> bool:
        """Make ``handle`` the bucket's base for future checkpoints. Returns False (and
        changes nothing) for a snapshot older than the current base."""
        track = self._track(bucket)
        if handle.bucket != bucket:
            raise StateError(f"snapshot {handle.uri} is of bucket {handle.bucket}, not {bucket}")
        if handle.seq > self.changelog.next_seq(bucket):
            raise StateError(
                f"snapshot {handle.uri} of bucket {bucket} is at seq {handle.seq}, beyond the "
                f"bucket's seq {self.changelog.next_seq(bucket)}; it is from another lineage"
            )
        if handle.seq < track.base:
            return False
        self._drop(track)
        track.snapshot = handle
        track.captured = False
        track.inherited = tuple(h for h in track.inherited if h.to_seq > handle.seq)
        return True

    def _drop(self, track: _Track) -> None:
        """``track`` is about to lose its snapshot: if no checkpoint ever saw it, no
        manifest can reference it, so it is garbage right away."""
        if track.snapshot is not None and not track.captured:
            self._unreferenced.append(track.snapshot)

    def take_unreferenced_snapshots(self) -> list[SnapshotHandle]:
        """Snapshots replaced before any checkpoint captured them (safe to delete: no
        manifest references them); the list is cleared."""
        out, self._unreferenced = self._unreferenced, []
        return out

    # --- restore -------------------------------------------------------------------------

    def restore(
        self,
        bucket_states: Mapping[int, BucketState],
        resolver: StoreResolver,
        *,
        reader: ChangeReader | None = None,
        fetch: FetchSettings | None = None,
        background: BackgroundRestoreSettings | None = None,
        priority: Sequence[int] = (),
        select: StateKeys | None = None,
    ) -> RestoreSummary:
        """Bring every bucket of the range to the given lineage (buckets absent from
        ``bucket_states`` start empty). A bucket whose local copy already carries the
        expected ``(seq, token)`` is reused without reading storage; the others are
        rebuilt from storage (every bucket's handles checked before any download):

        * eagerly (``background`` None or not ``background.background``): all together
          by :func:`~gic_runtime.state.restore.restore_buckets` before this returns
          (coalesced parallel reads tuned by ``fetch``; ``reader`` replaces them with
          one call per section);
        * in the background: a :class:`BackgroundRestore` rebuilds them while the
          caller goes on, and :attr:`store` is gated so that any access to a bucket
          waits for that bucket only (:meth:`restored`, :meth:`restore_progress`);
          the buckets of ``priority`` (those the task's input touches, in input order)
          are restored first. When ``priority`` names every bucket to rebuild (and no
          earlier restore runs), the batch would wait for all of them anyway: they are
          rebuilt eagerly instead, on this thread, before this returns -- the same
          plan without a restore running beside the processing;
        * selected (``select`` given, ``background.select_keys``, no restore running
          nor carried over, no ``reader``): ``select(self)`` names every state key the
          batch will read, :func:`~gic_runtime.state.selective_read.select_keys` reads
          just those from storage, and the buckets to rebuild are served from them
          (:class:`~gic_runtime.state.selected_store.SelectedBuckets`) until
          :meth:`restore_selected`, called once the batch's checkpoint is durable,
          restores them to that checkpoint's lineage in the background.

        A background restore still running from an earlier call is kept when every
        bucket it has not finished is expected at the same ``(seq, token)`` (the usual
        case: untouched buckets keep their lineage from batch to batch), and closed
        otherwise (its finished buckets are then ordinary local copies)."""
        outside = sorted(b for b in bucket_states if b not in self._tracks)
        if outside:
            raise StateError(
                f"bucket states for {outside} are outside this backend's buckets "
                f"[{self._lo}, {self._hi})"
            )
        self._drop_selection()  # left by a batch that failed: its buckets are rebuilt
        given = [bucket_states.get(b) or BucketState(b, 0) for b in self.bucket_range]
        for bucket, state in zip(self.bucket_range, given, strict=True):
            if state.bucket != bucket:
                raise StateError(f"bucket state for {state.bucket} given as bucket {bucket}")
        inner = self.store.inner
        in_background = background is not None and background.background
        if not in_background:
            self.close_restore()  # an eager restore leaves nothing to wait for
        running = self._restorer
        carried: tuple[int, ...] = ()
        if running is not None:
            outstanding = running.outstanding()
            if not running.failed() and all(
                _same_point(running.target(b), given[b - self._lo]) for b in outstanding
            ):
                carried = tuple(sorted(outstanding))
            else:
                self.close_restore()
        pending = set(carried)
        hits, empty, rebuild = classify_range(inner, [s for s in given if s.bucket not in pending])
        restored: list[int] = []
        selected: list[int] = []
        replayed = entries = 0
        if (
            rebuild
            and select is not None
            and background is not None
            and in_background
            and background.select_keys
            and reader is None
            and not carried
            and self._restorer is None
        ):
            self._select(rebuild, select, resolver, background)
            selected = [s.bucket for s in rebuild]
            rebuild = []
        if (
            background is not None
            and in_background
            and background.eager_when_all_touched
            and not carried
            and _all_named(rebuild, priority)
        ):
            in_background = False  # the batch waits for every one: the eager plan, here
            self.close_restore()
        if rebuild and background is not None and in_background:
            if running is not None and running is self._restorer:
                self.close_restore()  # one restore at a time; its unfinished buckets join
                rebuild = [*rebuild, *(given[b - self._lo] for b in carried)]
                rebuild.sort(key=lambda st: st.bucket)
                carried = ()
            self._start_restore(rebuild, resolver, background, reader, priority)
            restored = [s.bucket for s in rebuild]
        elif rebuild:
            stats = restore_buckets(inner, rebuild, resolver, reader=reader, settings=fetch)
            restored = [st.bucket for st in stats]
            replayed = sum(st.replayed for st in stats)
            entries = sum(st.snapshot_entries for st in stats)
        inner.flush()
        summary = RestoreSummary(
            local_hits=tuple(hits),
            restored=tuple(sorted([*restored, *carried])),
            empty=tuple(empty),
            replayed=replayed,
            snapshot_entries=entries,
            selected=tuple(selected),
        )
        for state in given:
            bucket = state.bucket
            self.changelog.reset(bucket, state.seq)
            old = self._tracks[bucket]
            self._drop(old)
            self._tracks[bucket] = _Track(
                floor=state.seq,
                snapshot=state.snapshot,
                inherited=state.changelog,
                token=state.token,
                truncated=state.base,
                generation=old.generation + 1,
                persisted=state.changelog,
            )
        return summary

    def _select(
        self,
        rebuild: Sequence[BucketState],
        select: StateKeys,
        resolver: StoreResolver,
        settings: BackgroundRestoreSettings,
    ) -> None:
        """Serve ``rebuild``'s buckets from the keys ``select`` names (see :meth:`restore`)."""
        named = select(self)
        buckets = {s.bucket for s in rebuild}
        outside = sorted(b for b in named if b not in self._tracks)
        if outside:
            raise StateError(
                f"the batch names state keys of buckets {outside[:5]}, outside this "
                f"backend's buckets [{self._lo}, {self._hi})"
            )
        # Named keys of a bucket that needs no rebuild are read from the local copy.
        wanted = {b: named.get(b, ()) for b in sorted(buckets)}
        values = select_keys(rebuild, wanted, resolver, settings=settings.run_fetch)
        selection = SelectedBuckets(wanted, values)
        self._selection = selection
        self.store.set_overlay(selection)

    def restore_selected(
        self,
        bucket_states: Mapping[int, BucketState],
        resolver: StoreResolver,
        settings: BackgroundRestoreSettings,
    ) -> tuple[int, ...]:
        """After the checkpoint of a batch that ran on selected keys became durable: stop
        serving them and restore those buckets to ``bucket_states`` (that checkpoint's
        lineage, which ends with the batch's changes) in the background; returns the
        buckets. Their local copies carry no metadata until each is restored."""
        selection = self._selection
        if selection is None:
            return ()
        self._drop_selection()
        chosen = sorted(selection.buckets)
        missing = [b for b in chosen if b not in bucket_states]
        if missing:
            raise StateError(f"no checkpointed state for selected buckets {missing[:5]}")
        if self._restorer is not None:
            raise StateError("a background restore runs beside a batch on selected keys")
        self._start_restore([bucket_states[b] for b in chosen], resolver, settings, None, ())
        return tuple(chosen)

    def _drop_selection(self) -> None:
        if self._selection is not None:
            self._selection = None
            self.store.set_overlay(None)

    def _start_restore(
        self,
        states: Sequence[BucketState],
        resolver: StoreResolver,
        settings: BackgroundRestoreSettings,
        reader: ChangeReader | None,
        priority: Sequence[int],
    ) -> None:
        restorer = BackgroundRestore(
            self.store.inner,
            states,
            resolver,
            settings,
            reader=reader,
            on_finished=self._finished,
            name=f"buckets [{self._lo}, {self._hi})",
            priority=priority,
        )
        self._restorer = restorer
        self.store.set_gate(restorer.ensure)

    def _finished(self, restorer: BackgroundRestore) -> None:
        """Every bucket of ``restorer`` is complete or failed (a restore thread)."""
        if restorer is not self._restorer:
            return
        if not restorer.failed():
            self.store.set_gate(None)
        for callback in list(self._on_restored):
            callback()

    def on_restore_finished(self, callback: Callable[[], None]) -> None:
        """Call ``callback`` (from a restore thread) whenever a background restore of
        this backend finishes (every bucket complete or failed)."""
        self._on_restored.append(callback)

    def restored(self, bucket: int) -> bool:
        """Whether ``bucket``'s local copy is complete (False only while a background
        restore has not finished it)."""
        selection = self._selection
        if selection is not None and bucket in selection.buckets:
            return False
        restorer = self._restorer
        return restorer is None or bucket in restorer.ready or restorer.target(bucket) is None

    def restore_pending(self) -> bool:
        """Whether a background restore still has buckets pending or in progress (or
        buckets wait for theirs, served from selected keys)."""
        if self._selection is not None:
            return True
        restorer = self._restorer
        return restorer is not None and bool(restorer.outstanding())

    @property
    def restorer(self) -> BackgroundRestore | None:
        """The newest background restore (``None``: none, or it was closed)."""
        return self._restorer

    def restore_outstanding(self) -> frozenset[int]:
        """Buckets a background restore has not finished yet."""
        restorer = self._restorer
        return restorer.outstanding() if restorer is not None else frozenset()

    def restore_progress(self) -> RestoreProgress | None:
        """Progress of the newest background restore (``None``: none ran)."""
        restorer = self._restorer
        return restorer.progress() if restorer is not None else None

    def check_restore(self) -> None:
        """Raise the error of a bucket whose background restore failed, if any."""
        if self._restorer is not None:
            self._restorer.check()

    def close_restore(self) -> None:
        """Stop a background restore (buckets not started stay without metadata and are
        rebuilt when next needed) and open the store's gate; stop serving selected keys
        (those buckets' local copies were never written: they are rebuilt too)."""
        self._drop_selection()
        restorer, self._restorer = self._restorer, None
        if restorer is not None:
            restorer.close()
        self.store.set_gate(None)


def _all_named(rebuild: Sequence[BucketState], priority: Sequence[int]) -> bool:
    """Whether ``priority`` names every bucket of ``rebuild`` (a non-empty one)."""
    if not rebuild or not priority:
        return False
    named = set(priority)
    return all(state.bucket in named for state in rebuild)


def _same_point(target: BucketState | None, given: BucketState) -> bool:
    return target is not None and (target.seq, target.token) == (given.seq, given.token)
