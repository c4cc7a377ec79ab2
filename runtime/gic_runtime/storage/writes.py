"""Create-if-absent writes that survive a lost response.

A store client that retries requests (botocore does) can send a create-if-absent PUT
twice: the first lands, its answer is lost, and the retry is refused because the object
now exists. The writer then sees :class:`~gic_runtime.errors.ObjectExistsError` for its
own object. Every writer of fresh or write-once names goes through these functions,
so the rule "exactly our bytes there means success" lives in one place.
"""

from __future__ import annotations

from typing import BinaryIO, Final

from gic_runtime.errors import ObjectExistsError
from gic_runtime.storage.object_store import ObjectStore

_COMPARE_CHUNK: Final = 8 << 20
"""Bytes :func:`file_held_exactly` reads back and compares at a time."""


def holds_exactly(store: ObjectStore, key: str, data: bytes) -> bool:
    """Whether ``key`` holds exactly ``data``. Compares sizes first, so an object of
    another size is never downloaded; read errors propagate."""
    return store.size(key) == len(data) and store.get(key) == data


def create_once(store: ObjectStore, key: str, data: bytes) -> bool:
    """Create ``key`` holding ``data`` unless it exists.

    Returns ``True`` when this call created the object and ``False`` when it already held
    exactly ``data`` (an earlier attempt of this same write landed). Raises
    :class:`~gic_runtime.errors.ObjectExistsError` when a different object holds the
    name; errors reading it back propagate.
    """
    try:
        store.put(key, data, if_absent=True)
    except ObjectExistsError:
        if holds_exactly(store, key, data):
            return False
        raise
    return True


def file_held_exactly(store: ObjectStore, key: str, file: BinaryIO, size: int) -> bool:
    """:func:`holds_exactly` for the ``size`` bytes of the seekable ``file``: compared in
    ranged reads of at most :data:`_COMPARE_CHUNK` bytes, never whole in memory."""
    if store.size(key) != size:
        return False
    file.seek(0)
    offset = 0
    while offset < size:
        length = min(_COMPARE_CHUNK, size - offset)
        if store.get(key, start=offset, length=length) != file.read(length):
            return False
        offset += length
    return True


def create_file_once(store: ObjectStore, key: str, file: BinaryIO, size: int) -> bool:
    """:func:`create_once` for the ``size`` bytes of the seekable ``file``
    (:meth:`~gic_runtime.storage.object_store.ObjectStore.put_file`): the same results
    and errors."""
    try:
        store.put_file(key, file, size, if_absent=True)
    except ObjectExistsError:
        if file_held_exactly(store, key, file, size):
            return False
        raise
    return True
