"""Shared building blocks of the on-storage formats.

Invariant (docs/architecture.md I8): every file the runtime writes starts with a 4-byte magic and a
2-byte format version, and carries CRC32C checksums; readers reject unknown versions and
checksum mismatches with an error naming the file, never returning partial data. Those
errors say which file and what is wrong, never quote its bytes: a reader may be pointed at
a file that is not GIC's (a forged path), and its messages reach statuses and Events.
"""

from __future__ import annotations

import json
import re
import struct
from typing import Any, Final

import google_crc32c

from gic_runtime.errors import CorruptFileError, UnsupportedVersionError

#: ``<4s magic><H version><H flags>``: the common 8-byte header of every binary format.
HEADER: Final = struct.Struct("<4sHH")

_CRC_FIELD: Final = re.compile(r"crc32c=([0-9a-f]{8})")


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
            f"not a {magic.decode()} file: its first bytes are not the magic {magic!r}", uri=uri
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


# --- text records: one header line, then a body ------------------------------------------

_TEXT_HEADER_MAX = 64


def encode_text_record(magic: str, version: int, payload: bytes) -> bytes:
    """``<magic> <version> crc32c=<8 hex>\\n`` followed by ``payload``: the layout of
    every small text format (manifests, control records, markers), so ``cat`` shows
    them and readers reject foreign files, unknown versions and damage alike."""
    return f"{magic} {version} crc32c={crc32c(payload):08x}\n".encode("ascii") + payload


def decode_text_record(
    data: bytes, magic: str, supported: frozenset[int], *, what: str, uri: str | None
) -> tuple[int, bytes]:
    """Verify a :func:`encode_text_record` record; return ``(version, payload)``.

    Raises :class:`CorruptFileError` (no or foreign header, malformed checksum field,
    checksum mismatch) or :class:`UnsupportedVersionError`; ``what`` names the kind of
    file in messages (e.g. ``"GIC manifest"``), ``uri`` the file.
    """
    newline = data.find(b"\n", 0, _TEXT_HEADER_MAX)
    if newline < 0:
        raise CorruptFileError(
            f"not a {what}: no '{magic} <version> crc32c=<hex>' header line in the first "
            f"{_TEXT_HEADER_MAX} bytes (file has {len(data)} bytes)",
            uri=uri,
        )
    try:
        parts = data[:newline].decode("ascii").split(" ")
    except UnicodeDecodeError:
        parts = []
    if len(parts) != 3 or parts[0] != magic or not parts[1].isdigit():
        raise CorruptFileError(
            f"not a {what}: its first line ({newline} bytes) is not the header "
            f"'{magic} <version> crc32c=<hex>'",
            uri=uri,
        )
    version = int(parts[1])
    if version not in supported:
        raise UnsupportedVersionError(
            f"{what} format version {version} is not supported by this runtime "
            f"(supported: {sorted(supported)}); upgrade the runtime to read it",
            uri=uri,
        )
    crc = _CRC_FIELD.fullmatch(parts[2])
    if crc is None:
        raise CorruptFileError(
            f"{what} header has a malformed checksum field (expected crc32c=<8 hex digits>)",
            uri=uri,
        )
    payload = data[newline + 1 :]
    verify_crc(payload, int(crc.group(1), 16), what=f"{what} body", uri=uri)
    return version, payload


MAX_JSON_DEPTH: Final = 64
"""Deepest nesting of lists and objects a stored JSON record may have. GIC's own records
stay under 10 levels (free-form parts such as a manifest's ``engine`` included); a
deeper one is hostile or damaged, and decoding it could exhaust the stack."""


def load_json(payload: bytes | str, *, what: str, uri: str | None) -> Any:
    """Parse the JSON ``payload`` of a stored record. Raises :class:`CorruptFileError`
    naming ``what`` and ``uri`` when it is not JSON or nests deeper than
    :data:`MAX_JSON_DEPTH` (never ``RecursionError``, whatever the input)."""
    try:
        value = json.loads(payload)
    except RecursionError as exc:
        raise CorruptFileError(
            f"{what} nests deeper than {MAX_JSON_DEPTH} levels", uri=uri
        ) from exc
    except ValueError as exc:
        raise CorruptFileError(f"{what} body is not valid JSON: {exc}", uri=uri) from exc
    if _depth_exceeds(value, MAX_JSON_DEPTH):
        raise CorruptFileError(f"{what} nests deeper than {MAX_JSON_DEPTH} levels", uri=uri)
    return value


def _depth_exceeds(value: Any, limit: int) -> bool:
    """Whether ``value`` nests lists/objects deeper than ``limit`` (iterative)."""
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            children: Any = item.values()
        elif isinstance(item, list):
            children = item
        else:
            continue
        if depth >= limit:
            return True
        stack.extend((child, depth + 1) for child in children)
    return False
