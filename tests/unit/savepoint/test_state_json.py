"""State keys and values as JSON text: one to one with their msgpack encoding."""

from __future__ import annotations

import math
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gic_runtime.errors import StateError
from gic_runtime.savepoint.state_json import from_json, to_json
from gic_runtime.state.keys import decode_key, decode_value, encode

SCALARS = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**64 - 1)
    | st.floats(allow_nan=False)  # NaN: test_non_finite_floats
    | st.text(max_size=8)
    | st.binary(max_size=8)
)
KEYS = st.recursive(SCALARS, lambda inner: st.tuples(inner, inner), max_leaves=4)
VALUES = st.recursive(
    SCALARS,
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.dictionaries(st.text(max_size=4) | st.integers(-(2**63), 2**63 - 1), inner, max_size=3)
    ),
    max_leaves=8,
)


@given(VALUES)
def test_values_round_trip_to_the_same_bytes(value: Any) -> None:
    raw = encode(value)
    assert encode(from_json(to_json(decode_value(raw)))) == raw


@given(KEYS)
def test_keys_round_trip_to_the_same_bytes(key: Any) -> None:
    raw = encode(key)
    back = from_json(to_json(decode_key(raw)), as_key=True)
    assert encode(back) == raw
    hash(back)  # keys stay hashable (arrays come back as tuples)


@pytest.mark.parametrize(
    ("value", "text"),
    [
        ("alice", '"alice"'),
        (1, "1"),
        (1.0, "1.0"),
        (b"\x00\xff", '{"$bytes":"AP8="}'),
        ({"a": [1, 2]}, '{"a":[1,2]}'),
        ({1: "x"}, '{"$map":[[1,"x"]]}'),
        ({"$ref": 1}, '{"$map":[["$ref",1]]}'),
        (("a", 1), '["a",1]'),
    ],
)
def test_documented_forms(value: Any, text: str) -> None:
    assert to_json(value) == text
    assert encode(from_json(text)) == encode(value)


def test_non_finite_floats() -> None:
    assert math.isnan(from_json(to_json(float("nan"))))
    assert from_json(to_json(float("-inf"))) == float("-inf")


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("alice", "not JSON text"),
        ('{"$bytes": "***"}', "base64"),
        ('{"$other": 1}', "neither"),
        ('{"$map": [[1]]}', "pairs"),
    ],
)
def test_bad_text_is_refused_with_the_reason(text: str, says: str) -> None:
    with pytest.raises(StateError, match=says):
        from_json(text)
