"""The common header and checksum helpers every file format is built on."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gic_runtime.errors import CorruptFileError, UnsupportedVersionError
from gic_runtime.formats import HEADER, check_header, crc32c, pack_header, verify_crc


def test_crc32c_matches_the_standard_check_value() -> None:
    # The CRC-32C (Castagnoli) check value for the ASCII digits 1..9.
    assert crc32c(b"123456789") == 0xE3069283


@given(st.binary(), st.binary())
def test_crc32c_can_be_continued(a: bytes, b: bytes) -> None:
    assert crc32c(b, crc32c(a)) == crc32c(a + b)


def test_header_round_trip() -> None:
    data = pack_header(b"GICT", 3, flags=7) + b"body"
    assert check_header(data, b"GICT", frozenset({3}), uri="mem://x") == (3, 7)
    assert len(pack_header(b"GICT", 1)) == HEADER.size


def test_truncated_header_names_the_file() -> None:
    with pytest.raises(CorruptFileError, match=r"truncated.*\(file:///a/b\)"):
        check_header(b"GIC", b"GICT", frozenset({1}), uri="file:///a/b")


def test_foreign_magic_is_rejected() -> None:
    with pytest.raises(CorruptFileError, match="not a GICT file"):
        check_header(pack_header(b"XXXX", 1), b"GICT", frozenset({1}), uri=None)


def test_unknown_version_says_to_upgrade() -> None:
    with pytest.raises(UnsupportedVersionError, match=r"version 9 is not supported.*upgrade"):
        check_header(pack_header(b"GICT", 9), b"GICT", frozenset({1, 2}), uri=None)


def test_verify_crc_detects_a_flipped_bit() -> None:
    data = bytearray(b"some payload")
    good = crc32c(data)
    verify_crc(data, good, what="payload", uri=None)
    data[3] ^= 0x01
    with pytest.raises(CorruptFileError, match="checksum mismatch in payload"):
        verify_crc(data, good, what="payload", uri="file:///f")
