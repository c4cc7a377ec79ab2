"""Shared building blocks of the on-storage formats.

Invariant (DESIGN §3.8): every file the runtime writes starts with a 4-byte magic and a
2-byte format version, and carries CRC32C checksums; readers reject unknown versions and
checksum mismatches with an error naming the file, never returning partial data.
"""

from __future__ import annotations

import struct
from typing import Final

import google_crc32c

from gic_runtime.errors import CorruptFileError, UnsupportedVersionError

#: ``<4s magic><H version><H flags>``: the common 8-byte header of every binary format.
HEADER: Final = struct.Struct("<4sHH")


def crc32c(data: bytes | bytearray | memoryview, value: int = 0) -> int:
    """CRC32C of ``data``, continuing from ``value`` (hardware-accelerated where possible)."""
    return int(google_crc32c.extend(value, data if isinstance(data, bytes) else bytes(data)))


def pack_header(magic: bytes, version: int, flags: int = 0) -> bytes:
    """Return the common header for a file of kind ``magic`` at ``version``."""
    return HEADER.pack(magic, version, flags)


def check_header(
    data: bytes | memoryview, magic: bytes, supported: frozenset[int], *, uri: str | None
) -> tuple[int, int]:
    """Validate the common header at the start of ``data``; return ``(version, flags)``.

    Raises :class:`CorruptFileError` on a short file or foreign magic and
    :class:`UnsupportedVersionError` on a version outside ``supported``.
    """
    if len(data) < HEADER.size:
        raise CorruptFileError(
            f"file is truncated: {len(data)} bytes, shorter than the {HEADER.size}-byte header",
            uri=uri,
        )
    got_magic, version, flags = HEADER.unpack_from(data, 0)
    if got_magic != magic:
        raise CorruptFileError(
            f"not a {magic.decode()} file: magic is {got_magic!r}, expected {magic!r}", uri=uri
        )
    if version not in supported:
        raise UnsupportedVersionError(
            f"{magic.decode()} format version {version} is not supported by this runtime "
            f"(supported: {sorted(supported)}); upgrade the runtime to read it",
            uri=uri,
        )
    return version, flags


def verify_crc(data: bytes | memoryview, expected: int, *, what: str, uri: str | None) -> None:
    """Raise :class:`CorruptFileError` unless ``crc32c(data) == expected``."""
    actual = crc32c(data)
    if actual != expected:
        raise CorruptFileError(
            f"checksum mismatch in {what}: stored {expected:#010x}, computed {actual:#010x}",
            uri=uri,
        )
