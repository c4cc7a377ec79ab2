"""State keys and values as JSON text, losslessly (how ``read_state``, ``write_state`` and
``gic state`` show them).

Keys, map user keys and values are msgpack-encoded (:mod:`gic_runtime.state.keys`);
this module maps every msgpack-encodable value to JSON text and back:

===================================  ==============================================
value                                JSON text
===================================  ==============================================
None, bool, int, str                 ``null``, ``true``, ``1``, ``"a"``
float                                ``1.0`` (always with a fraction or exponent, so
                                     ``1`` and ``1.0`` stay different keys); NaN and
                                     infinities as ``NaN``, ``Infinity``, ``-Infinity``
bytes                                ``{"$bytes": "<base64>"}``
list, tuple                          an array (msgpack does not tell them apart: keys
                                     decode as tuples, values as lists)
dict with str keys, none ``$...``    an object
any other dict                       ``{"$map": [[key, value], ...]}``
===================================  ==============================================

Invariant: for every msgpack-encodable ``v``, ``encode(from_json(to_json(v)))`` equals
``encode(v)``: the mapping is one to one, so text read from a savepoint writes the same
bytes back (NaN excepted: any NaN is written back as the canonical one, which routes
the same). Text that is not JSON, or a ``$`` object of another shape, raises
:class:`~gic_runtime.errors.StateError`.

Pure functions; thread-safe.
"""

from __future__ import annotations

import base64
import binascii
import json
from typing import Any, Final

from gic_runtime.errors import StateError

__all__ = ["from_json", "to_json", "to_plain"]

_BYTES: Final = "$bytes"
_MAP: Final = "$map"


def to_plain(value: Any) -> Any:
    """``value`` as JSON-serializable Python (bytes and non-object dicts tagged)."""
    if isinstance(value, bytes | bytearray | memoryview):
        return {_BYTES: base64.b64encode(bytes(value)).decode("ascii")}
    if isinstance(value, list | tuple):
        return [to_plain(v) for v in value]
    if isinstance(value, dict):
        if all(isinstance(k, str) and not k.startswith("$") for k in value):
            return {k: to_plain(v) for k, v in value.items()}
        return {_MAP: [[to_plain(k), to_plain(v)] for k, v in value.items()]}
    return value


def to_json(value: Any) -> str:
    """JSON text of a decoded key or value (see the module table)."""
    return json.dumps(to_plain(value), ensure_ascii=False, separators=(",", ":"))


def _from_plain(item: Any, *, as_key: bool) -> Any:
    if isinstance(item, list):
        out = [_from_plain(v, as_key=as_key) for v in item]
        return tuple(out) if as_key else out
    if isinstance(item, dict):
        if any(isinstance(k, str) and k.startswith("$") for k in item):
            return _tagged(item, as_key=as_key)
        return {k: _from_plain(v, as_key=as_key) for k, v in item.items()}
    return item


def _tagged(item: dict[str, Any], *, as_key: bool) -> Any:
    if set(item) == {_BYTES} and isinstance(item[_BYTES], str):
        try:
            return base64.b64decode(item[_BYTES], validate=True)
        except (binascii.Error, ValueError) as exc:
            raise StateError(f"{_BYTES} holds no valid base64 ({exc})") from exc
    pairs = item.get(_MAP)
    if set(item) == {_MAP} and isinstance(pairs, list):
        out: dict[Any, Any] = {}
        for pair in pairs:
            if not isinstance(pair, list) or len(pair) != 2:
                raise StateError(f"{_MAP} entries must be [key, value] pairs, got {pair!r:.60}")
            key = _from_plain(pair[0], as_key=True)
            try:
                out[key] = _from_plain(pair[1], as_key=as_key)
            except TypeError as exc:  # an unhashable key (a map inside a key)
                raise StateError(f"{_MAP} key {pair[0]!r:.60} cannot be a key: {exc}") from exc
        return out
    raise StateError(
        f"JSON object {json.dumps(item)[:80]} has '$' keys but is neither "
        f'{{"{_BYTES}": "<base64>"}} nor {{"{_MAP}": [[key, value], ...]}}; objects whose '
        f"keys start with '$' are written as {_MAP}"
    )


def from_json(text: str, *, as_key: bool = False) -> Any:
    """The value of JSON ``text`` (arrays as tuples when ``as_key``: keys are hashable)."""
    try:
        item = json.loads(text)
    except (TypeError, ValueError) as exc:
        raise StateError(
            f"{text!r:.80} is not JSON text ({exc}); strings are quoted: write "
            '"\\"alice\\"" for the key alice'
        ) from exc
    return _from_plain(item, as_key=as_key)
