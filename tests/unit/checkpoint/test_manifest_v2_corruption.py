"""Manifest format v2: a malformed bucket table is a CorruptFileError naming the file and
what is wrong, never an IndexError/KeyError/TypeError (docs/architecture.md §4.4)."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gic_runtime.checkpoint import Manifest, decode_manifest, encode_manifest
from gic_runtime.errors import CorruptFileError, FormatError, UnsupportedVersionError
from gic_runtime.formats import crc32c
from gic_runtime.handles import BucketState, ChangelogHandle, SnapshotHandle
from gic_runtime.layout import manifest_uri

ROOT = "file:///data/gic"
JOB = f"{ROOT}/jobs/job-a"
CHK_URI = manifest_uri(ROOT, "job-a", 7)


def _manifest() -> Manifest:
    seg1, seg2 = f"{JOB}/changelog/1/a.seg", "s3://other/claimed/b.seg"
    snap = SnapshotHandle(f"{JOB}/snapshots/0/s.snap", 0, 2, 10, 99)
    b0 = BucketState(
        0,
        4,
        snap,
        (ChangelogHandle(seg1, 8, 5, 0, 2, 3, 1), ChangelogHandle(seg2, 8, 6, 0, 3, 4, 2)),
        seg2,
    )
    b1 = BucketState(1, 1, None, (ChangelogHandle(seg1, 13, 7, 1, 0, 1, 3),), seg1)
    return Manifest("job-a", 7, 1, 0.5, 2, {0: b0, 1: b1})


def _body() -> dict[str, Any]:
    parsed: dict[str, Any] = json.loads(encode_manifest(_manifest(), CHK_URI).partition(b"\n")[2])
    return parsed


def _reencode(body: dict[str, Any], version: int = 2) -> bytes:
    payload = json.dumps(body).encode()
    return f"GICM {version} crc32c={crc32c(payload):08x}\n".encode() + payload


def _set(path: tuple[Any, ...], value: Any) -> Callable[[dict[str, Any]], None]:
    def mutate(body: dict[str, Any]) -> None:
        target: Any = body
        for step in path[:-1]:
            target = target[step]
        target[path[-1]] = value

    return mutate


def _append(path: tuple[Any, ...], value: Any) -> Callable[[dict[str, Any]], None]:
    def mutate(body: dict[str, Any]) -> None:
        target: Any = body
        for step in path:
            target = target[step]
        target.append(value)

    return mutate


def _drop(path: tuple[Any, ...]) -> Callable[[dict[str, Any]], None]:
    def mutate(body: dict[str, Any]) -> None:
        target: Any = body
        for step in path[:-1]:
            target = target[step]
        del target[path[-1]]

    return mutate


def _duplicate_bucket(body: dict[str, Any]) -> None:
    body["buckets"].append(copy.deepcopy(body["buckets"][0]))


B0 = ("buckets", 0)
CASES = [
    pytest.param(
        _append((*B0, "changelog"), 0),
        r"bucket 0: changelog must hold rows of 5 integers .* got 11 values",
        id="row of the wrong arity",
    ),
    pytest.param(
        _set((*B0, "changelog"), {"a": 1}),
        r"bucket 0: changelog must hold rows of 5 .* got dict",
        id="changelog not a list",
    ),
    pytest.param(
        _set((*B0, "changelog", 5), 4),
        r"bucket 0: changelog row 1 names object 4, but the objects table has 3 entries",
        id="object index past the table",
    ),
    pytest.param(
        _set((*B0, "changelog", 0), -1),
        r"bucket 0: changelog row 0 names object -1",
        id="negative object index",
    ),
    pytest.param(
        _set((*B0, "changelog", 2), 5.0),
        r"bucket 0: changelog holds a non-integer 5\.0",
        id="float in a row",
    ),
    pytest.param(
        _set((*B0, "changelog", 1), True),
        r"bucket 0: changelog holds a non-integer True",
        id="boolean in a row",
    ),
    pytest.param(
        _set((*B0, "changelog", 3), "0"),
        r"bucket 0: changelog holds a non-integer '0'",
        id="string in a row",
    ),
    pytest.param(
        _set((*B0, "changelog", 4), None),
        r"bucket 0: changelog holds a non-integer None",
        id="null in a row",
    ),
    pytest.param(
        _set((*B0, "crc"), "00000001"),
        r"bucket 0: crc must be 8 hex digits per changelog row \(16 for 2 rows\), got 8 characters",
        id="crc too short",
    ),
    pytest.param(
        _set((*B0, "crc"), "0000000100000zzz"),
        r"bucket 0: crc '0000000100000zzz' is not hexadecimal",
        id="crc not hex",
    ),
    pytest.param(
        _set((*B0, "crc"), "00 00 00 01 0002"),
        r"bucket 0: crc .* is not hexadecimal",
        id="crc with spaces",
    ),
    pytest.param(
        _set((*B0, "crc"), 1),
        r"bucket 0: crc must be 8 hex digits .* got int",
        id="crc not a string",
    ),
    pytest.param(
        _set((*B0, "snapshot", 0), 3),
        r"bucket 0: snapshot names entry 3 of objects, which has 3 entries",
        id="snapshot index past the table",
    ),
    pytest.param(
        _set((*B0, "snapshot"), [0, 2, 10]),
        r"bucket 0: snapshot must be null or \[object, seq, size, crc\]",
        id="snapshot of the wrong arity",
    ),
    pytest.param(
        _set((*B0, "snapshot", 1), "2"),
        r"bucket 0: snapshot must be null or",
        id="snapshot with a string",
    ),
    pytest.param(
        _set((*B0, "token"), 2),
        r"bucket 0: token names entry 2 of tokens, which has 2 entries",
        id="token index past the table",
    ),
    pytest.param(
        _set((*B0, "token"), "x"),
        r"bucket 0: token names entry 'x' of tokens",
        id="token as a string",
    ),
    pytest.param(
        _set((*B0, "bucket"), "0"),
        r"bucket entry 0: bucket must be an integer",
        id="bucket not an integer",
    ),
    pytest.param(
        _set((*B0, "seq"), 1.5), r"bucket 0: seq must be an integer", id="seq not an integer"
    ),
    pytest.param(
        _set(B0, [0, 4]), r"bucket entry 0 is not a JSON object", id="bucket entry not an object"
    ),
    pytest.param(
        _drop((*B0, "crc")),
        r"bucket entry 0 is missing field 'crc'",
        id="bucket entry missing a field",
    ),
    pytest.param(_duplicate_bucket, r"bucket 0 appears more than once", id="bucket twice"),
    pytest.param(_set((*B0, "bucket"), 5), r"bucket entry 5 .* \[0, 2\)", id="bucket out of range"),
    pytest.param(_set(("buckets",), {}), r"buckets must be a JSON list", id="buckets not a list"),
    pytest.param(_set(("objects",), "x"), r"objects must be a JSON list", id="objects not a list"),
    pytest.param(
        _set(("objects", 0), 3),
        r"an object name is a JSON int, not a string",
        id="object name not a string",
    ),
    pytest.param(
        _set(("objects", 1), "../job-b/changelog/a.seg"),
        r"a relative object name escapes",
        id="relative name with ..",
    ),
    pytest.param(
        _set(("objects", 1), "changelog/../../x"), r"escapes", id="relative name with inner .."
    ),
    pytest.param(_set(("objects", 1), "/etc/passwd"), r"escapes", id="absolute path name"),
    pytest.param(_set(("objects", 1), ""), r"escapes", id="empty name"),
    pytest.param(
        _set(("tokens", 0), 1), r"tokens must be a JSON list of strings", id="tokens not strings"
    ),
]


class TestMalformedTable:
    @pytest.mark.parametrize(("mutate", "message"), CASES)
    def test_is_a_clear_corrupt_file_error(
        self, mutate: Callable[[dict[str, Any]], None], message: str
    ) -> None:
        body = _body()
        mutate(body)
        with pytest.raises(CorruptFileError, match=message) as info:
            decode_manifest(_reencode(body), CHK_URI)
        assert info.value.uri == CHK_URI
        assert str(info.value).endswith(f"({CHK_URI})")

    def test_the_unmodified_body_decodes(self) -> None:
        assert decode_manifest(_reencode(_body()), CHK_URI) == _manifest()

    def test_unknown_version(self) -> None:
        with pytest.raises(UnsupportedVersionError, match=r"version 3 is not supported") as info:
            decode_manifest(_reencode(_body(), version=3), CHK_URI)
        assert info.value.uri == CHK_URI

    def test_bad_checksum(self) -> None:
        raw = encode_manifest(_manifest(), CHK_URI).replace(b'"seq":4', b'"seq":5')
        with pytest.raises(CorruptFileError, match="checksum mismatch"):
            decode_manifest(raw, CHK_URI)

    def test_a_v2_body_under_a_v1_header_is_corrupt(self) -> None:
        with pytest.raises(CorruptFileError, match="invalid field"):
            decode_manifest(_reencode(_body(), version=1), CHK_URI)


_json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-5, 2**33) | st.floats(-2, 2) | st.text(max_size=9),
    lambda inner: (
        st.lists(inner, max_size=6) | st.dictionaries(st.text(max_size=9), inner, max_size=3)
    ),
    max_leaves=10,
)


def _paths(value: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [prefix] if prefix else []
    if isinstance(value, dict):
        for key, item in value.items():
            out += _paths(item, (*prefix, key))
    elif isinstance(value, list):
        for i, item in enumerate(value):
            out += _paths(item, (*prefix, i))
    return out


class TestFuzz:
    @given(st.data())
    def test_any_replaced_value_decodes_or_is_a_format_error(self, data: st.DataObject) -> None:
        body = _body()
        table = {k: body[k] for k in ("buckets", "objects", "tokens")}
        path = data.draw(st.sampled_from(_paths(table)))
        _set(path, data.draw(_json_values))(body)
        try:
            decode_manifest(_reencode(body), CHK_URI)
        except FormatError as exc:
            assert exc.uri == CHK_URI
