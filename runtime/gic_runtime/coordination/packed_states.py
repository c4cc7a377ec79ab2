"""Bucket states packed for the wire: the ``expected`` lineage a barrier ships.

Every state task of a batch receives the whole barrier (Spark ships one closure per
stage), so the expected states of *all* buckets travel to every task, and each task
needs only its own. Between two materializations of a bucket its changelog handles
accumulate, one per batch: with 128 buckets and 30 handles each, the states pickled as
objects take about 0.5 MB and tens of milliseconds to pickle on the driver and again to
unpickle in every task. Yet they hold few distinct URIs (one segment object per task
and upload carries a section of every bucket of that task).

:class:`PackedStates` is a read-only ``Mapping[int, BucketState]`` holding one msgpack
blob per task's bucket range plus one table of the distinct URIs. A task's blob is
decoded when one of its buckets is first read, so a task decodes only its own states.
It pickles as the blobs.

Invariant: ``PackedStates.pack(states, B, n)`` is equal, as a mapping, to ``states``
(same buckets, equal :class:`~gic_runtime.handles.BucketState` values).

Thread-safety: immutable as seen from outside; the decode cache may be filled by
several threads at once (each decodes the same value; the last assignment wins).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import msgpack  # type: ignore[import-untyped, unused-ignore]

from gic_runtime.coordination.ranges import task_of_bucket
from gic_runtime.errors import ConfigurationError
from gic_runtime.handles import BucketState, ChangelogHandle, SnapshotHandle


class PackedStates(Mapping[int, BucketState]):
    """Expected bucket states, packed per task (see the module docstring)."""

    __slots__ = (
        "_blobs",
        "_buckets",
        "_decoded",
        "_num_buckets",
        "_num_tasks",
        "_uri_blob",
        "_uris",
    )

    def __init__(
        self,
        uri_blob: bytes,
        blobs: tuple[bytes, ...],
        buckets: tuple[tuple[int, ...], ...],
        num_buckets: int,
        num_tasks: int,
    ) -> None:
        if len(blobs) != num_tasks or len(buckets) != num_tasks:
            raise ConfigurationError(
                f"packed states hold {len(blobs)} blobs for {num_tasks} tasks; driver and "
                "executors must run the same gic version"
            )
        self._uri_blob = uri_blob
        self._blobs = blobs
        self._buckets = buckets
        self._num_buckets = num_buckets
        self._num_tasks = num_tasks
        self._uris: tuple[str, ...] | None = None
        self._decoded: list[dict[int, BucketState] | None] = [None] * num_tasks

    @classmethod
    def pack(
        cls, states: Mapping[int, BucketState], num_buckets: int, num_tasks: int
    ) -> PackedStates:
        """``states`` (buckets in ``[0, num_buckets)``) packed per task of ``num_tasks``."""
        uri_refs: dict[str, int] = {}

        def ref(uri: str) -> int:
            found = uri_refs.get(uri)
            if found is None:
                found = uri_refs[uri] = len(uri_refs)
            return found

        rows: list[list[Any]] = [[] for _ in range(num_tasks)]
        keys: list[list[int]] = [[] for _ in range(num_tasks)]
        for bucket, s in states.items():
            if not 0 <= bucket < num_buckets:
                raise ConfigurationError(f"bucket {bucket} is outside [0, {num_buckets})")
            task = task_of_bucket(num_buckets, num_tasks, bucket)
            snap = s.snapshot
            rows[task].append(
                (
                    bucket,
                    s.bucket,
                    s.seq,
                    None
                    if snap is None
                    else (ref(snap.uri), snap.bucket, snap.seq, snap.size, snap.crc),
                    [
                        (ref(h.uri), h.offset, h.length, h.bucket, h.from_seq, h.to_seq, h.crc)
                        for h in s.changelog
                    ],
                    ref(s.token),
                )
            )
            keys[task].append(bucket)
        return cls(
            msgpack.packb(list(uri_refs), use_bin_type=True),
            tuple(msgpack.packb(r, use_bin_type=True) for r in rows),
            tuple(tuple(k) for k in keys),
            num_buckets,
            num_tasks,
        )

    def __reduce__(self) -> tuple[Any, ...]:
        return (
            PackedStates,
            (self._uri_blob, self._blobs, self._buckets, self._num_buckets, self._num_tasks),
        )

    def _task_states(self, task: int) -> dict[int, BucketState]:
        decoded = self._decoded[task]
        if decoded is not None:
            return decoded
        uris = self._uris
        if uris is None:
            uris = self._uris = tuple(msgpack.unpackb(self._uri_blob, raw=False))
        decoded = {}
        for key, bucket, seq, snap, handles, token in msgpack.unpackb(
            self._blobs[task], raw=False, use_list=False
        ):
            decoded[key] = BucketState(
                bucket,
                seq,
                None if snap is None else SnapshotHandle(uris[snap[0]], *snap[1:]),
                tuple(ChangelogHandle(uris[h[0]], *h[1:]) for h in handles),
                uris[token],
            )
        self._decoded[task] = decoded
        return decoded

    def _task(self, bucket: object) -> int | None:
        if not isinstance(bucket, int) or not 0 <= bucket < self._num_buckets:
            return None
        return task_of_bucket(self._num_buckets, self._num_tasks, bucket)

    def __getitem__(self, bucket: int) -> BucketState:
        task = self._task(bucket)
        if task is None:
            raise KeyError(bucket)
        return self._task_states(task)[bucket]

    def __contains__(self, bucket: object) -> bool:
        task = self._task(bucket)
        return task is not None and bucket in self._buckets[task]

    def __iter__(self) -> Iterator[int]:
        for keys in self._buckets:
            yield from keys

    def __len__(self) -> int:
        return sum(len(keys) for keys in self._buckets)

    def __repr__(self) -> str:
        return f"PackedStates({len(self)} buckets, {self._num_tasks} tasks)"
