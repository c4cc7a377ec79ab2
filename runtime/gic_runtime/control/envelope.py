"""A small text envelope for JSON records: one header line, then the JSON body.

::

    GICR 1 crc32c=0a1b2c3d\\n
    { ...JSON body, indented, ASCII... }

The header names the record kind (a 4-letter magic), its format version and the CRC32C
of the body (every byte after the newline), the same shape as a checkpoint manifest
(:mod:`gic_runtime.checkpoint.manifest_codec`), so ``cat`` shows a record and a reader rejects a
foreign file, an unknown version or a damaged body with an error naming the file
(docs/architecture.md I8). Control requests and outcomes, fencing-epoch markers and the job status
record all use it.

Field helpers (:func:`field_str`, :func:`field_int`, ...) raise :class:`ValueError` or
:class:`KeyError`; :func:`parse_body` turns those into :class:`CorruptFileError` naming
the file and the record kind.

Stateless; every function is thread-safe.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from gic_runtime.errors import ConfigurationError, CorruptFileError
from gic_runtime.formats import decode_text_record, encode_text_record, load_json

_T = TypeVar("_T")


def encode_record(magic: str, version: int, body: Mapping[str, Any], *, what: str) -> bytes:
    """Serialize ``body`` as a ``magic`` record of format ``version``.

    Raises :class:`ConfigurationError` when ``body`` is not plain JSON (``what`` names
    the record in the message).
    """
    try:
        text = json.dumps(dict(body), indent=1, sort_keys=True, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise ConfigurationError(
            f"{what} is not serializable as JSON: {exc}; use plain JSON values "
            "(strings, finite numbers, booleans, lists, objects)"
        ) from exc
    return encode_text_record(magic, version, text.encode("ascii"))


def decode_record(
    data: bytes, magic: str, supported: frozenset[int], *, what: str, uri: str
) -> tuple[int, dict[str, Any]]:
    """Verify and parse a ``magic`` record; return ``(version, body)``.

    Raises :class:`CorruptFileError` (foreign file, damaged header, checksum mismatch,
    body not a JSON object) or :class:`UnsupportedVersionError`, naming ``uri``.
    """
    version, payload = decode_text_record(data, magic, supported, what=what, uri=uri)
    body = load_json(payload, what=what, uri=uri)
    if not isinstance(body, dict):
        raise CorruptFileError(f"{what} body is not a JSON object", uri=uri)
    return version, body


def parse_body(build: Callable[[], _T], *, what: str, uri: str) -> _T:
    """Run ``build`` (which reads fields of a decoded body); a missing or invalid field
    becomes :class:`CorruptFileError` naming the file."""
    try:
        return build()
    except KeyError as exc:
        raise CorruptFileError(f"{what} is missing field {exc.args[0]!r}", uri=uri) from exc
    except (TypeError, ValueError, AttributeError, ConfigurationError) as exc:
        raise CorruptFileError(f"{what} has an invalid field: {exc}", uri=uri) from exc


def field_str(body: Mapping[str, Any], name: str) -> str:
    value = body[name]
    if not isinstance(value, str):
        raise ValueError(f"{name} must be a string, got {value!r}")
    return value


def field_opt_str(body: Mapping[str, Any], name: str) -> str | None:
    return None if body.get(name) is None else field_str(body, name)


def field_int(body: Mapping[str, Any], name: str, *, minimum: int | None = 0) -> int:
    value = body[name]
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{name} must be an integer, got {value!r}")
    if minimum is not None and value < minimum:
        raise ValueError(f"{name} must be at least {minimum}, got {value}")
    return value


def field_opt_int(body: Mapping[str, Any], name: str, *, minimum: int | None = 0) -> int | None:
    return None if body.get(name) is None else field_int(body, name, minimum=minimum)


def field_float(body: Mapping[str, Any], name: str) -> float:
    value = body[name]
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ValueError(f"{name} must be a finite number, got {value!r}")
    return float(value)


def field_opt_float(body: Mapping[str, Any], name: str) -> float | None:
    return None if body.get(name) is None else field_float(body, name)


def field_bool(body: Mapping[str, Any], name: str) -> bool:
    value = body[name]
    if not isinstance(value, bool):
        raise ValueError(f"{name} must be a boolean, got {value!r}")
    return value


def field_object(body: Mapping[str, Any], name: str) -> dict[str, Any] | None:
    """A nested JSON object, or ``None`` when absent or null."""
    value = body.get(name)
    if value is None:
        return None
    if not isinstance(value, dict):
        raise ValueError(f"{name} must be a JSON object, got {type(value).__name__}")
    return value
