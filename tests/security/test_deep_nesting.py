"""Hostile nesting: a record written by a driver or a tenant that nests 200,000 levels
deep (checksum and header intact) is a corrupt file naming itself, never a
``RecursionError`` that escapes the decoder and stops whoever reads it (the operator's
pass, the CLI, a restarting driver)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from gic_runtime.checkpoint.claims import START_MAGIC, EpochStart
from gic_runtime.checkpoint.manifest_codec import decode_manifest
from gic_runtime.control.envelope import decode_record
from gic_runtime.coordination.barrier import TaskAck
from gic_runtime.errors import CorruptFileError, FormatError
from gic_runtime.formats import MAX_JSON_DEPTH, crc32c, encode_text_record, load_json
from gic_runtime.materialization.snapshot_record import MAGIC as RECORD_MAGIC
from gic_runtime.materialization.snapshot_record import decode_record as decode_materialization
from gic_runtime.sinks.files import MARKER_MAGIC, decode_marker
from gic_runtime.status.record_file import MAGIC as STATUS_MAGIC
from gic_runtime.status.record_file import decode_status

URI = "file:///data/gic/jobs/job-a/checkpoints/chk-000000000001.manifest"
DEEP = b'{"a":' * 200_000 + b"1" + b"}" * 200_000
DEEP_LIST = b"[" * 200_000 + b"]" * 200_000
#: Just over the bound, shallow enough for Python's own parser.
OVER = b'{"a":' * (MAX_JSON_DEPTH + 1) + b"1" + b"}" * (MAX_JSON_DEPTH + 1)


def framed(magic: str, payload: bytes) -> bytes:
    return encode_text_record(magic, 1, payload)


DECODERS: dict[str, Callable[[bytes], Any]] = {
    "manifest": lambda p: decode_manifest(encode_text_record("GICM", 2, p), URI),
    "status record": lambda p: decode_status(framed(STATUS_MAGIC, p), URI),
    "control record": lambda p: decode_record(
        framed("GICQ", p), "GICQ", frozenset({1}), what="control request", uri=URI
    ),
    "claim start record": lambda p: EpochStart.decode(framed(START_MAGIC, p), URI),
    "sink commit marker": lambda p: decode_marker(framed(MARKER_MAGIC, p), URI),
    "materialization record": lambda p: decode_materialization(
        f"{RECORD_MAGIC} 1 crc32c={crc32c(p):08x}\n".encode() + p, where=URI
    ),
}


@pytest.mark.parametrize("payload", [DEEP, DEEP_LIST, OVER], ids=["object", "list", "over"])
@pytest.mark.parametrize("name", sorted(DECODERS))
def test_a_deeply_nested_record_is_a_corrupt_file(name: str, payload: bytes) -> None:
    with pytest.raises(CorruptFileError, match="nests deeper") as caught:
        DECODERS[name](payload)
    assert caught.value.uri == URI


def test_a_deeply_nested_task_ack_is_a_format_error() -> None:
    with pytest.raises(FormatError, match="malformed task ack"):
        TaskAck.from_bytes(DEEP)


def test_records_of_ordinary_depth_still_load() -> None:
    shallow = b'{"a":' * MAX_JSON_DEPTH + b"1" + b"}" * MAX_JSON_DEPTH
    assert load_json(shallow, what="x", uri=None) is not None
