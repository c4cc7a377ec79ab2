"""Create-if-absent writes that survive a lost response.

A store client that retries requests (botocore does) can send a create-if-absent PUT
twice: the first lands, its answer is lost, and the retry is refused because the object
now exists. The writer then sees :class:`~gic_runtime.errors.ObjectExistsError` for its
own object. Every writer of fresh or write-once names goes through these two functions,
so the rule "exactly our bytes there means success" lives in one place.
"""

from __future__ import annotations

from gic_runtime.errors import ObjectExistsError
from gic_runtime.storage.object_store import ObjectStore


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
