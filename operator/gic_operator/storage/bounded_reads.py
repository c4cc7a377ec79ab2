"""How the operator reads what a job's driver wrote: bounded, and with URIs in the
runtime's form.

:func:`read_bounded` is the one way the operator reads a driver-written record (the
status record, control requests and outcomes); :func:`normalize_uri` puts a URI in the
form the runtime writes, so a URI the operator derived compares equal to one a driver
recorded.

Invariants: a read transfers at most ``limit + 1`` bytes and a larger object is an
error naming it and the limit (:class:`~gic_runtime.errors.ObjectTooLargeError`),
never loaded; an absent object reads as ``None``. A normalized URI is a full URI
without a trailing ``/``.

Thread-safety: stateless; safe from any thread (the resolver is thread-safe).
"""

from __future__ import annotations

from gic_runtime.errors import ObjectNotFoundError
from gic_runtime.storage.object_store import read_bounded as store_read_bounded
from gic_runtime.storage.uri import StorageURI, StoreResolver

__all__ = ["normalize_uri", "read_bounded"]


def read_bounded(resolver: StoreResolver, uri: str, limit: int, what: str) -> bytes | None:
    """The object at ``uri`` if it holds at most ``limit`` bytes; ``None`` when absent.

    At most ``limit + 1`` bytes are transferred (the runtime's
    :func:`gic_runtime.storage.object_store.read_bounded`): a larger object raises
    :class:`~gic_runtime.errors.ObjectTooLargeError` (a ``CorruptFileError``) naming it
    and the limit. The operator's reads of status and control records go through here.
    """
    store, key = resolver.resolve(uri)
    try:
        return store_read_bounded(store, key, limit, what=what)
    except ObjectNotFoundError:
        return None


def normalize_uri(uri: str) -> str:
    """``uri`` as the runtime writes URIs: a full URI without a trailing ``/``."""
    return str(StorageURI.parse(uri.strip())).rstrip("/")
