"""Reading changelog sections back through their handles (restore's replay path).

:func:`read_changes` reads one section with one ranged read; :func:`section_records`
validates a section's bytes however they were read (restore reads several sections of
one segment object with one coalesced read, :mod:`gic_runtime.state.fetch`).

Thread-safety: stateless; safe from any thread (the resolver is thread-safe).
"""

from __future__ import annotations

from collections.abc import Container, Iterator

from gic_runtime.changelog.records import ChangeRecord
from gic_runtime.changelog.segment import decode_section
from gic_runtime.errors import CorruptFileError
from gic_runtime.handles import ChangelogHandle
from gic_runtime.storage.uri import StoreResolver


def section_records(
    handle: ChangelogHandle, data: bytes | memoryview, keep: Container[bytes] | None = None
) -> list[ChangeRecord]:
    """Every record of the section ``handle`` names, from ``data`` = the bytes read at
    ``[offset, offset + length)`` of the handle's object, validated against the handle
    (with ``keep``, only the records of those keys and the prefix deletions).

    Raises :class:`~gic_runtime.errors.CorruptFileError` (naming the URI) when ``data``
    is short (the object ends early), damaged (checksum, framing) or does not match the
    handle (bucket, sequence range, length, payload CRC); never returns partial data.
    """
    if len(data) != handle.length:
        raise CorruptFileError(
            f"changelog section at offset {handle.offset} should be {handle.length} bytes, "
            f"the object holds only {len(data)} there (truncated object?)",
            uri=handle.uri,
        )
    _bucket, _from, records = decode_section(data, uri=handle.uri, expect=handle, keep=keep)
    return records


def read_section(resolver: StoreResolver, handle: ChangelogHandle) -> list[ChangeRecord]:
    """Every record of the section ``handle`` names, validated against the handle.

    One ranged read of exactly ``[offset, offset + length)``. Raises
    :class:`~gic_runtime.errors.CorruptFileError` (naming the URI) when the bytes are
    short, damaged or do not match the handle; storage errors propagate unchanged.
    """
    store, key = resolver.resolve(handle.uri)
    data = store.get(key, start=handle.offset, length=handle.length)
    return section_records(handle, data)


def read_changes(
    resolver: StoreResolver,
    handle: ChangelogHandle,
    *,
    from_seq: int = 0,
    to_seq: int | None = None,
) -> Iterator[ChangeRecord]:
    """Records of ``handle``'s section with ``from_seq <= seq < to_seq``, in seq order.

    The section is read and fully validated before the first record is yielded, so a
    corrupt section never yields any data. Nothing is read when the handle's range and
    the requested one do not overlap.
    """
    upper = handle.to_seq if to_seq is None else min(to_seq, handle.to_seq)
    lower = max(from_seq, handle.from_seq)
    if lower >= upper:
        return
    records = read_section(resolver, handle)
    yield from records[lower - handle.from_seq : upper - handle.from_seq]
