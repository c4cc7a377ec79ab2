"""Key encoding, Spark-compatible bucket routing, composite store keys."""

from __future__ import annotations

import struct
import threading

import msgpack  # type: ignore[import-untyped, unused-ignore]
import pytest
from hypothesis import given
from hypothesis import strategies as st

from gic_runtime.errors import StateError
from gic_runtime.state.keys import (
    KIND_LIST,
    KIND_MAP,
    KIND_VALUE,
    bucket_for,
    decode_key,
    decode_value,
    decode_values,
    encode,
    encode_many,
    parse_store_key,
    spark_xxhash64,
    split_values,
    state_prefix,
)

_P1 = 0x9E3779B185EBCA87
_P2 = 0xC2B2AE3D27D4EB4F
_P3 = 0x165667B19E3779F9
_P4 = 0x85EBCA77C2B2AE63
_P5 = 0x27D4EB2F165667C5
_M = (1 << 64) - 1


def _rotl(x: int, r: int) -> int:
    return ((x << r) | (x >> (64 - r))) & _M


def _round(acc: int, lane: int) -> int:
    return (_rotl((acc + lane * _P2) & _M, 31) * _P1) & _M


def _reference_xxh64(data: bytes, seed: int) -> int:
    """Straightforward XXH64 from the published algorithm (independent of the library)."""
    n = len(data)
    i = 0
    if n >= 32:
        v = [(seed + _P1 + _P2) & _M, (seed + _P2) & _M, seed & _M, (seed - _P1) & _M]
        while i + 32 <= n:
            for j in range(4):
                v[j] = _round(v[j], struct.unpack_from("<Q", data, i + 8 * j)[0])
            i += 32
        h = (_rotl(v[0], 1) + _rotl(v[1], 7) + _rotl(v[2], 12) + _rotl(v[3], 18)) & _M
        for lane in v:
            h = ((h ^ _round(0, lane)) * _P1 + _P4) & _M
    else:
        h = (seed + _P5) & _M
    h = (h + n) & _M
    while i + 8 <= n:
        h = ((_rotl(h ^ _round(0, struct.unpack_from("<Q", data, i)[0]), 27) * _P1) + _P4) & _M
        i += 8
    if i + 4 <= n:
        h = ((_rotl(h ^ (struct.unpack_from("<I", data, i)[0] * _P1) & _M, 23) * _P2) + _P3) & _M
        i += 4
    while i < n:
        h = (_rotl(h ^ (data[i] * _P5) & _M, 11) * _P1) & _M
        i += 1
    h ^= h >> 33
    h = (h * _P2) & _M
    h ^= h >> 29
    h = (h * _P3) & _M
    return h ^ (h >> 32)


def _signed(h: int) -> int:
    return h - (1 << 64) if h >= 1 << 63 else h


class TestReferenceHash:
    def test_reference_matches_published_vectors(self) -> None:
        assert _reference_xxh64(b"", 0) == 0xEF46DB3751D8E999
        assert _reference_xxh64(b"a", 0) == 0xD24EC4F1A98C6E5B

    def test_spark_documented_example(self) -> None:
        # Spark docs: SELECT xxhash64('Spark', array(123), 2) -> 5602566077635097486
        h = _reference_xxh64(b"Spark", 42)
        h = _reference_xxh64(struct.pack("<i", 123), h)
        h = _reference_xxh64(struct.pack("<i", 2), h)
        assert _signed(h) == 5602566077635097486


class TestRouting:
    @pytest.mark.parametrize(
        ("key", "data"),
        [
            ("", b""),
            ("user-1", b"user-1"),
            ("gr\u00fc\u00dfe", "gr\u00fc\u00dfe".encode()),
            (b"\x00\xff", b"\x00\xff"),
            (0, struct.pack("<q", 0)),
            (-7, struct.pack("<q", -7)),
            (2**63 - 1, struct.pack("<q", 2**63 - 1)),
            ("a long key that crosses the 32 byte stripe size", b""),
        ],
    )
    def test_scalar_hash_is_spark_xxhash64(self, key: object, data: bytes) -> None:
        if isinstance(key, str) and not data:
            data = key.encode()
        assert spark_xxhash64(key) == _signed(_reference_xxh64(data, 42))

    def test_pinned_buckets(self) -> None:
        # Pinned so any change of the routing function (which would move state) fails here.
        got = [bucket_for(k, 128) for k in ("user-1", "user-2", 0, 1, b"k", ("a", 1))]
        want = [
            _signed(_reference_xxh64(b"user-1", 42)) % 128,
            _signed(_reference_xxh64(b"user-2", 42)) % 128,
            _signed(_reference_xxh64(struct.pack("<q", 0), 42)) % 128,
            _signed(_reference_xxh64(struct.pack("<q", 1), 42)) % 128,
            _signed(_reference_xxh64(b"k", 42)) % 128,
            _signed(_reference_xxh64(struct.pack("<q", 1), _reference_xxh64(b"a", 42))) % 128,
        ]
        assert got == want == [35, 59, 108, 50, 26, 19]
        assert spark_xxhash64("user-1") == 3245521771936779939
        assert spark_xxhash64(0) == -5252525462095825812
        assert spark_xxhash64(("a", 1)) == -1010403264180844141

    def test_pmod_is_non_negative_for_negative_hashes(self) -> None:
        negative = [k for k in (f"k{i}" for i in range(100)) if spark_xxhash64(k) < 0]
        assert negative
        for key in negative:
            b = bucket_for(key, 7)
            assert 0 <= b < 7
            assert b == spark_xxhash64(key) % 7

    def test_tuple_skips_none_like_spark_nulls(self) -> None:
        assert spark_xxhash64(("a", None, 3)) == spark_xxhash64(("a", 3))

    def test_float_and_bool(self) -> None:
        assert spark_xxhash64(-0.0) == spark_xxhash64(0.0)
        assert spark_xxhash64(float("nan")) == spark_xxhash64(float("-nan"))
        assert spark_xxhash64(True) == _signed(_reference_xxh64(struct.pack("<i", 1), 42))

    @pytest.mark.parametrize("key", [2**63, [1, 2], {"a": 1}, ("a", ("b",)), object()])
    def test_unroutable_keys_are_clear_errors(self, key: object) -> None:
        with pytest.raises(StateError, match=r"key|integer"):
            bucket_for(key, 16)

    def test_bad_bucket_count(self) -> None:
        with pytest.raises(StateError, match="positive"):
            bucket_for("a", 0)

    @given(st.one_of(st.text(), st.binary(), st.integers(-(2**63), 2**63 - 1)))
    def test_bucket_in_range(self, key: object) -> None:
        assert 0 <= bucket_for(key, 13) < 13


_scalar = st.one_of(st.text(max_size=8), st.binary(max_size=8), st.integers(-(2**40), 2**40))
_keys = st.one_of(_scalar, st.tuples(_scalar, _scalar))


class TestEncoding:
    @given(_keys)
    def test_keys_round_trip_as_tuples(self, key: object) -> None:
        assert decode_key(encode(key)) == key

    def test_values_decode_arrays_as_lists(self) -> None:
        assert decode_value(encode((1, "a", b"b", {"k": [2]}))) == [1, "a", b"b", {"k": [2]}]

    def test_concatenated_values(self) -> None:
        data = encode(1) + encode("two") + encode([3])
        assert decode_values(data) == [1, "two", [3]]
        assert split_values(data) == [encode(1), encode("two"), encode([3])]

    def test_unencodable_value(self) -> None:
        with pytest.raises(StateError, match="msgpack"):
            encode(object())
        with pytest.raises(StateError, match="int value 18446744073709551616"):
            encode(2**64)
        assert encode(1) == b"\x01"  # the packer was reset after the failures

    @pytest.mark.parametrize(
        ("value", "stored"),
        [
            (None, b"\xc0"),
            (True, b"\xc3"),
            (0, b"\x00"),
            (127, b"\x7f"),
            (200, b"\xcc\xc8"),
            (65_535, b"\xcd\xff\xff"),
            (2**32, b"\xcf\x00\x00\x00\x01\x00\x00\x00\x00"),
            (-1, b"\xff"),
            (-33, b"\xd0\xdf"),
            (-(2**40), b"\xd3\xff\xff\xff\x00\x00\x00\x00\x00"),
            (1.5, b"\xcb\x3f\xf8\x00\x00\x00\x00\x00\x00"),
            ("a", b"\xa1a"),
            ("x" * 40, b"\xd9\x28" + b"x" * 40),
            (b"x", b"\xc4\x01x"),
            ((1, "a"), b"\x92\x01\xa1a"),
            ({"k": [2]}, b"\x81\xa1k\x91\x02"),
        ],
    )
    def test_stored_bytes_are_pinned(self, value: object, stored: bytes) -> None:
        assert encode(value) == stored
        assert encode_many([value, value], b"p") == [b"p" + stored] * 2

    @given(st.lists(st.one_of(_keys, st.floats(allow_nan=False), st.none(), st.booleans())))
    def test_same_bytes_as_msgpack_packb(self, values: list[object]) -> None:
        want = [msgpack.packb(v, use_bin_type=True) for v in values]
        assert [encode(v) for v in values] == want
        assert encode_many(values) == want
        assert encode_many(values, b"v\xa1s") == [b"v\xa1s" + w for w in want]

    def test_encode_many_names_the_bad_value(self) -> None:
        with pytest.raises(StateError, match="cannot encode object value"):
            encode_many([1, "a", object(), 2])
        assert encode_many([1]) == [b"\x01"]

    def test_threads_encode_independently(self) -> None:
        values = [(i, "k" * (i % 50), b"b" * (i % 7)) for i in range(2_000)]
        want = [msgpack.packb(v, use_bin_type=True) for v in values]
        results: list[list[bytes]] = [[] for _ in range(4)]

        def work(slot: int) -> None:
            for _ in range(5):
                results[slot] = [encode(v) for v in values]

        threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert results == [want] * 4


class TestStoreKeys:
    @given(_keys, _keys, st.text(max_size=5))
    def test_prefixes_are_exact(self, a: object, b: object, name: str) -> None:
        pa = state_prefix(KIND_MAP, name) + encode(a)
        pb = state_prefix(KIND_MAP, name) + encode(b)
        assert (pb + encode("u")).startswith(pa) == (a == b)

    def test_parse_round_trip(self) -> None:
        skey = state_prefix(KIND_MAP, "m") + encode(("k", 1)) + encode("u")
        parsed = parse_store_key(skey)
        assert (parsed.kind, parsed.name) == (KIND_MAP, "m")
        assert decode_key(parsed.key) == ("k", 1)
        assert parsed.user_key == encode("u")
        for kind in (KIND_VALUE, KIND_LIST):
            p = parse_store_key(state_prefix(kind, "s") + encode(5))
            assert (p.kind, p.name, p.key, p.user_key) == (kind, "s", encode(5), None)

    @pytest.mark.parametrize(
        "bad",
        [
            b"x" + encode("s") + encode(1),
            KIND_VALUE + encode("s"),
            KIND_MAP + encode("s") + encode(1),
        ],
    )
    def test_malformed(self, bad: bytes) -> None:
        with pytest.raises(StateError):
            parse_store_key(bad)
