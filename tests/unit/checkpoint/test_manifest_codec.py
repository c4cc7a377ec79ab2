"""Manifest model and serialization: round trips, relative naming, corruption."""

from __future__ import annotations

import dataclasses
import json
import re
import shutil
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from tests.support.manifest_strategies import kinds_and_savepoints, lineages

from gic_runtime.checkpoint import (
    Manifest,
    ManifestKind,
    decode_manifest,
    encode_manifest,
    manifest_base_dir,
    read_manifest,
)
from gic_runtime.errors import (
    ConfigurationError,
    CorruptFileError,
    FormatError,
    UnsupportedVersionError,
)
from gic_runtime.event_time import NO_PROGRESS, EventTimeProgress
from gic_runtime.formats import crc32c
from gic_runtime.handles import BucketState, ChangelogHandle, SnapshotHandle
from gic_runtime.layout import manifest_uri

ROOT = "file:///data/gic"
CHK_URI = manifest_uri(ROOT, "job-a", 7)
SP_URI = "file:///data/gic/savepoints/sp-1/_savepoint.manifest"

# --- strategies ------------------------------------------------------------------------

_names = st.text("abcdef0123456789", min_size=1, max_size=8)
_object_uris = st.one_of(
    st.builds(lambda n: f"{ROOT}/jobs/job-a/changelog/1/{n}.seg", _names),
    st.builds(lambda n: f"{ROOT}/jobs/job-a/snapshots/2/{n}.snap", _names),
    st.builds(lambda n: f"{ROOT}/savepoints/sp-1/files/changelog/{n}", _names),
    st.builds(lambda n: f"s3://other-bucket/prefix/{n}", _names),
)
_u32 = st.integers(0, 2**32 - 1)
_json = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**63)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=10),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3)
    ),
    max_leaves=8,
)


@st.composite
def bucket_states(draw: st.DrawFn, bucket: int) -> BucketState:
    snapshot = None
    if draw(st.booleans()):
        snapshot = SnapshotHandle(
            draw(_object_uris), bucket, draw(st.integers(0, 99)), 10, draw(_u32)
        )
    handles = tuple(
        ChangelogHandle(uri, draw(st.integers(0, 999)), 5, bucket, i, i + 1, draw(_u32))
        for i, uri in enumerate(draw(st.lists(_object_uris, max_size=4)))
    )
    return BucketState(
        bucket, draw(st.integers(0, 1000)), snapshot, handles, draw(st.text(max_size=6))
    )


@st.composite
def manifests(draw: st.DrawFn) -> Manifest:
    num_buckets = draw(st.integers(1, 8))
    chosen = draw(st.sets(st.integers(0, num_buckets - 1)))
    kind, savepoint = draw(kinds_and_savepoints())
    lineage = draw(lineages(f"{ROOT}/savepoints/old/_savepoint.manifest"))
    return Manifest(
        job_id=draw(st.sampled_from(["job-a", "j.b_c-1"])),
        checkpoint_id=7,
        epoch=draw(st.integers(0, 2**40)),
        created_at=draw(st.floats(0, 4e9, allow_nan=False)),
        num_buckets=num_buckets,
        buckets={b: draw(bucket_states(b)) for b in chosen},
        kind=kind,
        savepoint=savepoint,
        engine=draw(st.dictionaries(st.text(max_size=6), _json, max_size=4)),
        sink=draw(st.dictionaries(st.text(max_size=6), _json, max_size=4)),
        restored_from=lineage,
        event_time=draw(_progress),
    )


_times = st.integers(-(2**61), 2**61)
_progress = st.one_of(st.just(NO_PROGRESS), st.builds(EventTimeProgress, _times, _times))


def _reencode(body: dict[str, Any], version: int = 2) -> bytes:
    payload = json.dumps(body).encode()
    return f"GICM {version} crc32c={crc32c(payload):08x}\n".encode() + payload


def _simple() -> Manifest:
    seg = f"{ROOT}/jobs/job-a/changelog/1/abc.seg"
    state = BucketState(0, 1, None, (ChangelogHandle(seg, 0, 3, 0, 0, 1, 5),), "t")
    return Manifest("job-a", 7, 1, 1.5, 2, {0: state})


# --- round trips ------------------------------------------------------------------------


class TestRoundTrip:
    @given(manifests(), st.sampled_from([CHK_URI, SP_URI]))
    def test_decode_inverts_encode(self, manifest: Manifest, uri: str) -> None:
        assert decode_manifest(encode_manifest(manifest, uri), uri) == manifest

    def test_file_is_readable_text_with_a_header_line(self) -> None:
        data = encode_manifest(_simple(), CHK_URI)
        header, _, body = data.partition(b"\n")
        assert header == f"GICM 2 crc32c={crc32c(body):08x}".encode()
        assert json.loads(body)["checkpoint_id"] == 7

    def test_uris_lists_every_referenced_object(self) -> None:
        snap = SnapshotHandle(f"{ROOT}/s", 1, 3, 1, 0)
        seg = ChangelogHandle(f"{ROOT}/c", 0, 1, 1, 3, 4, 0)
        m = Manifest("job-a", 1, 1, 0.0, 2, {1: BucketState(1, 4, snap, (seg,))})
        assert m.uris() == {f"{ROOT}/s", f"{ROOT}/c"}

    def test_event_time_is_written_only_when_seen(self) -> None:
        plain = json.loads(encode_manifest(_simple(), CHK_URI).split(b"\n", 1)[1])
        assert "event_time" not in plain  # manifests of jobs without event time unchanged
        timed = dataclasses.replace(_simple(), event_time=EventTimeProgress(20, 10))
        data = encode_manifest(timed, CHK_URI)
        assert json.loads(data.split(b"\n", 1)[1])["event_time"] == {
            "max_event_time_us": 20,
            "watermark_us": 10,
        }
        assert decode_manifest(data, CHK_URI).event_time == EventTimeProgress(20, 10)

    @pytest.mark.parametrize(
        "section", [[1, 2], {"watermark_us": 1}, {"max_event_time_us": "x", "watermark_us": 1}]
    )
    def test_a_bad_event_time_section_makes_the_manifest_corrupt(self, section: Any) -> None:
        body = json.loads(encode_manifest(_simple(), CHK_URI).split(b"\n", 1)[1])
        body["event_time"] = section
        with pytest.raises(CorruptFileError, match="event"):
            decode_manifest(_reencode(body), CHK_URI)

    def test_engine_and_sink_are_copied(self) -> None:
        engine: dict[str, Any] = {"offsets": {"a": 1}}
        m = Manifest("job-a", 1, 1, 0.0, 1, {}, engine=engine)
        engine["offsets"]["a"] = 2
        assert m.engine["offsets"]["a"] == 1


class TestValidation:
    def test_bucket_key_must_match_state(self) -> None:
        with pytest.raises(ConfigurationError, match="bucket entry 1"):
            Manifest("job-a", 1, 1, 0.0, 4, {1: BucketState(2, 0)})

    def test_bucket_must_be_in_range(self) -> None:
        with pytest.raises(ConfigurationError, match=r"\[0, 2\)"):
            Manifest("job-a", 1, 1, 0.0, 2, {3: BucketState(3, 0)})

    def test_savepoint_kind_requires_properties(self) -> None:
        with pytest.raises(ConfigurationError, match="requires savepoint"):
            Manifest("job-a", 1, 1, 0.0, 1, {}, kind=ManifestKind.SAVEPOINT)

    def test_engine_must_be_json(self) -> None:
        m = Manifest("job-a", 1, 1, 0.0, 1, {}, engine={"x": object()})
        with pytest.raises(ConfigurationError, match="not serializable as JSON"):
            encode_manifest(m, CHK_URI)

    def test_handles_must_be_full_uris(self) -> None:
        state = BucketState(0, 1, None, (ChangelogHandle("rel/x", 0, 1, 0, 0, 1, 0),))
        with pytest.raises(ConfigurationError, match="not a full URI"):
            encode_manifest(Manifest("job-a", 1, 1, 0.0, 1, {0: state}), CHK_URI)


# --- relative naming --------------------------------------------------------------------


class TestRelativeNaming:
    def test_base_dir_of_checkpoint_is_the_job_dir(self) -> None:
        assert manifest_base_dir(CHK_URI) == f"{ROOT}/jobs/job-a"
        assert manifest_base_dir(SP_URI) == f"{ROOT}/savepoints/sp-1"

    def test_objects_under_the_base_are_written_relative_others_in_full(self) -> None:
        elsewhere = "s3://bucket/claimed/x.seg"
        m = _simple()
        state = BucketState(1, 1, None, (ChangelogHandle(elsewhere, 0, 1, 1, 0, 1, 0),))
        m = Manifest("job-a", 7, 1, 1.5, 2, {0: m.buckets[0], 1: state})
        body = json.loads(encode_manifest(m, CHK_URI).partition(b"\n")[2])
        assert body["objects"] == ["changelog/1/abc.seg", elsewhere]
        assert body["base"] == ".."

    def test_moving_a_job_directory_moves_its_references(self, files: Any) -> None:
        seg = files.job_file()
        snap = files.job_file("snapshot")
        state = files.state(0, [seg], snapshot=snap)
        m = Manifest(files.job_id, 3, 1, 0.0, 1, {0: state})
        uri = manifest_uri(files.root, files.job_id, 3)
        files.store.put(uri[len(files.root) + 1 :], encode_manifest(m, uri))
        shutil.move(files.store.root / "jobs" / "job-a", files.store.root / "jobs" / "job-moved")
        moved = manifest_uri(files.root, "job-moved", 3)
        loaded = read_manifest(files.resolver, moved)
        for u in loaded.uris():
            assert u.startswith(f"{files.root}/jobs/job-moved/")
            assert files.read(u).startswith(b"payload of jobs/job-a/")

    def test_relative_names_cannot_escape(self) -> None:
        body = json.loads(encode_manifest(_simple(), CHK_URI).partition(b"\n")[2])
        body["objects"][0] = "../job-b/changelog/x"
        with pytest.raises(CorruptFileError, match="escapes"):
            decode_manifest(_reencode(body), CHK_URI)


# --- corruption -------------------------------------------------------------------------


class TestCorruption:
    @given(st.data())
    def test_any_flipped_byte_is_detected(self, data: st.DataObject) -> None:
        raw = bytearray(encode_manifest(_simple(), CHK_URI))
        pos = data.draw(st.integers(0, len(raw) - 1))
        raw[pos] ^= data.draw(st.integers(1, 255))
        with pytest.raises(FormatError) as info:
            decode_manifest(bytes(raw), CHK_URI)
        assert info.value.uri == CHK_URI

    @given(st.data())
    def test_truncation_is_detected(self, data: st.DataObject) -> None:
        raw = encode_manifest(_simple(), CHK_URI)
        cut = data.draw(st.integers(0, len(raw) - 1))
        with pytest.raises(CorruptFileError, match=re.escape(CHK_URI)):
            decode_manifest(raw[:cut], CHK_URI)

    def test_checksum_mismatch_names_the_file(self) -> None:
        raw = encode_manifest(_simple(), CHK_URI).replace(b'"epoch":1', b'"epoch":2')
        assert raw != encode_manifest(_simple(), CHK_URI)
        with pytest.raises(CorruptFileError, match=rf"checksum mismatch.*\({CHK_URI}\)"):
            decode_manifest(raw, CHK_URI)

    def test_unknown_version_says_to_upgrade(self) -> None:
        body = json.loads(encode_manifest(_simple(), CHK_URI).partition(b"\n")[2])
        with pytest.raises(UnsupportedVersionError, match=r"version 3 is not supported.*upgrade"):
            decode_manifest(_reencode(body, version=3), CHK_URI)

    @pytest.mark.parametrize(
        "raw",
        [
            b"",
            b"garbage",
            b"\x00\x01\x02\n{}",
            b"PK\x03\x04 zip\n",
            b"GICM one crc32c=00000000\n{}",
        ],
    )
    def test_garbage_is_not_a_manifest(self, raw: bytes) -> None:
        with pytest.raises(CorruptFileError, match="not a GIC manifest"):
            decode_manifest(raw, CHK_URI)

    def test_malformed_checksum_field(self) -> None:
        with pytest.raises(CorruptFileError, match="malformed checksum"):
            decode_manifest(b"GICM 1 crc=zz\n{}", CHK_URI)

    @pytest.mark.parametrize(
        "field", ["epoch", "buckets", "base", "kind", "engine", "objects", "tokens"]
    )
    def test_missing_field_is_named(self, field: str) -> None:
        body = json.loads(encode_manifest(_simple(), CHK_URI).partition(b"\n")[2])
        del body[field]
        with pytest.raises(CorruptFileError, match=f"missing field '{field}'"):
            decode_manifest(_reencode(body), CHK_URI)

    def test_invalid_field_is_reported(self) -> None:
        body = json.loads(encode_manifest(_simple(), CHK_URI).partition(b"\n")[2])
        body["checkpoint_id"] = "seven"
        with pytest.raises(CorruptFileError, match="checkpoint_id must be an integer"):
            decode_manifest(_reencode(body), CHK_URI)

    def test_checkpoint_id_must_match_file_name(self, files: Any) -> None:
        uri = manifest_uri(files.root, files.job_id, 8)
        files.store.put(uri[len(files.root) + 1 :], encode_manifest(_simple(), uri))
        with pytest.raises(CorruptFileError, match="named for checkpoint 8 but holds checkpoint 7"):
            read_manifest(files.resolver, uri)
