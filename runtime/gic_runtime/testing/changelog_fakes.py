"""An in-memory :class:`~gic_runtime.changelog.api.ChangelogWriter` for tests.

:class:`TestingChangelogWriter` keeps every appended change; ``persist`` "uploads" the
pending changes of each bucket as one in-memory section with a ``memory://`` URI and
completes its future at once. Its :meth:`~TestingChangelogWriter.read_changes` has the
signature of ``gic_runtime.changelog.reader.read_changes``, so a restore can replay from
it. Several writers may share one :class:`TestingChangelogStorage` (a job restarted in a
test keeps its "uploaded" changelog).
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import Future

from gic_runtime.changelog.records import ChangeRecord, Op
from gic_runtime.errors import RestoreError, UploadError
from gic_runtime.handles import ChangelogHandle
from gic_runtime.storage.uri import StoreResolver


class TestingChangelogStorage:
    """Durable sections by URI (what a real writer would have uploaded). Thread-safe."""

    __test__ = False

    def __init__(self) -> None:
        self._sections: dict[str, tuple[ChangeRecord, ...]] = {}
        self._ids = itertools.count()
        self._lock = threading.Lock()

    def store(self, records: tuple[ChangeRecord, ...]) -> str:
        with self._lock:
            uri = f"memory://testing-changelog/{next(self._ids):08d}.seg"
            self._sections[uri] = records
            return uri

    def load(self, uri: str) -> tuple[ChangeRecord, ...]:
        with self._lock:
            records = self._sections.get(uri)
        if records is None:
            raise RestoreError(f"changelog section {uri} does not exist")
        return records

    def forget(self, uri: str) -> None:
        """Drop a section (to simulate a lost file)."""
        with self._lock:
            self._sections.pop(uri, None)


class TestingChangelogWriter:
    """In-memory ChangelogWriter. Appends on one thread, like the real one.

    ``appended`` counts every append; ``truncations`` records ``(bucket, before_seq)``
    calls; set ``fail_persist`` to make the next persist futures fail with UploadError.
    """

    __test__ = False

    def __init__(self, storage: TestingChangelogStorage | None = None) -> None:
        self.storage = storage or TestingChangelogStorage()
        self._next: dict[int, int] = {}
        self._pending: dict[int, list[ChangeRecord]] = {}
        self._handles: dict[int, list[ChangelogHandle]] = {}
        self.appended = 0
        self.truncations: list[tuple[int, int]] = []
        self.fail_persist = False
        self.closed = False

    def append(self, bucket: int, op: Op, key: bytes, value: bytes = b"") -> int:
        seq = self._next.get(bucket, 0)
        self._next[bucket] = seq + 1
        self._pending.setdefault(bucket, []).append(ChangeRecord(seq, op, key, value))
        self.appended += 1
        return seq

    def append_many(
        self, bucket: int, op: Op, keys: Sequence[bytes], values: Sequence[bytes]
    ) -> int:
        first = self._next.get(bucket, 0)
        for key, value in zip(keys, values, strict=True):
            self.append(bucket, op, key, value)
        return first

    def next_seq(self, bucket: int) -> int:
        return self._next.get(bucket, 0)

    def reset(self, bucket: int, next_seq: int) -> None:
        self._next[bucket] = next_seq
        self._pending.pop(bucket, None)
        self._handles.pop(bucket, None)

    def persist(self, since: Mapping[int, int]) -> Future[dict[int, tuple[ChangelogHandle, ...]]]:
        future: Future[dict[int, tuple[ChangelogHandle, ...]]] = Future()
        if self.fail_persist:
            future.set_exception(UploadError("testing changelog: persist failed on purpose"))
            return future
        for bucket, pending in self._pending.items():
            if pending:
                records = tuple(pending)
                uri = self.storage.store(records)
                handle = ChangelogHandle(
                    uri=uri,
                    offset=0,
                    length=len(records),
                    bucket=bucket,
                    from_seq=records[0].seq,
                    to_seq=records[-1].seq + 1,
                    crc=0,
                )
                self._handles.setdefault(bucket, []).append(handle)
                pending.clear()
        result = {
            bucket: tuple(h for h in self._handles.get(bucket, ()) if h.to_seq > start)
            for bucket, start in since.items()
        }
        future.set_result(result)
        return future

    def truncate(self, bucket: int, before_seq: int) -> None:
        self.truncations.append((bucket, before_seq))
        self._handles[bucket] = [h for h in self._handles.get(bucket, ()) if h.to_seq > before_seq]

    def close(self) -> None:
        self.closed = True

    def handles(self, bucket: int) -> tuple[ChangelogHandle, ...]:
        """Handles the writer still remembers for ``bucket``."""
        return tuple(self._handles.get(bucket, ()))

    def read_changes(
        self,
        resolver: StoreResolver,
        handle: ChangelogHandle,
        *,
        from_seq: int = 0,
        to_seq: int | None = None,
    ) -> Iterator[ChangeRecord]:
        """Changes of ``handle`` with seq in ``[from_seq, to_seq)``."""
        for record in self.storage.load(handle.uri):
            if record.seq >= from_seq and (to_seq is None or record.seq < to_seq):
                yield record
