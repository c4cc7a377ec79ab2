"""The object-store seam: one protocol, implemented for the local filesystem and S3.

Keys are ``/``-separated paths relative to the store's root URI. Objects are immutable
once written: the runtime never overwrites an object it did not create in the same
call, which is what makes server-side copies and hard links safe.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

#: Real S3 rejects a DeleteObjects request with more keys than this.
MAX_DELETE_BATCH = 1000


@dataclass(frozen=True, slots=True)
class ObjectInfo:
    """One listed object: ``key`` relative to the store root, ``size`` in bytes,
    ``mtime`` in seconds since the epoch."""

    key: str
    size: int
    mtime: float


@runtime_checkable
class ObjectStore(Protocol):
    """Minimal object-store interface the runtime needs.

    Implementations are thread-safe: the uploader calls them from several threads.
    Errors are translated into :mod:`gic_runtime.errors` classes.
    """

    @property
    def root_uri(self) -> str:
        """URI of the store root, e.g. ``file:///data/gic`` or ``s3://bucket/prefix``."""
        ...

    def uri_for(self, key: str) -> str:
        """Full URI of ``key``."""
        ...

    def put(self, key: str, data: bytes, *, if_absent: bool = False) -> None:
        """Write ``data`` to ``key``.

        With ``if_absent`` the write is create-if-absent and atomic: if the object
        exists, nothing changes and :class:`~gic_runtime.errors.ObjectExistsError` is
        raised. Readers never observe a partially written object.
        """
        ...

    def get(self, key: str, *, start: int = 0, length: int | None = None) -> bytes:
        """Read ``length`` bytes (all remaining when ``None``) from offset ``start``."""
        ...

    def size(self, key: str) -> int:
        """Size of the object in bytes (raises ObjectNotFoundError if absent)."""
        ...

    def exists(self, key: str) -> bool:
        """Whether the object exists."""
        ...

    def list(self, prefix: str = "") -> Iterator[ObjectInfo]:
        """All objects whose key starts with ``prefix``, in key order, paginated lazily."""
        ...

    def delete_many(self, keys: Iterable[str]) -> int:
        """Delete the given objects in batches of at most ``MAX_DELETE_BATCH``.

        Missing objects are not an error. Returns how many keys were requested.
        """
        ...

    def copy(self, src_key: str, dst_key: str) -> None:
        """Server-side copy within this store (S3 CopyObject; hard link on a filesystem).

        The destination is created if absent; an existing destination raises
        :class:`~gic_runtime.errors.ObjectExistsError`.
        """
        ...
