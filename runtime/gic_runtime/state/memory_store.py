"""In-memory :class:`~gic_runtime.state.stores.KVStore`: a dict per bucket.

Each bucket is a dict for point operations plus a sorted key index for prefix scans
(a list of sorted chunks, so inserting a new key costs ``O(log n + chunk)`` rather than
``O(n)``). Values are immutable ``bytes``, so a consistent view is a shallow copy of the
bucket's dict taken on the owner's thread; it is sorted lazily when iterated (on the
reader's thread). ``append`` builds a new ``bytes`` each time: ``O(len)`` per append.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Iterator, Sequence

from gic_runtime.changelog.records import Op
from gic_runtime.errors import StateError
from gic_runtime.state.stores import BucketMeta, apply_change

_CHUNK = 512


def prefix_end(prefix: bytes) -> bytes | None:
    """Smallest byte string greater than every string starting with ``prefix``
    (``None`` if there is none, i.e. ``prefix`` is all ``0xff``)."""
    stripped = prefix.rstrip(b"\xff")
    if not stripped:
        return None
    return stripped[:-1] + bytes([stripped[-1] + 1])


class SortedKeys:
    """Sorted set of byte strings with cheap inserts and range queries. Not thread-safe."""

    def __init__(self) -> None:
        self._chunks: list[list[bytes]] = []
        self._maxes: list[bytes] = []

    def add(self, key: bytes) -> None:
        """Insert ``key`` (caller guarantees it is absent)."""
        if not self._chunks:
            self._chunks.append([key])
            self._maxes.append(key)
            return
        i = bisect.bisect_left(self._maxes, key)
        if i == len(self._chunks):
            i -= 1
            self._chunks[i].append(key)
            self._maxes[i] = key
        else:
            bisect.insort(self._chunks[i], key)
        chunk = self._chunks[i]
        if len(chunk) > 2 * _CHUNK:
            half = len(chunk) // 2
            self._chunks[i : i + 1] = [chunk[:half], chunk[half:]]
            self._maxes[i : i + 1] = [chunk[half - 1], chunk[-1]]

    def last(self) -> bytes | None:
        """The largest key (``None``: empty)."""
        return self._maxes[-1] if self._maxes else None

    def remove(self, key: bytes) -> None:
        """Remove ``key`` (caller guarantees it is present)."""
        i = bisect.bisect_left(self._maxes, key)
        chunk = self._chunks[i]
        del chunk[bisect.bisect_left(chunk, key)]
        if not chunk:
            del self._chunks[i]
            del self._maxes[i]
        else:
            self._maxes[i] = chunk[-1]

    def range(self, prefix: bytes) -> list[bytes]:
        """Every key starting with ``prefix``, in order."""
        return self.between(prefix, prefix_end(prefix))

    def between(self, start: bytes, end: bytes | None) -> list[bytes]:
        """Every key ``k`` with ``start <= k < end`` (no upper bound when ``end`` is
        ``None``), in order."""
        out: list[bytes] = []
        i = bisect.bisect_left(self._maxes, start)
        while i < len(self._chunks):
            chunk = self._chunks[i]
            j = bisect.bisect_left(chunk, start)
            k = len(chunk) if end is None else bisect.bisect_left(chunk, end)
            out.extend(chunk[j:k])
            if k < len(chunk):
                break
            i += 1
        return out


class _Bucket:
    __slots__ = ("data", "index", "meta")

    def __init__(self) -> None:
        self.data: dict[bytes, bytes] = {}
        self.index = SortedKeys()
        self.meta: BucketMeta | None = None


class _DictView:
    """A copied bucket; sorted when iterated."""

    def __init__(self, data: dict[bytes, bytes]) -> None:
        self._data: dict[bytes, bytes] | None = data

    def __iter__(self) -> Iterator[tuple[bytes, bytes]]:
        data = self._data
        if data is None:
            raise StateError("bucket view was already closed or iterated")
        self._data = None
        for key in sorted(data):
            yield key, data[key]

    def close(self) -> None:
        self._data = None

    def __enter__(self) -> _DictView:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class InMemoryStore:
    """:class:`~gic_runtime.state.stores.KVStore` in process memory.

    Not thread-safe except as the protocol allows: one owner thread per bucket; views
    from :meth:`snapshot_items` may be iterated on other threads. Not shared between
    processes; ``flush`` is a no-op.
    """

    def __init__(self) -> None:
        self._buckets: dict[int, _Bucket] = {}
        self._closed = False

    def _bucket(self, bucket: int) -> _Bucket:
        b = self._buckets.get(bucket)
        if b is None:
            if self._closed:
                raise StateError("the in-memory store is closed")
            b = self._buckets[bucket] = _Bucket()
        return b

    def get(self, bucket: int, key: bytes) -> bytes | None:
        return self._bucket(bucket).data.get(key)

    def put(self, bucket: int, key: bytes, value: bytes) -> None:
        b = self._bucket(bucket)
        b.meta = None
        if key not in b.data:
            b.index.add(key)
        b.data[key] = value

    def get_many(self, bucket: int, keys: Sequence[bytes]) -> list[bytes | None]:
        get = self._bucket(bucket).data.get
        return [get(key) for key in keys]

    def put_many(self, bucket: int, items: Sequence[tuple[bytes, bytes]]) -> None:
        b = self._bucket(bucket)
        b.meta = None
        data, index = b.data, b.index
        for key, value in items:
            if key not in data:
                index.add(key)
            data[key] = value

    def load_sorted(self, bucket: int, items: Iterable[tuple[bytes, bytes]]) -> int:
        b = self._bucket(bucket)
        b.meta = None
        data, index = b.data, b.index
        last = index.last()
        n = 0
        for key, value in items:
            if last is not None and key <= last:
                raise StateError(
                    f"bucket {bucket}: key {key!r} does not ascend after {last!r}; a "
                    "sorted load needs strictly ascending keys above the bucket's own"
                )
            index.add(key)
            data[key] = value
            last = key
            n += 1
        return n

    def delete(self, bucket: int, key: bytes) -> None:
        b = self._bucket(bucket)
        b.meta = None
        if b.data.pop(key, None) is not None:
            b.index.remove(key)

    def append(self, bucket: int, key: bytes, value: bytes) -> None:
        b = self._bucket(bucket)
        b.meta = None
        old = b.data.get(key)
        if old is None:
            b.index.add(key)
            b.data[key] = value
        else:
            b.data[key] = old + value

    def delete_prefix(self, bucket: int, prefix: bytes) -> None:
        b = self._bucket(bucket)
        b.meta = None
        for key in b.index.range(prefix):
            del b.data[key]
            b.index.remove(key)

    def scan(self, bucket: int, prefix: bytes) -> list[tuple[bytes, bytes]]:
        b = self._bucket(bucket)
        return [(key, b.data[key]) for key in b.index.range(prefix)]

    def scan_range(self, bucket: int, start: bytes, stop: bytes) -> list[tuple[bytes, bytes]]:
        b = self._bucket(bucket)
        return [(key, b.data[key]) for key in b.index.between(start, stop)]

    def apply(self, bucket: int, changes: Iterable[tuple[Op, bytes, bytes]]) -> int:
        n = 0
        for op, key, value in changes:
            apply_change(self, bucket, op, key, value)
            n += 1
        return n

    def snapshot_items(self, bucket: int) -> _DictView:
        return _DictView(dict(self._bucket(bucket).data))

    def clear_bucket(self, bucket: int) -> None:
        self._buckets.pop(bucket, None)

    def get_meta(self, bucket: int) -> BucketMeta | None:
        return self._bucket(bucket).meta

    def set_meta(self, bucket: int, meta: BucketMeta) -> None:
        self._bucket(bucket).meta = meta

    def flush(self) -> None:
        """Nothing to do: changes are visible at once within the process."""

    def close(self) -> None:
        self._closed = True
        self._buckets.clear()

    def buckets(self) -> list[int]:
        """Buckets that hold data or metadata."""
        return sorted(b for b, v in self._buckets.items() if v.data or v.meta)
