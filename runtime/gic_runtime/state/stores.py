"""The key-value store seam under the keyed state backend.

A :class:`KVStore` holds the state of many buckets; every operation names its bucket,
and buckets never share keys. Keys and values are bytes (see :mod:`gic_runtime.state.keys`
for what they contain). Two implementations:

* :class:`~gic_runtime.state.memory_store.InMemoryStore` -- a dict per bucket;
* :class:`~gic_runtime.state.lmdb_store.LmdbStore` -- on local disk, may exceed memory,
  shared by every worker process of an executor (the executor-local copy).

Lineage metadata
    Each bucket may carry a :class:`BucketMeta` ``(seq, token)`` naming the lineage
    point its data corresponds to. Invariant: the metadata describes the bucket's data
    exactly or is absent -- any data change removes it (atomically with the change), and
    :meth:`KVStore.set_meta` sets it. A worker that takes over a bucket compares it with
    the lineage the checkpoint expects and reuses the local copy only on a match.

Thread-safety
    Mutations, reads and :meth:`KVStore.snapshot_items` of a bucket happen on one thread
    (the task thread that owns the bucket). The :class:`BucketView` that
    ``snapshot_items`` returns may then be iterated on any other thread while the owner
    keeps writing: it shows the bucket exactly as it was when ``snapshot_items`` returned.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Protocol

from gic_runtime.changelog.records import Op


@dataclass(frozen=True, slots=True)
class BucketMeta:
    """Lineage point of a bucket's stored data: every change below ``seq`` is applied,
    and ``token`` names the newest durable object of that history."""

    seq: int
    token: str


class BucketView(Protocol):
    """A consistent, read-only view of one bucket, taken at one instant.

    Iterating yields ``(key, value)`` in ascending key order. May be iterated once, on
    any thread. Call :meth:`close` (or use ``with``) to release it promptly: an open
    view can pin old data (LMDB keeps pages of an open read transaction).
    """

    def __iter__(self) -> Iterator[tuple[bytes, bytes]]: ...

    def close(self) -> None: ...

    def __enter__(self) -> BucketView: ...

    def __exit__(self, *exc: object) -> None: ...


class KVStore(Protocol):
    """Bytes-to-bytes store, partitioned by bucket. See the module docstring for the
    lineage-metadata invariant and thread-safety."""

    def get(self, bucket: int, key: bytes) -> bytes | None:
        """Value of ``key``, or ``None``."""
        ...

    def put(self, bucket: int, key: bytes, value: bytes) -> None:
        """Set ``key`` to ``value``."""
        ...

    def get_many(self, bucket: int, keys: Sequence[bytes]) -> list[bytes | None]:
        """Values of ``keys`` in order (``None`` where absent): :meth:`get` in bulk."""
        ...

    def put_many(self, bucket: int, items: Sequence[tuple[bytes, bytes]]) -> None:
        """Set each ``(key, value)`` in order: :meth:`put` in bulk (ascending keys are
        fastest)."""
        ...

    def load_sorted(self, bucket: int, items: Iterable[tuple[bytes, bytes]]) -> int:
        """Add ``items`` to ``bucket``, whose keys must ascend strictly and lie above
        every key the bucket holds (a snapshot loaded into an emptied bucket); returns
        how many. The store may write them in order without searching (LMDB appends to
        its last page, which fills pages whole). A key that does not ascend raises
        :class:`~gic_runtime.errors.StateError` (the bucket then holds some of them:
        the caller clears it)."""
        ...

    def delete(self, bucket: int, key: bytes) -> None:
        """Remove ``key``; no-op if absent."""
        ...

    def append(self, bucket: int, key: bytes, value: bytes) -> None:
        """Concatenate ``value`` to the value of ``key`` (empty if absent)."""
        ...

    def delete_prefix(self, bucket: int, prefix: bytes) -> None:
        """Remove every key starting with ``prefix``."""
        ...

    def scan(self, bucket: int, prefix: bytes) -> list[tuple[bytes, bytes]]:
        """Every ``(key, value)`` whose key starts with ``prefix``, in key order."""
        ...

    def scan_range(self, bucket: int, start: bytes, stop: bytes) -> list[tuple[bytes, bytes]]:
        """Every ``(key, value)`` with ``start <= key < stop``, in key order."""
        ...

    def apply(self, bucket: int, changes: Iterable[tuple[Op, bytes, bytes]]) -> int:
        """Apply ``(op, key, value)`` changes in order (bulk path for restore and replay).
        Returns how many were applied."""
        ...

    def snapshot_items(self, bucket: int) -> BucketView:
        """A consistent view of the bucket as of now (see :class:`BucketView`)."""
        ...

    def clear_bucket(self, bucket: int) -> None:
        """Remove every key and the metadata of ``bucket``."""
        ...

    def get_meta(self, bucket: int) -> BucketMeta | None:
        """Lineage metadata of ``bucket``, or ``None`` if absent or invalidated."""
        ...

    def set_meta(self, bucket: int, meta: BucketMeta) -> None:
        """Record that the bucket's current data is at lineage point ``meta``."""
        ...

    def flush(self) -> None:
        """Make every change so far visible to other processes sharing the store."""
        ...

    def close(self) -> None:
        """Flush and release resources. The store is unusable afterwards."""
        ...


def apply_change(store: KVStore, bucket: int, op: Op, key: bytes, value: bytes) -> None:
    """Apply one key-value change record to ``store`` (the replay rule of every op)."""
    if op is Op.PUT:
        store.put(bucket, key, value)
    elif op is Op.DELETE:
        store.delete(bucket, key)
    elif op is Op.APPEND:
        store.append(bucket, key, value)
    elif op is Op.DELETE_PREFIX:
        store.delete_prefix(bucket, key)
    else:  # pragma: no cover - Op is closed
        raise ValueError(f"unknown op {op!r}")
