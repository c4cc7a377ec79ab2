"""The batching changelog writer: one task's buckets, one segment object per upload."""

from __future__ import annotations

import bisect
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field

from gic_runtime.changelog.api import Uploader
from gic_runtime.changelog.records import Op
from gic_runtime.changelog.segment import RECORD_HEADER, Codec, SectionInfo, SegmentBuilder
from gic_runtime.changelog.upload_types import UploadResult
from gic_runtime.errors import StateError, UploadError
from gic_runtime.handles import ChangelogHandle


@dataclass(frozen=True, slots=True)
class WriterSettings:
    """Tuning of :class:`BatchingChangelogWriter`. Immutable."""

    preemptive_upload_bytes: int = 4 * 1024 * 1024
    """Upload everything buffered as soon as new (never-attempted) changes reach this many
    bytes, so ``persist`` at checkpoint time has at most this much left to upload. 4 MiB
    uploads in well under a second to S3 yet keeps objects few and PUTs cheap."""

    codec: Codec = Codec.ZSTD
    """Preferred section codec; a section is compressed only when that saves space."""


@dataclass(slots=True)
class _Chunk:
    """Contiguous changes of one bucket not yet durable: ``count`` records from ``from_seq``."""

    from_seq: int
    count: int
    data: bytearray

    @property
    def to_seq(self) -> int:
        return self.from_seq + self.count


@dataclass(slots=True)
class _BucketLog:
    next_seq: int = 0
    generation: int = 0
    floor: int = 0
    """``persist`` may not ask for changes below this (reset point or truncation)."""
    open: _Chunk | None = None
    retry: list[_Chunk] = field(default_factory=list)
    """Chunks of failed uploads, sorted by ``from_seq``; uploaded again by the next flush."""
    handles: list[ChangelogHandle] = field(default_factory=list)
    """Durable sections, sorted by ``from_seq``."""


@dataclass(slots=True)
class _Pending:
    """One segment upload in flight: which chunks it carries, for which generations."""

    chunks: list[tuple[int, int, _Chunk]]  # (bucket, generation, chunk)
    result: Future[list[ChangelogHandle]]

    def overlaps(self, bucket: int, generation: int, since: int, until: int) -> bool:
        return any(
            b == bucket and g == generation and c.to_seq > since and c.from_seq < until
            for b, g, c in self.chunks
        )


def _encode_records(op: Op, keys: Sequence[bytes], values: Sequence[bytes]) -> bytes:
    """The records ``(op, keys[i], values[i])`` concatenated; record headers are shared
    between records of equal key and value lengths (most of a bulk write's)."""
    pack = RECORD_HEADER.pack
    headers: dict[tuple[int, int], bytes] = {}
    parts: list[bytes] = []
    add = parts.append
    for k, v in zip(keys, values, strict=True):
        lengths = (len(k), len(v))
        header = headers.get(lengths)
        if header is None:
            header = headers[lengths] = pack(op, *lengths)
        add(header)
        add(k)
        add(v)
    return b"".join(parts)


class BatchingChangelogWriter:
    """:class:`~gic_runtime.changelog.api.ChangelogWriter` for one task's bucket range.

    Appends go to per-bucket buffers; an upload (pre-emptive, or by ``persist``) takes
    every bucket's buffered changes into ONE segment object with one section per
    contiguous chunk. Invariants: for each bucket, the durable handles, the chunks of
    uploads in flight, the chunks of failed uploads and the open buffer together hold
    every change in ``[floor, next_seq)`` exactly once; a failed upload's chunks go back
    to the buffer (unless the bucket was reset since), so no change is lost.

    Thread-safety: ``append``, ``reset``, ``persist``, ``truncate`` and ``close`` are
    called by one task thread; upload completions arrive on uploader threads; an
    internal lock keeps the per-bucket state consistent between them. ``append`` may
    block on the uploader's back-pressure when it starts a pre-emptive upload.
    """

    def __init__(
        self,
        buckets: Iterable[int],
        uploader: Uploader,
        settings: WriterSettings | None = None,
    ) -> None:
        self._logs = {b: _BucketLog() for b in buckets}
        if not self._logs:
            raise StateError("a changelog writer needs at least one bucket")
        self._uploader = uploader
        self._settings = settings or WriterSettings()
        self._lock = threading.Lock()
        self._pending: list[_Pending] = []
        self._open_bytes = 0
        self._closed = False
        self.uploads_started = 0
        """Segment uploads started (read for stats; written by the task thread)."""
        self.preemptive_uploads = 0

    # --- ChangelogWriter ---------------------------------------------------------------

    def append(self, bucket: int, op: Op, key: bytes, value: bytes = b"") -> int:
        log = self._log(bucket)
        record = RECORD_HEADER.pack(op, len(key), len(value)) + key + value
        with self._lock:
            if self._closed:
                raise StateError("changelog writer is closed")
            seq = log.next_seq
            if log.open is None:
                log.open = _Chunk(seq, 0, bytearray())
            log.open.data += record
            log.open.count += 1
            log.next_seq = seq + 1
            self._open_bytes += len(record)
            full = self._open_bytes >= self._settings.preemptive_upload_bytes
        if full:
            self.preemptive_uploads += 1
            self._flush()
        return seq

    def append_many(
        self, bucket: int, op: Op, keys: Sequence[bytes], values: Sequence[bytes]
    ) -> int:
        log = self._log(bucket)
        n = len(keys)
        if len(values) != n:
            raise StateError(f"{len(values)} values for {n} keys")
        data = _encode_records(op, keys, values)
        with self._lock:
            if self._closed:
                raise StateError("changelog writer is closed")
            seq = log.next_seq
            if n == 0:
                return seq
            if log.open is None:
                log.open = _Chunk(seq, 0, bytearray())
            log.open.data += data
            log.open.count += n
            log.next_seq = seq + n
            self._open_bytes += len(data)
            full = self._open_bytes >= self._settings.preemptive_upload_bytes
        if full:
            self.preemptive_uploads += 1
            self._flush()
        return seq

    def next_seq(self, bucket: int) -> int:
        log = self._log(bucket)
        with self._lock:
            return log.next_seq

    def reset(self, bucket: int, next_seq: int) -> None:
        log = self._log(bucket)
        if next_seq < 0:
            raise StateError(f"bucket {bucket}: next_seq must not be negative, got {next_seq}")
        with self._lock:
            if log.open is not None:
                self._open_bytes -= len(log.open.data)
            log.generation += 1
            log.next_seq = log.floor = next_seq
            log.open = None
            log.retry = []
            log.handles = []

    def persist(self, since: Mapping[int, int]) -> Future[dict[int, tuple[ChangelogHandle, ...]]]:
        with self._lock:
            if self._closed:
                raise StateError("changelog writer is closed")
            until: dict[int, int] = {}
            known: dict[int, list[ChangelogHandle]] = {}
            generations: dict[int, int] = {}
            for bucket, start in since.items():
                log = self._log(bucket)
                if not log.floor <= start <= log.next_seq:
                    raise StateError(
                        f"bucket {bucket}: cannot persist from seq {start}; this writer holds "
                        f"changes [{log.floor}, {log.next_seq}) (reset or truncated above it)"
                    )
                until[bucket] = log.next_seq
                generations[bucket] = log.generation
                known[bucket] = [
                    h for h in log.handles if h.to_seq > start and h.from_seq < log.next_seq
                ]
            waiting = [
                p
                for p in self._pending
                if any(p.overlaps(b, generations[b], since[b], until[b]) for b in since)
            ]
        new = self._flush()
        if new is not None and any(
            new.overlaps(b, generations[b], since[b], until[b]) for b in since
        ):
            waiting.append(new)
        out: Future[dict[int, tuple[ChangelogHandle, ...]]] = Future()

        def finish() -> None:
            merged = {b: list(hs) for b, hs in known.items()}
            for pending in waiting:
                error = pending.result.exception()
                if error is not None:
                    out.set_exception(error)
                    return
                for h in pending.result.result():
                    if (
                        h.bucket in since
                        and h.to_seq > since[h.bucket]
                        and h.from_seq < until[h.bucket]
                    ):
                        merged[h.bucket].append(h)
            out.set_result(
                {b: tuple(sorted(hs, key=lambda h: h.from_seq)) for b, hs in merged.items()}
            )

        _when_all([p.result for p in waiting], finish)
        return out

    def truncate(self, bucket: int, before_seq: int) -> None:
        log = self._log(bucket)
        with self._lock:
            log.handles = [h for h in log.handles if h.to_seq > before_seq]
            log.retry = [c for c in log.retry if c.to_seq > before_seq]
            log.floor = max(log.floor, min(before_seq, log.next_seq))

    def close(self) -> None:
        """Wait for this writer's uploads in flight (their failures are not raised) and
        refuse further use. Buffered changes nobody persisted are dropped. The uploader
        is shared and stays open."""
        with self._lock:
            self._closed = True
            pending = list(self._pending)
        for p in pending:
            p.result.exception()

    # --- introspection ------------------------------------------------------------------

    def buffered_bytes(self) -> int:
        """Bytes of changes appended but not yet in any upload attempt."""
        with self._lock:
            return self._open_bytes

    def uploads_in_flight(self) -> int:
        """Segment uploads started by this writer that have not settled yet."""
        with self._lock:
            return len(self._pending)

    def handles(self, bucket: int) -> tuple[ChangelogHandle, ...]:
        """Durable handles of ``bucket`` still retained (after truncation)."""
        log = self._log(bucket)
        with self._lock:
            return tuple(log.handles)

    # --- uploads ------------------------------------------------------------------------

    def _log(self, bucket: int) -> _BucketLog:
        try:
            return self._logs[bucket]
        except KeyError:
            raise StateError(
                f"bucket {bucket} is not owned by this changelog writer "
                f"(owns {min(self._logs)}..{max(self._logs)})"
            ) from None

    def _flush(self) -> _Pending | None:
        """Start one segment upload with every buffered chunk of every bucket."""
        with self._lock:
            chunks: list[tuple[int, int, _Chunk]] = []
            for bucket, log in self._logs.items():
                taken = [*log.retry, *([log.open] if log.open is not None else [])]
                chunks += ((bucket, log.generation, c) for c in taken)
                log.retry, log.open = [], None
            if not chunks:
                return None
            self._open_bytes = 0
            pending = _Pending(chunks, Future())
            self._pending.append(pending)
        builder = SegmentBuilder(codec=self._settings.codec)
        for bucket, _gen, chunk in chunks:
            builder.add_section(bucket, chunk.from_seq, chunk.count, bytes(chunk.data))
        data, sections = builder.build()
        self.uploads_started += 1
        try:
            upload = self._uploader.submit(data)
        except Exception as exc:
            self._settle(pending, sections, None, exc)
            return pending
        upload.add_done_callback(lambda f: self._settle(pending, sections, f, None))
        return pending

    def _settle(
        self,
        pending: _Pending,
        sections: list[SectionInfo],
        upload: Future[UploadResult] | None,
        error: BaseException | None,
    ) -> None:
        if upload is not None:
            error = upload.exception()
        with self._lock:
            self._pending.remove(pending)
            handles: list[ChangelogHandle] = []
            for (bucket, gen, chunk), info in zip(pending.chunks, sections, strict=True):
                log = self._logs[bucket]
                if gen != log.generation:
                    continue  # the bucket was reset since: these changes are history
                if error is not None:
                    if chunk.to_seq > log.floor:
                        bisect.insort(log.retry, chunk, key=lambda c: c.from_seq)
                elif upload is not None:
                    handle = info.handle(upload.result().uri)
                    handles.append(handle)
                    if handle.to_seq > log.floor:
                        bisect.insort(log.handles, handle, key=lambda h: h.from_seq)
        if error is None:
            pending.result.set_result(handles)
        else:
            if not isinstance(error, UploadError):
                error = UploadError(f"changelog segment upload failed: {error}")
            pending.result.set_exception(error)


def _when_all(futures: list[Future[list[ChangelogHandle]]], callback: Callable[[], None]) -> None:
    """Run ``callback`` once every future is done (at once when there are none)."""
    if not futures:
        callback()
        return
    lock = threading.Lock()
    remaining = [len(futures)]

    def one_done(_: object) -> None:
        with lock:
            remaining[0] -= 1
            last = remaining[0] == 0
        if last:
            callback()

    for future in futures:
        future.add_done_callback(one_done)
