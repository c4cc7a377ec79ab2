"""The net effect of a bucket's changelog tail, per key, and its merge with the bucket's
snapshot into one ascending stream of entries (docs/architecture.md §6).

A restore rebuilds a bucket from its snapshot (entries in ascending key order, loaded by
appending: no search, pages filled whole) and the changes written since. Replaying those
changes one by one puts each at its key's place in the store: a search, often a page
split, and a key changed several times is written each time. A :class:`TailFold`
instead reduces the changes to what each key ends as -- set to a value, gone, or its
snapshot value with bytes appended -- and :meth:`TailFold.merge` walks the snapshot and
the folded keys together, so the bucket is written once, in key order, by appending.

Invariants (the replay rule of :mod:`gic_runtime.state.restore`, checked by property
tests): for every base state ``B`` (keys to values) and changes ``C`` folded in their
order, ``list(fold(C).merge(sorted(B)))`` equals the sorted items of ``B`` after
applying ``C`` in order as :meth:`~gic_runtime.state.stores.KVStore.apply` does; the
merge yields each key once, in strictly ascending order, provided the base does.
:attr:`TailFold.raw_bytes` counts the key and value bytes of every change folded, an upper
bound of what the fold holds, so a caller can stop folding at a bound. Folding only the
changes of some keys (and every prefix deletion) and merging a base of those keys only
yields, for each of them, what the whole fold's merge with the whole base yields
(:mod:`~gic_runtime.state.selective_read` relies on it).

Thread-safety: an instance belongs to the thread that folds and merges it.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Final

from gic_runtime.changelog.records import Op

__all__ = ["TailFold"]

_SET: Final = 0
"""The key ends with this value, whatever the snapshot held."""
_GONE: Final = 1
"""The key ends absent."""
_EXTEND: Final = 2
"""The key ends with its snapshot value (none: empty) followed by these bytes."""


class TailFold:
    """Changes folded per key, in the order given (see the module docstring)."""

    __slots__ = ("_final", "_prefixes", "base_entries", "changes", "prefix_deletes", "raw_bytes")

    def __init__(self) -> None:
        self._final: dict[bytes, tuple[int, bytes]] = {}
        self._prefixes: tuple[bytes, ...] = ()
        self.changes = 0
        """Changes folded."""
        self.raw_bytes = 0
        """Key and value bytes of the changes folded."""
        self.prefix_deletes = 0
        """``DELETE_PREFIX`` changes folded (each visits every key folded before it)."""
        self.base_entries = 0
        """Entries of the base the last :meth:`merge` read."""

    def __len__(self) -> int:
        """Distinct keys the changes named (prefix deletions aside)."""
        return len(self._final)

    def add(self, op: Op, key: bytes, value: bytes) -> None:
        """Fold one change, after every change folded before it."""
        final = self._final
        self.changes += 1
        self.raw_bytes += len(key) + len(value)
        if op is Op.PUT:
            final[key] = (_SET, value)
        elif op is Op.DELETE:
            final[key] = (_GONE, b"")
        elif op is Op.APPEND:
            prev = final.get(key)
            if prev is None:
                # A key a prefix deletion removed from the snapshot starts empty.
                erased = bool(self._prefixes) and key.startswith(self._prefixes)
                final[key] = (_SET if erased else _EXTEND, value)
            elif prev[0] == _GONE:
                final[key] = (_SET, value)
            else:
                final[key] = (prev[0], prev[1] + value)
        else:  # DELETE_PREFIX: every key under it so far, and the snapshot's
            self.prefix_deletes += 1
            for name in final:
                if name.startswith(key):
                    final[name] = (_GONE, b"")
            self._prefixes += (key,)

    def add_all(self, changes: Iterable[tuple[Op, bytes, bytes]]) -> None:
        for op, key, value in changes:
            self.add(op, key, value)

    def merge(self, base: Iterable[tuple[bytes, bytes]]) -> Iterator[tuple[bytes, bytes]]:
        """The bucket's entries after the folded changes, ascending: ``base`` (the
        snapshot's entries, strictly ascending) with each folded key's end state in
        place of, or beside, its entry."""
        final = self._final
        keys = sorted(final)
        prefixes = self._prefixes
        i, n = 0, len(keys)
        read = 0
        for key, value in base:
            read += 1
            while i < n and keys[i] < key:
                name = keys[i]
                i += 1
                kind, tail = final[name]
                if kind != _GONE:  # set, or appended to a key the snapshot lacks
                    yield name, tail
            if i < n and keys[i] == key:
                i += 1
                kind, tail = final[key]
                if kind == _SET:
                    yield key, tail
                elif kind == _EXTEND:
                    yield key, value + tail
            elif not (prefixes and key.startswith(prefixes)):
                yield key, value
        self.base_entries = read
        while i < n:
            name = keys[i]
            i += 1
            kind, tail = final[name]
            if kind != _GONE:
                yield name, tail

    def changes_to_apply(self) -> Iterator[tuple[Op, bytes, bytes]]:
        """The fold as changes with the same effect on any base, for a store that already
        holds the base: the prefix deletions, then each key's end state."""
        for prefix in self._prefixes:
            yield Op.DELETE_PREFIX, prefix, b""
        for key, (kind, tail) in self._final.items():
            if kind == _SET:
                yield Op.PUT, key, tail
            elif kind == _GONE:
                yield Op.DELETE, key, b""
            else:
                yield Op.APPEND, key, tail
