"""Manifest format v2 (docs/architecture.md §4.4): compact round trips over shared and
distinct objects, the upgrade path from v1, encoder refusals and the size per handle."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from tests.support.manifest_strategies import kinds_and_savepoints, lineages

from gic_runtime.checkpoint import (
    FORMAT_VERSION,
    Manifest,
    RestoreLineage,
    RestoreMode,
    decode_manifest,
    encode_manifest,
    find_latest_checkpoint,
    load_retained,
    manifest_base_dir,
    map_uris,
    read_manifest,
    write_manifest,
)
from gic_runtime.errors import ConfigurationError
from gic_runtime.formats import encode_text_record
from gic_runtime.handles import BucketState, ChangelogHandle, SnapshotHandle
from gic_runtime.layout import manifest_uri

ROOT = "file:///data/gic"
JOB = f"{ROOT}/jobs/job-a"
CHK_URI = manifest_uri(ROOT, "job-a", 7)
SP_URI = f"{ROOT}/savepoints/sp-1/_savepoint.manifest"
FIXTURE_V1 = Path(__file__).parent / "fixtures" / "chk-000000000007.v1.manifest"


def _encode_v1(manifest: Manifest, uri: str) -> bytes:
    """The v1 writer as it was (kept for tests only): every handle a JSON object with
    its name relative to the base directory when under it."""
    base = manifest_base_dir(uri)
    rel = "." if base == uri.rsplit("/", 1)[0] else ".."
    prefix = base + "/"
    m = map_uris(manifest, lambda u: u[len(prefix) :] if u.startswith(prefix) else u)
    body = {
        "job_id": m.job_id,
        "checkpoint_id": m.checkpoint_id,
        "epoch": m.epoch,
        "created_at": m.created_at,
        "num_buckets": m.num_buckets,
        "kind": m.kind.value,
        "savepoint": m.savepoint.to_json() if m.savepoint else None,
        "restored_from": m.restored_from.to_json() if m.restored_from else None,
        "base": rel,
        "engine": dict(m.engine),
        "sink": dict(m.sink),
        "buckets": [state.to_json() for state in m.buckets.values()],
    }
    text = json.dumps(body, separators=(",", ":"), sort_keys=True, allow_nan=False)
    return encode_text_record("GICM", 1, text.encode("ascii"))


# --- strategies ------------------------------------------------------------------------

_names = st.text("abcdef0123456789é", min_size=1, max_size=6)
_plain_uris = st.one_of(
    st.builds(lambda n: f"{JOB}/changelog/1/{n}.seg", _names),  # under a checkpoint's base
    st.builds(lambda n: f"{JOB}/snapshots/2/{n}.snap", _names),
    st.builds(lambda n: f"{ROOT}/savepoints/sp-1/files/changelog/{n}", _names),  # under SP base
    st.builds(lambda n: f"{ROOT}/jobs/old/changelog/3/{n}.seg", _names),  # claimed source
    st.builds(lambda n: f"s3://other-bucket/prefix/{n}", _names),  # another store
)
#: Names under a base that cannot be written relatively; they must stay full URIs.
_awkward_uris = st.sampled_from(
    [f"{JOB}/changelog/../x.seg", f"{JOB}/a://b", f"{ROOT}/savepoints/sp-1/files/../y"]
)
_u32 = st.integers(0, 2**32 - 1)
_count = st.integers(0, 2**40)


@st.composite
def bucket_states(draw: st.DrawFn, bucket: int, pool: list[str]) -> BucketState:
    snapshot = None
    if draw(st.booleans()):
        uri = draw(st.sampled_from(pool) | _plain_uris)
        snapshot = SnapshotHandle(uri, bucket, draw(_count), draw(_count), draw(_u32))
    handles = tuple(
        ChangelogHandle(
            draw(st.sampled_from(pool)),
            draw(_count),
            draw(st.integers(0, 2**31)),
            bucket,
            draw(_count),
            draw(_count),
            draw(_u32),
        )
        for _ in range(draw(st.integers(0, 5)))
    )
    token = draw(st.sampled_from(["", *pool]) | st.text(max_size=8))
    return BucketState(bucket, draw(_count), snapshot, handles, token)


@st.composite
def manifests(draw: st.DrawFn, uris: st.SearchStrategy[str] = _plain_uris) -> Manifest:
    pool = draw(st.lists(uris, min_size=1, max_size=6, unique=True))
    num_buckets = draw(st.integers(1, 12))
    chosen = draw(st.sets(st.integers(0, num_buckets - 1)))
    kind, savepoint = draw(kinds_and_savepoints())
    lineage = draw(lineages(f"{ROOT}/jobs/old/checkpoints/chk-000000000003.manifest"))
    return Manifest(
        job_id="job-a",
        checkpoint_id=7,
        epoch=draw(st.integers(0, 2**40)),
        created_at=draw(st.floats(0, 4e9, allow_nan=False)),
        num_buckets=num_buckets,
        buckets={b: draw(bucket_states(b, pool)) for b in chosen},
        kind=kind,
        savepoint=savepoint,
        engine={"offsets": {"source-0": draw(st.integers(0, 10**9))}},
        sink={"batch": draw(st.integers(0, 10**6))},
        restored_from=lineage,
    )


def _body(data: bytes) -> dict[str, Any]:
    header, _, body = data.partition(b"\n")
    assert header.startswith(f"GICM {FORMAT_VERSION} ".encode())
    parsed: dict[str, Any] = json.loads(body)
    return parsed


# --- round trips ------------------------------------------------------------------------


class TestV2RoundTrip:
    @given(manifests(_plain_uris | _awkward_uris), st.sampled_from([CHK_URI, SP_URI]))
    def test_decode_inverts_encode(self, manifest: Manifest, uri: str) -> None:
        data = encode_manifest(manifest, uri)
        assert data.startswith(b"GICM 2 ")
        assert decode_manifest(data, uri) == manifest

    @given(manifests(), st.sampled_from([CHK_URI, SP_URI]))
    def test_every_object_is_named_once_relative_under_the_base(
        self, manifest: Manifest, uri: str
    ) -> None:
        objects = _body(encode_manifest(manifest, uri))["objects"]
        assert len(objects) == len(set(objects)) == len(manifest.uris())
        base = manifest_base_dir(uri) + "/"
        for name in objects:
            assert ("://" in name) != (f"{base}{name}" in manifest.uris())

    def test_awkward_names_under_the_base_stay_full_uris(self) -> None:
        awkward = f"{JOB}/changelog/../x.seg"
        state = BucketState(0, 1, None, (ChangelogHandle(awkward, 0, 3, 0, 0, 1, 5),))
        m = Manifest("job-a", 7, 1, 0.0, 1, {0: state})
        assert _body(encode_manifest(m, CHK_URI))["objects"] == [awkward]

    def test_tokens_are_verbatim_and_shared(self) -> None:
        seg = f"{JOB}/changelog/1/s.seg"
        states = {
            b: BucketState(b, 1, None, (ChangelogHandle(seg, 8 + b, 1, b, 0, 1, b),), seg)
            for b in range(3)
        }
        body = _body(encode_manifest(Manifest("job-a", 7, 1, 0.0, 3, states), CHK_URI))
        assert body["tokens"] == [seg]
        assert body["objects"] == ["changelog/1/s.seg"]
        # contiguous sections of one segment: offset gaps are 0 after the first
        assert [e["changelog"] for e in body["buckets"]] == [
            [0, 8, 1, 0, 1],
            [0, 0, 1, 0, 1],
            [0, 0, 1, 0, 1],
        ]
        assert [e["crc"] for e in body["buckets"]] == ["00000000", "00000001", "00000002"]


# --- reading v1 and upgrading ---------------------------------------------------------


def _fixture_manifest() -> Manifest:
    """The values the committed v1 fixture was written from (by the v1 writer)."""
    seg1, seg2 = f"{JOB}/changelog/1/0f3a.seg", f"{JOB}/changelog/2/7c1e.seg"
    claimed = "s3://other-bucket/jobs/old/changelog/3/aa01.seg"
    snap = SnapshotHandle(f"{JOB}/snapshots/0/5b2d.snap", 0, 4, 812, 3735928559)
    b0 = BucketState(
        0,
        9,
        snap,
        (
            ChangelogHandle(seg1, 8, 120, 0, 3, 6, 11),
            ChangelogHandle(seg2, 8, 95, 0, 6, 9, 2**32 - 1),
        ),
        seg2,
    )
    b2 = BucketState(
        2,
        5,
        None,
        (
            ChangelogHandle(claimed, 40, 60, 2, 0, 2, 7),
            ChangelogHandle(seg1, 128, 70, 2, 2, 4, 8),
            ChangelogHandle(seg2, 103, 33, 2, 4, 5, 9),
        ),
        seg2,
    )
    lineage = RestoreLineage(
        f"{ROOT}/jobs/old/checkpoints/chk-000000000003.manifest", RestoreMode.CLAIM, 3
    )
    return Manifest(
        "job-a",
        7,
        2,
        1700000000.25,
        4,
        {0: b0, 2: b2, 3: BucketState(3, 0)},
        engine={"offsets": {"source-0": 41}, "commit": [1, 2]},
        sink={"batch": 6},
        restored_from=lineage,
        version=1,
    )


class TestV1Upgrade:
    def test_committed_v1_fixture_decodes_to_its_values(self) -> None:
        data = FIXTURE_V1.read_bytes()
        assert data.startswith(b"GICM 1 ")
        assert decode_manifest(data, CHK_URI) == _fixture_manifest()
        assert _encode_v1(_fixture_manifest(), CHK_URI) == data

    @given(manifests(), st.sampled_from([CHK_URI, SP_URI]))
    def test_v1_decodes_to_the_same_values_as_v2(self, manifest: Manifest, uri: str) -> None:
        from_v1 = decode_manifest(_encode_v1(manifest, uri), uri)
        assert from_v1 == dataclasses.replace(manifest, version=1)
        assert decode_manifest(encode_manifest(from_v1, uri), uri) == manifest

    def test_a_job_resumes_from_v1_and_writes_v2(self, files: Any) -> None:
        seg = files.job_file()
        v1 = dataclasses.replace(
            Manifest(files.job_id, 1, 1, 0.0, 1, {0: files.state(0, [seg])}), version=1
        )
        first = manifest_uri(files.root, files.job_id, 1)
        files.store.put(first[len(files.root) + 1 :], _encode_v1(v1, first))
        latest = find_latest_checkpoint(files.resolver, files.root, files.job_id)
        assert latest is not None and latest.stored.manifest == v1
        nxt = Manifest(files.job_id, 2, 1, 1.0, 1, {0: v1.buckets[0]})
        second = write_manifest(files.resolver, manifest_uri(files.root, files.job_id, 2), nxt)
        assert files.read(second.uri).startswith(b"GICM 2 ")
        assert read_manifest(files.resolver, second.uri) == nxt
        retained = load_retained(files.resolver, files.root, files.job_id)
        assert [stored.manifest.version for stored in retained] == [1, 2]


# --- what the encoder refuses ------------------------------------------------------------


class TestEncoderRefuses:
    def test_a_section_of_another_bucket(self) -> None:
        h = ChangelogHandle(f"{JOB}/changelog/1/x.seg", 0, 1, 3, 0, 1, 0)
        m = Manifest("job-a", 7, 1, 0.0, 4, {1: BucketState(1, 1, None, (h,))})
        with pytest.raises(ConfigurationError, match="section of bucket 3"):
            encode_manifest(m, CHK_URI)

    def test_a_snapshot_of_another_bucket(self) -> None:
        snap = SnapshotHandle(f"{JOB}/snapshots/2/x.snap", 2, 1, 1, 0)
        m = Manifest("job-a", 7, 1, 0.0, 4, {1: BucketState(1, 1, snap)})
        with pytest.raises(ConfigurationError, match=r"snapshot .* of bucket 2"):
            encode_manifest(m, CHK_URI)

    def test_a_crc_outside_32_bits(self) -> None:
        h = ChangelogHandle(f"{JOB}/changelog/1/x.seg", 0, 1, 0, 0, 1, 2**32)
        m = Manifest("job-a", 7, 1, 0.0, 1, {0: BucketState(0, 1, None, (h,))})
        with pytest.raises(ConfigurationError, match="CRC outside"):
            encode_manifest(m, CHK_URI)


# --- size -----------------------------------------------------------------------------


def _grid(buckets: int, handles: int, segments: int) -> Manifest:
    """``buckets`` x ``handles`` contiguous sections over ``segments`` segments, each
    segment holding one section of every bucket in bucket order (as a task's upload
    does); lengths have 4 digits, record counts 2."""
    segs = [f"{JOB}/changelog/1/{i:032x}.seg" for i in range(segments)]
    ends = [8] * segments
    states = {}
    for b in range(buckets):
        seq, hs = 0, []
        for i in range(handles):
            s, length, n = i % segments, 1000 + (b * 37 + i * 11) % 9000, 10 + (b + i) % 90
            hs.append(ChangelogHandle(segs[s], ends[s], length, b, seq, seq + n, b * 7919 + i))
            ends[s] += length
            seq += n
        states[b] = BucketState(b, seq, None, tuple(hs), segs[-1])
    return Manifest("job-a", 7, 1, 1.7e9, buckets, states)


class TestSize:
    def test_128_buckets_of_32_handles_over_32_segments(self) -> None:
        m = _grid(128, 32, 32)
        handles = 128 * 32
        size = len(encode_manifest(m, CHK_URI))
        # Per handle, from the format: object index (<= 2 digits, 32 objects) + ",",
        # offset gap 0 (8 for a segment's first section) + ",", 4-digit length + ",",
        # from gap 0 + ",", 2-digit count + ",", 8 hex digits of CRC: at most 23 bytes.
        per_handle = 3 + 2 + 5 + 2 + 3 + 8
        # Per bucket: the entry's keys and scalars (seq < 10**4 here), at most:
        entry = {"bucket": 127, "changelog": [], "crc": "", "seq": 9999, "snapshot": None}
        per_bucket = len(json.dumps({**entry, "token": 0}, separators=(",", ":"))) + 1
        # The objects table: each segment name once, quoted, with a comma.
        objects = 32 * (len(json.dumps(f"changelog/1/{0:032x}.seg")) + 1)
        fixed = len(encode_manifest(Manifest("job-a", 7, 1, 1.7e9, 128, {}), CHK_URI))
        tokens = len(json.dumps(f"{JOB}/changelog/1/{0:032x}.seg"))
        bound = fixed + tokens + objects + 128 * per_bucket + handles * per_handle
        assert size <= bound
        assert size / handles < 26  # about 25.5 bytes per handle, everything included
        assert size * 5 < len(_encode_v1(m, CHK_URI))  # v1: 146 bytes per handle here

    def test_marginal_cost_of_a_handle(self) -> None:
        few, many = _grid(128, 32, 32), _grid(128, 64, 32)
        extra = len(encode_manifest(many, CHK_URI)) - len(encode_manifest(few, CHK_URI))
        assert extra <= 128 * 32 * 23
