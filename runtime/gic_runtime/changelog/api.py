"""The changelog's two seams: the writer between the state backend and the DSTL
(:class:`ChangelogWriter`), and the uploader between writers and the store
(:class:`Uploader`). Protocols only; the implementations are
:mod:`~gic_runtime.changelog.writer` and :mod:`~gic_runtime.changelog.uploader`."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from concurrent.futures import Future
from typing import Protocol

from gic_runtime.changelog.records import Op
from gic_runtime.changelog.upload_types import UploadResult
from gic_runtime.handles import ChangelogHandle


class ChangelogWriter(Protocol):
    """Append-only, per-bucket changelog for one bucket range (one task).

    Sequence numbers are per bucket, dense and increasing: ``append`` returns
    ``next_seq(bucket)`` and then increments it. Not thread-safe for appends: one
    task thread appends; ``persist`` futures complete on uploader threads.
    """

    def append(self, bucket: int, op: Op, key: bytes, value: bytes = b"") -> int:
        """Buffer one change for ``bucket``; return its sequence number."""
        ...

    def append_many(
        self, bucket: int, op: Op, keys: Sequence[bytes], values: Sequence[bytes]
    ) -> int:
        """Buffer the changes ``(op, keys[i], values[i])`` for ``bucket``, in order, as
        :meth:`append` of each would; return the first one's sequence number."""
        ...

    def next_seq(self, bucket: int) -> int:
        """Sequence number the next change of ``bucket`` will get."""
        ...

    def reset(self, bucket: int, next_seq: int) -> None:
        """Start ``bucket`` at ``next_seq`` (after a restore); drops buffered changes."""
        ...

    def persist(self, since: Mapping[int, int]) -> Future[dict[int, tuple[ChangelogHandle, ...]]]:
        """Make every change of each bucket ``b`` in ``since`` with sequence number at or
        above ``since[b]`` durable.

        The future's result maps each bucket to handles sorted by ``from_seq`` that
        together cover ``[since[b], next_seq(b))`` as of this call (the first may start
        below ``since[b]``; empty when nothing changed). Changes already uploaded by a
        pre-emptive upload are returned as their existing handles, not uploaded again.
        """
        ...

    def truncate(self, bucket: int, before_seq: int) -> None:
        """Forget handles that lie wholly below ``before_seq`` (they are no longer needed
        for future persists). Deleting files is the registry's job, not the writer's."""
        ...

    def close(self) -> None:
        """Wait for in-flight uploads and release resources."""
        ...


class Uploader(Protocol):
    """The seam between changelog writers and the store: durable, fresh-named uploads."""

    def submit(self, data: bytes) -> Future[UploadResult]:
        """Upload ``data`` as a new object; the future names it (or fails with
        :class:`~gic_runtime.errors.UploadError`). May block for back-pressure."""
        ...
