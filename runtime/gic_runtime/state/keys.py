"""Key and value encoding, bucket routing, and composite store keys.

Encoding
    User keys, map user keys and values are msgpack-encoded (``use_bin_type=True``: ``str``
    becomes msgpack str, ``bytes`` becomes msgpack bin). Encoding is deterministic, so equal
    keys give equal bytes; note that ``1`` and ``1.0`` are different keys. Decoding returns
    tuples for arrays inside *keys* (so keys stay hashable) and lists inside *values*;
    maps may have non-string keys. Values must be msgpack-encodable (None, bool, int,
    float, str, bytes, lists/tuples and dicts of these). Encoding reuses one msgpack
    ``Packer`` per thread (same bytes as ``msgpack.packb``, without building a packer per
    call); :func:`encode_many` encodes a sequence at once.

Routing
    ``bucket_for(key, B)`` equals Spark SQL's ``pmod(xxhash64(col), B)`` for the column
    type that matches the Python key: ``str`` -> StringType (UTF-8 bytes), ``bytes`` ->
    BinaryType (raw bytes), ``int`` -> LongType (8 bytes little-endian, must fit in a
    signed 64-bit integer), ``bool`` -> BooleanType, ``float`` -> DoubleType (``-0.0``
    hashed as ``0.0``, NaN canonical). A tuple routes like ``xxhash64(c1, c2, ...)``: each
    element's hash seeds the next, and ``None`` elements leave the hash unchanged (Spark
    skips nulls). The seed is 42, as in Spark. Routing never uses Python's ``hash()``, so
    it is stable across processes, machines and Python versions.

Composite store keys (inside one bucket)
    ``kind (1 byte) + msgpack(state name) + msgpack(key) [+ msgpack(user key)]``.
    msgpack encodings are prefix-free (a decoder consumes exactly one object), so
    ``state_prefix(kind, name)`` is a prefix of exactly that state's entries and
    ``key_prefix(...)`` of exactly one key's entries. Timers (:mod:`gic_runtime.state.timers`)
    are entries of kind ``t`` named after their time domain, with the timer's time as
    the user key; their time index (kind ``d``) is derived from them and is not a state
    of its own (:func:`parse_store_key` refuses it, exports skip it). States with a time
    to live use the kinds ``V``, ``M``, ``L`` and an expiry index of kind ``x``
    (:mod:`gic_runtime.state.ttl`).
"""

from __future__ import annotations

import math
import struct
import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Final

import msgpack  # type: ignore[import-untyped, unused-ignore]
import xxhash

from gic_runtime.errors import StateError

#: Spark's ``xxhash64`` seed.
SPARK_XXHASH_SEED: Final = 42

KIND_VALUE: Final = b"v"
KIND_MAP: Final = b"m"
KIND_LIST: Final = b"l"
KIND_TIMER: Final = b"t"
KIND_VALUE_TTL: Final = b"V"
KIND_MAP_TTL: Final = b"M"
KIND_LIST_TTL: Final = b"L"
"""States with a time to live (:mod:`gic_runtime.state.ttl`): values carry deadlines."""
KIND_DUE: Final = b"d"
"""The time index of timers: derived from the ``t`` entries, never exported."""
KIND_EXPIRY: Final = b"x"
"""The expiry index of TTL states: derived, never exported."""
KIND_NAMES: Final = {
    KIND_VALUE: "value",
    KIND_MAP: "map",
    KIND_LIST: "list",
    KIND_TIMER: "timer",
    KIND_VALUE_TTL: "value",
    KIND_MAP_TTL: "map",
    KIND_LIST_TTL: "list",
}
TTL_KINDS: Final = {KIND_VALUE: KIND_VALUE_TTL, KIND_MAP: KIND_MAP_TTL, KIND_LIST: KIND_LIST_TTL}
"""The kind of a state with a TTL, by the kind of the same state without."""
KEYED_KINDS: Final = (KIND_MAP, KIND_TIMER, KIND_MAP_TTL)
DERIVED_KINDS: Final = (KIND_DUE, KIND_EXPIRY)
"""Index entries derived from other entries: not states, not exported."""
"""Kinds whose entries carry a user key after the key."""

_I64 = struct.Struct("<q")
_I32 = struct.Struct("<i")
_F64 = struct.Struct("<d")
_U64_MASK = (1 << 64) - 1
_CANONICAL_NAN = b"\x00\x00\x00\x00\x00\x00\xf8\x7f"


class _Packers(threading.local):
    """One reusable packer per thread (a ``Packer`` is not thread-safe; it resets its
    buffer after every call, also after a failed one)."""

    def __init__(self) -> None:
        self.pack: Any = msgpack.Packer(use_bin_type=True, autoreset=True).pack


_PACKERS = _Packers()


def _encode_error(value: Any, exc: Exception) -> StateError:
    return StateError(
        f"cannot encode {type(value).__name__} value {value!r:.80} with msgpack: {exc}; "
        "use None, bool, int, float, str, bytes, lists/tuples or dicts of these"
    )


def encode(value: Any) -> bytes:
    """msgpack encoding of a key, user key or value (deterministic)."""
    try:
        return _PACKERS.pack(value)  # type: ignore[no-any-return]
    except (TypeError, ValueError, OverflowError) as exc:
        raise _encode_error(value, exc) from exc


def encode_many(values: Sequence[Any], prefix: bytes = b"") -> list[bytes]:
    """``prefix + encode(v)`` for each of ``values``, in order (the bulk path)."""
    pack = _PACKERS.pack
    try:
        if prefix:
            return [prefix + pack(v) for v in values]
        return [pack(v) for v in values]
    except (TypeError, ValueError, OverflowError) as exc:
        bad = next((v for v in values if not _encodable(v)), None)
        raise _encode_error(bad, exc) from exc


def _encodable(value: Any) -> bool:
    try:
        _PACKERS.pack(value)
    except (TypeError, ValueError, OverflowError):
        return False
    return True


def decode_key(data: bytes) -> Any:
    """Decode an encoded key (arrays come back as tuples)."""
    return msgpack.unpackb(data, raw=False, use_list=False, strict_map_key=False)


def decode_value(data: bytes) -> Any:
    """Decode an encoded value (arrays come back as lists)."""
    return msgpack.unpackb(data, raw=False, use_list=True, strict_map_key=False)


def decode_values(data: bytes) -> list[Any]:
    """Decode a concatenation of encoded values (how list state stores its elements)."""
    unpacker = msgpack.Unpacker(raw=False, use_list=True, strict_map_key=False)
    unpacker.feed(data)
    return list(unpacker)


def split_values(data: bytes) -> list[bytes]:
    """Split a concatenation of encoded values into each value's bytes."""
    unpacker = msgpack.Unpacker(raw=False, strict_map_key=False)
    unpacker.feed(data)
    out: list[bytes] = []
    start = 0
    for _ in unpacker:
        end = unpacker.tell()
        out.append(data[start:end])
        start = end
    return out


# --- routing ---------------------------------------------------------------------------


def _hash_one(value: Any, seed: int) -> int:
    """Unsigned XXH64 of one scalar, as Spark hashes it."""
    if value is None:
        return seed
    if isinstance(value, bool):
        return xxhash.xxh64_intdigest(_I32.pack(1 if value else 0), seed=seed)
    if isinstance(value, int):
        try:
            data = _I64.pack(value)
        except struct.error as exc:
            raise StateError(
                f"integer key {value} does not fit in a signed 64-bit integer (Spark LongType); "
                "use a str or bytes key for larger numbers"
            ) from exc
        return xxhash.xxh64_intdigest(data, seed=seed)
    if isinstance(value, str):
        return xxhash.xxh64_intdigest(value.encode("utf-8"), seed=seed)
    if isinstance(value, bytes | bytearray | memoryview):
        return xxhash.xxh64_intdigest(bytes(value), seed=seed)
    if isinstance(value, float):
        data = _CANONICAL_NAN if math.isnan(value) else _F64.pack(value + 0.0)
        return xxhash.xxh64_intdigest(data, seed=seed)
    raise StateError(
        f"cannot route a key of type {type(value).__name__} ({value!r:.80}) to a bucket; "
        "keys must be str, bytes, int, bool, float, or tuples of these"
    )


def spark_xxhash64(key: Any) -> int:
    """Signed 64-bit result of Spark's ``xxhash64(...)`` for ``key`` (see module doc)."""
    if isinstance(key, tuple):
        h = SPARK_XXHASH_SEED
        for element in key:
            if isinstance(element, tuple):
                raise StateError(
                    f"nested tuple in key {key!r:.80}; flatten composite keys to one level"
                )
            h = _hash_one(element, h)
    else:
        h = _hash_one(key, SPARK_XXHASH_SEED)
    h &= _U64_MASK
    return h - (1 << 64) if h >= 1 << 63 else h


def bucket_for(key: Any, num_buckets: int) -> int:
    """Bucket of ``key`` among ``num_buckets``: Spark's ``pmod(xxhash64(key), num_buckets)``."""
    if num_buckets <= 0:
        raise StateError(f"num_buckets must be positive, got {num_buckets}")
    return spark_xxhash64(key) % num_buckets


# --- composite store keys ---------------------------------------------------------------


def state_prefix(kind: bytes, name: str) -> bytes:
    """Prefix of every store key of the state ``name`` of ``kind``."""
    return kind + encode(name)


@dataclass(frozen=True, slots=True)
class StoreKey:
    """A parsed composite store key; ``key`` and ``user_key`` are still msgpack-encoded."""

    kind: bytes
    name: str
    key: bytes
    user_key: bytes | None


def parse_store_key(data: bytes) -> StoreKey:
    """Split a composite store key into its parts (raises StateError if malformed)."""
    kind = data[:1]
    if kind not in KIND_NAMES:
        raise StateError(f"store key {data!r:.80} has unknown state kind {kind!r}")
    unpacker = msgpack.Unpacker(raw=False, use_list=False, strict_map_key=False)
    unpacker.feed(data[1:])
    try:
        name = unpacker.unpack()
        name_end = 1 + unpacker.tell()
        unpacker.unpack()
        key_end = 1 + unpacker.tell()
    except (msgpack.OutOfData, ValueError) as exc:
        raise StateError(f"store key {data!r:.80} is malformed: {exc}") from exc
    if not isinstance(name, str):
        raise StateError(f"store key {data!r:.80} has a non-string state name")
    rest = data[key_end:]
    if kind in KEYED_KINDS:
        if not rest:
            raise StateError(f"{KIND_NAMES[kind]} store key {data!r:.80} lacks a user key")
        return StoreKey(kind, name, data[name_end:key_end], rest)
    if rest:
        raise StateError(f"store key {data!r:.80} has trailing bytes")
    return StoreKey(kind, name, data[name_end:key_end], None)


def concat(parts: Iterable[bytes]) -> bytes:
    """Concatenate encoded values (list state's storage format)."""
    return b"".join(parts)
