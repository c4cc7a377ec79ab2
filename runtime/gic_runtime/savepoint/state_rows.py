"""Rows of state as ``read_state`` shows them and ``write_state`` takes them.

One row per value, map entry, list element and timer, the canonical savepoint's rows
(:mod:`gic_runtime.savepoint.canonical`) with keys and values shown twice: as JSON text
(:mod:`gic_runtime.savepoint.state_json`) and as their msgpack bytes.

==================  ========  =========================================================
bucket              int32     bucket of the key among the source's buckets
state               string    state name; a timer's domain (``event``, ``processing``)
kind                string    ``value`` | ``map`` | ``list`` | ``timer``
key                 string    the key, JSON text
user_key            string    map: the entry's user key (JSON); timer: its time in
                              microseconds since the epoch; else null
index               int64     list: the element's position; else null
value               string    the value, entry or element (JSON); null for timers
expires_us          int64     TTL deadline (microseconds); null without a TTL, or for
                              an event-time TTL before the job's first watermark
ttl_by              string    the TTL's domain, ``processing`` or ``event``; else null
ttl_us              int64     the TTL in microseconds; else null
key_msgpack         binary    the key's msgpack bytes
user_key_msgpack    binary    the user key's msgpack bytes (null as ``user_key``)
value_msgpack       binary    the value's msgpack bytes (null for timers)
==================  ========  =========================================================

A reader may ask for ``key``, ``user_key`` or ``value`` decoded into an Arrow type
instead of JSON (:func:`user_table`); a value of another shape fails the read, naming it.

Writing (:func:`canonical_rows`) takes the same columns, each of ``key``, ``user_key``,
``value`` as JSON text, or as typed values (the parts named in ``typed``; a struct in a
key or user key is a tuple), or else its ``*_msgpack`` bytes; ``bucket`` is recomputed
for the target's bucket count. Invariant: a row that does not fit its kind raises
:class:`StateRowError` saying what is wrong and how to fix it, so nothing is written
from a frame with such a row.

Pure functions; thread-safe.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from typing import Any, Final

import pyarrow as pa

from gic_runtime.errors import StateError
from gic_runtime.savepoint.canonical import SCHEMA as CANONICAL_SCHEMA
from gic_runtime.savepoint.state_json import from_json, to_json
from gic_runtime.state.keys import bucket_for, decode_key, decode_value, encode
from gic_runtime.state.timers import DOMAINS, to_micros

__all__ = [
    "PARTS",
    "ROW_SCHEMA",
    "StateRowError",
    "canonical_rows",
    "user_table",
]

ROW_SCHEMA: Final = pa.schema(
    [
        pa.field("bucket", pa.int32(), nullable=False),
        pa.field("state", pa.string(), nullable=False),
        pa.field("kind", pa.string(), nullable=False),
        pa.field("key", pa.string(), nullable=False),
        pa.field("user_key", pa.string()),
        pa.field("index", pa.int64()),
        pa.field("value", pa.string()),
        pa.field("expires_us", pa.int64()),
        pa.field("ttl_by", pa.string()),
        pa.field("ttl_us", pa.int64()),
        pa.field("key_msgpack", pa.binary(), nullable=False),
        pa.field("user_key_msgpack", pa.binary()),
        pa.field("value_msgpack", pa.binary()),
    ]
)
PARTS: Final = ("key", "user_key", "value")
"""The columns shown as JSON text (or decoded into a type the reader gives)."""
KINDS: Final = ("value", "map", "list", "timer")
ROW_MARK: Final = "[gic state row]"
"""Starts every :class:`StateRowError` message, so a driver finds it in a task's error."""


class StateRowError(StateError):
    """A row of state that cannot be written; the message says what to change."""

    def __init__(self, message: str) -> None:
        super().__init__(f"{ROW_MARK} {message}")


# --- reading ---------------------------------------------------------------------------


def user_table(canonical: pa.Table, *, types: Mapping[str, pa.DataType] | None = None) -> pa.Table:
    """The rows of ``canonical`` (:data:`~gic_runtime.savepoint.canonical.SCHEMA`) in
    :data:`ROW_SCHEMA`'s shape; each part in ``types`` decoded into that type."""
    rows = canonical.to_pydict()
    timers = [k == "timer" for k in rows["kind"]]
    raw = {
        "key": rows["key"],
        "user_key": rows["user_key"],
        "value": [None if t else v for t, v in zip(timers, rows["value"], strict=True)],
    }
    cols: dict[str, Any] = {name: rows[name] for name in ("bucket", "state", "kind", "index")}
    cols.update({n: rows[n] for n in ("expires_us", "ttl_by", "ttl_us")})
    for part in PARTS:
        decode = decode_key if part != "value" else decode_value
        decoded = [None if b is None else decode(b) for b in raw[part]]
        target = (types or {}).get(part)
        if target is None:
            texts = [
                None if b is None else to_json(d) for d, b in zip(decoded, raw[part], strict=True)
            ]
            cols[part] = pa.array(texts, pa.string())
        else:
            cols[part] = _typed_column(part, decoded, target, rows["state"])
        cols[f"{part}_msgpack"] = raw[part]
    schema = ROW_SCHEMA
    for part, target in (types or {}).items():
        index = schema.get_field_index(part)
        schema = schema.set(index, pa.field(part, target, nullable=part == "key"))
    return pa.table({name: cols[name] for name in schema.names}, schema=schema)


def _typed_column(part: str, values: list[Any], target: pa.DataType, states: list[str]) -> Any:
    try:
        return pa.array(values, target)
    except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError, TypeError) as exc:
        for value, state in zip(values, states, strict=True):
            try:
                pa.array([value], target)
            except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError, TypeError):
                raise StateError(
                    f"a {part} of state {state!r} is {to_json(value)[:80]}, which does not "
                    f"decode as {target}: {exc}; read only the states whose {part}s have "
                    f"that type (states=[...]), or read {part} as JSON text"
                ) from exc
        raise StateError(f"the {part}s do not decode as {target}: {exc}") from exc


# --- writing ---------------------------------------------------------------------------


def canonical_rows(
    rows: Iterable[Mapping[str, Any]], num_buckets: int, *, typed: Collection[str] = ()
) -> pa.Table:
    """Canonical rows (:data:`~gic_runtime.savepoint.canonical.SCHEMA`) of ``rows``
    (dicts with the columns of the module doc) for ``num_buckets`` buckets; raises
    :class:`StateRowError` on the first row that does not fit."""
    cols: dict[str, list[Any]] = {name: [] for name in CANONICAL_SCHEMA.names}
    for row in rows:
        values = _canonical(row, num_buckets, typed)
        for name, value in zip(CANONICAL_SCHEMA.names, values, strict=True):
            cols[name].append(value)
    return pa.table(cols, schema=CANONICAL_SCHEMA)


def _describe(row: Mapping[str, Any]) -> str:
    key = row.get("key")
    if key is None and row.get("key_msgpack") is not None:
        key = f"msgpack {bytes(row['key_msgpack']).hex()[:40]}"
    return (
        f"state row (state {row.get('state')!r:.60}, kind {row.get('kind')!r:.20}, key {key!r:.80})"
    )


def _part(row: Mapping[str, Any], part: str, typed: Collection[str]) -> tuple[bytes, Any] | None:
    """``(msgpack bytes, value)`` of ``part`` of ``row`` (``None`` when not given)."""
    as_key = part != "value"
    given = row.get(part)
    if given is not None:
        if part in typed:
            value = _as_tuples(given) if as_key else given
        elif isinstance(given, str):
            value = from_json(given, as_key=as_key)
        else:
            raise StateError(
                f"{part} is {type(given).__name__}, not JSON text; name the column in "
                f"typed=... when it holds the {part}s themselves"
            )
        return encode(value), value
    raw = row.get(f"{part}_msgpack")
    if raw is None:
        return None
    try:
        value = decode_key(bytes(raw)) if as_key else decode_value(bytes(raw))
    except Exception as exc:  # msgpack raises several types on bad bytes
        raise StateError(f"{part}_msgpack is not one msgpack value: {exc}") from exc
    return encode(value), value


def _as_tuples(value: Any) -> Any:
    """A typed key: structs (dicts) and arrays become tuples."""
    if isinstance(value, dict):
        return tuple(_as_tuples(v) for v in value.values())
    if isinstance(value, list | tuple):
        return tuple(_as_tuples(v) for v in value)
    return value


def _canonical(row: Mapping[str, Any], num_buckets: int, typed: Collection[str]) -> tuple[Any, ...]:
    try:
        return _check(row, num_buckets, typed)
    except StateRowError:
        raise
    except StateError as exc:
        raise StateRowError(f"{_describe(row)}: {exc}") from exc


def _check(row: Mapping[str, Any], num_buckets: int, typed: Collection[str]) -> tuple[Any, ...]:
    what = _describe(row)

    def fail(problem: str) -> StateRowError:
        return StateRowError(f"{what}: {problem}")

    state, kind = row.get("state"), row.get("kind")
    if not isinstance(state, str):
        raise fail("state is missing: give the state's name (a timer's domain)")
    if kind not in KINDS:
        raise fail(f"unknown kind; give one of {', '.join(KINDS)}")
    key = _part(row, "key", typed)
    if key is None:
        raise fail("key is missing: give key (JSON text) or key_msgpack")
    bucket = bucket_for(key[1], num_buckets)
    user_key = _part(row, "user_key", typed)
    value = _part(row, "value", typed)
    index = row.get("index")
    if kind == "map" and user_key is None:
        raise fail("a map row needs its entry's user key: give user_key (JSON text)")
    if kind in ("value", "list") and user_key is not None:
        raise fail(f"a {kind} row has no user key: leave user_key null (maps and timers have one)")
    if kind == "list" and (not isinstance(index, int) or index < 0):
        raise fail("a list row needs its element's position: give index (0, 1, ...)")
    if kind != "list" and index is not None:
        raise fail("only list rows have an index: leave it null")
    if kind != "timer" and value is None:
        raise fail("value is missing: give value (JSON text; the text null for None)")
    ttl = _ttl(row, kind, fail)
    if kind == "timer":
        if state not in DOMAINS:
            raise fail("a timer's state is its domain: 'event' or 'processing'")
        at = None if user_key is None else user_key[1]
        if isinstance(at, bool) or not isinstance(at, int):
            raise fail("a timer's user_key is its time: integer microseconds since the epoch")
        to_micros(at)
        if value is not None:
            raise fail("a timer has no value: leave value null")
        return (bucket, state, kind, key[0], user_key and user_key[0], None, b"", *ttl)
    return (bucket, state, kind, key[0], user_key and user_key[0], index, value and value[0], *ttl)


def _ttl(row: Mapping[str, Any], kind: str, fail: Any) -> tuple[int | None, str | None, int | None]:
    expires, by, ttl_us = row.get("expires_us"), row.get("ttl_by"), row.get("ttl_us")
    if by is None and ttl_us is None:
        if expires is not None:
            raise fail("expires_us without a TTL: give ttl_by and ttl_us too, or leave it null")
        return None, None, None
    if kind == "timer":
        raise fail("timers have no TTL: leave expires_us, ttl_by and ttl_us null")
    if by not in DOMAINS or isinstance(ttl_us, bool) or not isinstance(ttl_us, int) or ttl_us <= 0:
        raise fail(
            f"ttl_by {by!r:.20} and ttl_us {ttl_us!r:.20} are no TTL: give ttl_by 'processing' "
            "or 'event' and ttl_us a positive number of microseconds (or both null)"
        )
    if expires is None and by == "processing":
        raise fail(
            "a processing-time TTL needs its deadline: give expires_us (microseconds since "
            "the epoch); only event-time entries may wait for the first watermark"
        )
    if expires is not None and (isinstance(expires, bool) or not isinstance(expires, int)):
        raise fail("expires_us must be integer microseconds since the epoch")
    if expires is not None:
        to_micros(expires, what="expires_us")
    return expires, by, ttl_us
