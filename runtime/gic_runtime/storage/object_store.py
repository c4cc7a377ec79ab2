"""The object-store seam: one protocol, implemented for the local filesystem and S3.

Keys are ``/``-separated paths relative to the store's root URI. Objects are immutable
once written: the runtime never overwrites an object it did not create in the same
call, which is what makes server-side copies and hard links safe.

:func:`read_bounded` reads a whole object whose size a reader must not trust (files
that other parties -- drivers running tenant code -- write and the operator reads on
every reconcile): it transfers at most ``limit + 1`` bytes, whatever the object's size.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import BinaryIO, Protocol, runtime_checkable

from gic_runtime.errors import ObjectTooLargeError, StorageError

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

    def put_file(self, key: str, file: BinaryIO, size: int, *, if_absent: bool = False) -> None:
        """Write the whole content of the seekable ``file`` (``size`` bytes, read from its
        start) to ``key``, as :meth:`put` writes bytes: a large object (a bucket's
        snapshot spooled to local disk) goes out without being held in memory. The
        file's position afterwards is unspecified.
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


def read_bounded(store: ObjectStore, key: str, limit: int, *, what: str = "object") -> bytes:
    """The whole object at ``key``, if it holds at most ``limit`` bytes.

    One read of at most ``limit + 1`` bytes (``store.get(key, length=limit + 1)``: on a
    filesystem a read of that many bytes, on S3 a ``GetObject`` with ``Range:
    bytes=0-<limit>``), so no more than ``limit + 1`` bytes are ever transferred or held,
    whatever the object's size. A larger object raises
    :class:`~gic_runtime.errors.ObjectTooLargeError` naming the object, its size (one
    extra ``size`` request, on that error path only) and the limit; ``what`` names the
    kind of file in that message (e.g. ``"job status record"``). A missing object raises
    :class:`~gic_runtime.errors.ObjectNotFoundError`, as ``get`` does.

    Works with every :class:`ObjectStore` (it needs only ``get`` and ``size``).
    Thread-safe when the store is.
    """
    if limit < 0:
        raise ValueError(f"read_bounded needs a limit >= 0, got {limit}")
    data = store.get(key, length=limit + 1)
    if len(data) <= limit:
        return data
    uri = store.uri_for(key)
    try:
        size: int | None = store.size(key)
    except StorageError:
        size = None
    shown = f"{size} bytes" if size is not None else f"more than {limit} bytes"
    raise ObjectTooLargeError(
        f"{what} is {shown}, more than the {limit} bytes one may have, so it was not "
        "read; the runtime never writes one that large: inspect the file (another "
        "process wrote it, or it was damaged) and delete or replace it",
        uri=uri,
        size=size,
        limit=limit,
    )
