"""Bounded listings of prefixes that other parties can fill.

A job's directory is written by its driver, which runs tenant code: it may hold any
number of objects. Whoever lists such a prefix to act on it (the operator on every
reconcile, the orphan sweeps, ``gic gc``) must not let its count decide how much memory
and time the listing takes. :func:`list_bounded` and :func:`count_bounded` stop once
they have seen ``limit + 1`` objects and raise
:class:`~gic_runtime.errors.TooManyObjectsError` naming the prefix, the limit and what
to do.

Invariants:

* no more than ``limit + 1`` objects are taken from the store's listing: on S3, whose
  ``list`` fetches a page of 1000 keys only when the previous one was consumed, at most
  ``limit // 1000 + 1`` pages are requested; the listing is closed when the bound is hit
  or the caller stops early;
* a store whose ordered ``list`` must collect every object before yielding the first
  (the local store sorts) also offers :class:`UnorderedListing`; through it the objects
  are counted lazily first, so an oversized prefix is refused before anything is
  collected, and the ordered listing runs only for at most ``limit`` objects (plus what
  a concurrent writer adds meanwhile, which the second bound catches);
* :func:`list_bounded` raises before yielding the ``limit + 1``-th object, so a caller
  that acts only after the listing completed (or counted first with
  :func:`count_bounded`) has acted on nothing when it raises.

Thread-safety: stateless functions; thread-safe when the store is.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Final, Protocol, runtime_checkable

from gic_runtime.errors import TooManyObjectsError
from gic_runtime.storage.object_store import ObjectInfo, ObjectStore

__all__ = ["DEFAULT_HINT", "UnorderedListing", "count_bounded", "list_bounded"]

DEFAULT_HINT: Final = (
    "the runtime never keeps that many there: inspect the prefix and remove the files "
    "that do not belong there (another process put them there)"
)
"""What a :class:`~gic_runtime.errors.TooManyObjectsError` tells to do by default."""


@runtime_checkable
class UnorderedListing(Protocol):
    """A store that can list a prefix lazily in no particular order (the local store).

    ``list_unordered(prefix)`` yields the same objects as ``list(prefix)``, but one at a
    time as they are found, so a consumer that stops early has made the store look at
    no more than it consumed.
    """

    def list_unordered(self, prefix: str = "") -> Iterator[ObjectInfo]:
        """The objects under ``prefix``, in no particular order, found lazily."""
        ...


def _check(limit: int) -> None:
    if limit < 0:
        raise ValueError(f"a bounded listing needs a limit >= 0, got {limit}")


def _too_many(store: ObjectStore, prefix: str, limit: int, what: str, hint: str) -> Exception:
    uri = store.uri_for(prefix)
    return TooManyObjectsError(
        f"more than {limit} {what} under {uri}, the most one may hold there, so the "
        f"listing stopped and nothing was done with them; {hint}",
        uri=uri,
        limit=limit,
    )


def _take(
    listing: Iterator[ObjectInfo], limit: int, excess: Callable[[], Exception]
) -> Iterator[ObjectInfo]:
    """``listing`` while at most ``limit`` objects came, else ``excess()`` is raised in
    place of the next one; ``listing`` is closed when done, failed or abandoned."""
    try:
        for seen, info in enumerate(listing):
            if seen == limit:
                raise excess()
            yield info
    finally:
        close = getattr(listing, "close", None)
        if close is not None:
            close()


def count_bounded(
    store: ObjectStore,
    prefix: str,
    limit: int,
    *,
    what: str = "objects",
    hint: str = DEFAULT_HINT,
) -> int:
    """How many objects lie under ``prefix``, if at most ``limit``.

    Looks at no more than ``limit + 1`` of them (lazily, through
    :class:`UnorderedListing` when the store offers it) and raises
    :class:`~gic_runtime.errors.TooManyObjectsError` when there are more; ``what`` names
    the objects in its message (``"checkpoint manifests"``) and ``hint`` says what to do.
    """
    _check(limit)
    if isinstance(store, UnorderedListing):
        listing = store.list_unordered(prefix)
    else:
        listing = store.list(prefix)
    return sum(
        1 for _ in _take(listing, limit, lambda: _too_many(store, prefix, limit, what, hint))
    )


def list_bounded(
    store: ObjectStore,
    prefix: str,
    limit: int,
    *,
    what: str = "objects",
    hint: str = DEFAULT_HINT,
) -> Iterator[ObjectInfo]:
    """``store.list(prefix)`` (key order), as long as it holds at most ``limit`` objects.

    Raises :class:`~gic_runtime.errors.TooManyObjectsError` instead of yielding the
    ``limit + 1``-th object, and no page after it is fetched (see the module docstring;
    on a store offering :class:`UnorderedListing` the objects are counted first, with
    :func:`count_bounded`). Lazy: nothing is listed before the first ``next``; a
    negative ``limit`` raises :class:`ValueError` at once.
    """
    _check(limit)
    return _listed(store, prefix, limit, what, hint)


def _listed(
    store: ObjectStore, prefix: str, limit: int, what: str, hint: str
) -> Iterator[ObjectInfo]:
    if isinstance(store, UnorderedListing):
        count_bounded(store, prefix, limit, what=what, hint=hint)
    yield from _take(store.list(prefix), limit, lambda: _too_many(store, prefix, limit, what, hint))
