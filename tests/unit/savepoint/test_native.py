"""Native savepoints: self-contained, relocatable copies that leave the job untouched."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from gic_runtime.checkpoint import (
    Manifest,
    ManifestKind,
    OwnershipPolicy,
    SavepointFormat,
    SavepointType,
    SharedFileRegistry,
    StoredManifest,
    read_manifest,
    write_manifest,
)
from gic_runtime.errors import ManifestExistsError, ObjectExistsError, RestoreError
from gic_runtime.formats import crc32c
from gic_runtime.handles import BucketState, ChangelogHandle, SnapshotHandle
from gic_runtime.layout import manifest_uri, savepoint_dir
from gic_runtime.savepoint import load_savepoint, write_native_savepoint
from gic_runtime.storage import LocalObjectStore, StoreResolver
from gic_runtime.testing import TestingClock

JOB = "job-a"


class TestingCheckpoint:
    """A job directory with a shared changelog segment, snapshots and a manifest."""

    __test__ = False

    def __init__(self, root_dir: Path, checkpoint_id: int = 5) -> None:
        self.store = LocalObjectStore(root_dir)
        self.resolver = StoreResolver()
        self.resolver.register(self.store)
        self.root = self.store.root_uri
        self.contents: dict[str, bytes] = {}
        seg = self.put(f"jobs/{JOB}/changelog/1/seg-a.seg", b"AAAA" + b"BBBBBB")
        snap = self.put(f"jobs/{JOB}/snapshots/1/s.snap", b"snapshot of bucket 1")
        seg2 = self.put(f"jobs/{JOB}/changelog/2/seg-b.seg", b"CCC")
        b0 = BucketState(0, 1, None, (ChangelogHandle(seg, 0, 4, 0, 0, 1, crc32c(b"AAAA")),), "t0")
        b1 = BucketState(
            1,
            9,
            SnapshotHandle(snap, 1, 7, 20, crc32c(b"snapshot of bucket 1")),
            (
                ChangelogHandle(seg, 4, 6, 1, 7, 8, crc32c(b"BBBBBB")),
                ChangelogHandle(seg2, 0, 3, 1, 8, 9, crc32c(b"CCC")),
            ),
            "t1",
        )
        manifest = Manifest(
            JOB, checkpoint_id, 2, 1_700_000_000.0, 4, {0: b0, 1: b1}, engine={"offsets": [1, 2]}
        )
        self.stored = write_manifest(
            self.resolver, manifest_uri(self.root, JOB, checkpoint_id), manifest
        )

    def put(self, rel: str, data: bytes) -> str:
        self.store.put(rel, data)
        uri = self.store.uri_for(rel)
        self.contents[uri] = data
        return uri

    def read(self, uri: str) -> bytes:
        store, key = self.resolver.resolve(uri)
        return store.get(key)


def _assert_sections_match(tc: TestingCheckpoint, m: Manifest, resolver: StoreResolver) -> None:
    for state in m.buckets.values():
        for h in state.changelog:
            store, key = resolver.resolve(h.uri)
            assert crc32c(store.get(key, start=h.offset, length=h.length)) == h.crc
        if state.snapshot is not None:
            store, key = resolver.resolve(state.snapshot.uri)
            assert crc32c(store.get(key)) == state.snapshot.crc


@pytest.fixture
def tc(tmp_path: Path) -> TestingCheckpoint:
    return TestingCheckpoint(tmp_path / "root")


class TestSelfContained:
    def test_survives_deleting_the_whole_job_directory(self, tc: TestingCheckpoint) -> None:
        directory = savepoint_dir(tc.root, "sp-1")
        result = write_native_savepoint(tc.resolver, tc.stored, directory)
        shutil.rmtree(tc.store.root / "jobs" / JOB)
        loaded = load_savepoint(tc.resolver, directory)
        assert loaded.manifest.uris() == result.stored.manifest.uris()
        originals = dict(
            zip(sorted(tc.stored.manifest.uris()), sorted(loaded.manifest.uris()), strict=True)
        )
        for src, dst in originals.items():
            assert dst.startswith(directory + "/files/")
            assert tc.read(dst) == tc.contents[src]
        _assert_sections_match(tc, loaded.manifest, tc.resolver)

    def test_rewritten_manifest_keeps_the_checkpoint_but_is_a_savepoint(
        self, tc: TestingCheckpoint
    ) -> None:
        directory = savepoint_dir(tc.root, "sp-1")
        result = write_native_savepoint(
            tc.resolver,
            tc.stored,
            directory,
            savepoint_type=SavepointType.TERMINAL,
            clock=TestingClock(),
        )
        m = load_savepoint(tc.resolver, result.stored.uri).manifest
        assert m.kind is ManifestKind.SAVEPOINT
        assert m.savepoint is not None
        assert (m.savepoint.type, m.savepoint.format) == (
            SavepointType.TERMINAL,
            SavepointFormat.NATIVE,
        )
        src = tc.stored.manifest
        assert (m.checkpoint_id, m.epoch, m.job_id, dict(m.engine)) == (
            src.checkpoint_id,
            src.epoch,
            src.job_id,
            dict(src.engine),
        )
        assert m.created_at == TestingClock().wall()
        assert sorted(m.uris()) == [
            f"{directory}/files/changelog/1/seg-a.seg",
            f"{directory}/files/changelog/2/seg-b.seg",
            f"{directory}/files/snapshots/1/s.snap",
        ]
        # Each shared object is copied once.
        assert (result.files, result.bytes) == (3, 10 + 20 + 3)
        assert result.server_side_copies == 3

    def test_directory_is_relocatable(self, tc: TestingCheckpoint, tmp_path: Path) -> None:
        write_native_savepoint(tc.resolver, tc.stored, savepoint_dir(tc.root, "sp-1"))
        elsewhere = tmp_path / "archive" / "kept-savepoint"
        elsewhere.parent.mkdir()
        shutil.move(tc.store.root / "savepoints" / "sp-1", elsewhere)
        shutil.rmtree(tc.store.root)
        resolver = StoreResolver()
        loaded = load_savepoint(resolver, elsewhere.as_uri())
        for uri in loaded.manifest.uris():
            assert uri.startswith(elsewhere.as_uri() + "/files/")
        _assert_sections_match(tc, loaded.manifest, resolver)

    def test_manifest_names_copies_relatively(self, tc: TestingCheckpoint) -> None:
        result = write_native_savepoint(tc.resolver, tc.stored, savepoint_dir(tc.root, "sp-1"))
        body = json.loads(tc.read(result.stored.uri).partition(b"\n")[2])
        assert set(body["objects"]) == {
            "files/changelog/1/seg-a.seg",
            "files/changelog/2/seg-b.seg",
            "files/snapshots/1/s.snap",
        }
        assert body["base"] == "."


class TestSourceUntouched:
    def test_job_files_and_manifest_stay_as_they_were(self, tc: TestingCheckpoint) -> None:
        jobs_before = {i.key: tc.store.get(i.key) for i in tc.store.list("jobs/")}
        write_native_savepoint(tc.resolver, tc.stored, savepoint_dir(tc.root, "sp-1"))
        jobs_after = {i.key: tc.store.get(i.key) for i in tc.store.list("jobs/")}
        assert jobs_after == jobs_before
        assert read_manifest(tc.resolver, tc.stored.uri) == tc.stored.manifest

    def test_never_touches_the_registry_and_outlives_subsumption(
        self, tc: TestingCheckpoint
    ) -> None:
        policy = OwnershipPolicy.for_job(tc.root, JOB)
        with SharedFileRegistry(tc.resolver, policy, retain=1) as registry:
            registry.register(tc.stored)
            before = registry.snapshot()
            directory = savepoint_dir(tc.root, "sp-1")
            write_native_savepoint(tc.resolver, tc.stored, directory)
            assert registry.snapshot() == before
            later = write_manifest(
                tc.resolver,
                manifest_uri(tc.root, JOB, 6),
                Manifest(JOB, 6, 2, 0.0, 4, {}),
            )
            registry.register(later).result()
        assert not tc.store.exists("jobs/job-a/changelog/1/seg-a.seg")
        _assert_sections_match(tc, load_savepoint(tc.resolver, directory).manifest, tc.resolver)


class TestWriting:
    def test_a_savepoint_directory_is_written_once(self, tc: TestingCheckpoint) -> None:
        directory = savepoint_dir(tc.root, "sp-1")
        write_native_savepoint(tc.resolver, tc.stored, directory)
        with pytest.raises(ManifestExistsError, match="already holds a savepoint"):
            write_native_savepoint(tc.resolver, tc.stored, directory)

    def test_retry_into_an_incomplete_directory_reuses_matching_copies(
        self, tc: TestingCheckpoint
    ) -> None:
        tc.store.put("savepoints/sp-1/files/changelog/2/seg-b.seg", b"CCC")
        result = write_native_savepoint(tc.resolver, tc.stored, savepoint_dir(tc.root, "sp-1"))
        assert (result.reused_copies, result.server_side_copies) == (1, 2)

    def test_a_mismatched_leftover_copy_is_an_error(self, tc: TestingCheckpoint) -> None:
        tc.store.put("savepoints/sp-1/files/changelog/2/seg-b.seg", b"different")
        with pytest.raises(ObjectExistsError, match=r"seg-b\.seg already exists with 9 bytes"):
            write_native_savepoint(tc.resolver, tc.stored, savepoint_dir(tc.root, "sp-1"))
        assert not tc.store.exists("savepoints/sp-1/_savepoint.manifest")

    def test_across_stores_copies_are_streamed(self, tc: TestingCheckpoint, tmp_path: Path) -> None:
        other = LocalObjectStore(tmp_path / "other")
        tc.resolver.register(other)
        directory = other.root_uri + "/savepoints/sp-x"
        result = write_native_savepoint(tc.resolver, tc.stored, directory, parallelism=2)
        assert (result.streamed_copies, result.server_side_copies) == (3, 0)
        _assert_sections_match(tc, load_savepoint(tc.resolver, directory).manifest, tc.resolver)

    def test_objects_outside_the_source_directory_go_to_ext(self, tc: TestingCheckpoint) -> None:
        foreign = tc.put("elsewhere/seg.seg", b"XY")
        b2 = BucketState(2, 1, None, (ChangelogHandle(foreign, 0, 2, 2, 0, 1, crc32c(b"XY")),))
        buckets = {**tc.stored.manifest.buckets, 2: b2}
        m = Manifest(JOB, 9, 2, 0.0, 4, buckets)
        directory = savepoint_dir(tc.root, "sp-2")
        write_native_savepoint(tc.resolver, StoredManifest(tc.stored.uri, m), directory)
        loaded = load_savepoint(tc.resolver, directory).manifest
        (ext,) = [u for u in loaded.uris() if "/files/ext/" in u]
        assert ext.endswith("/seg.seg") and tc.read(ext) == b"XY"

    def test_bare_manifest_without_its_uri_still_works(self, tc: TestingCheckpoint) -> None:
        directory = savepoint_dir(tc.root, "sp-3")
        write_native_savepoint(tc.resolver, tc.stored.manifest, directory)
        loaded = load_savepoint(tc.resolver, directory).manifest
        assert all("/files/ext/" in u for u in loaded.uris())
        assert len(loaded.uris()) == 3
        _assert_sections_match(tc, loaded, tc.resolver)

    def test_progress_counts_every_file(self, tc: TestingCheckpoint) -> None:
        calls: list[tuple[int, int]] = []
        write_native_savepoint(
            tc.resolver,
            tc.stored,
            savepoint_dir(tc.root, "sp-1"),
            progress=lambda done, total: calls.append((done, total)),
        )
        assert calls == [(0, 3), (1, 3), (2, 3), (3, 3)]

    def test_loading_a_checkpoint_as_a_savepoint_is_refused(self, tc: TestingCheckpoint) -> None:
        key = tc.stored.uri[len(tc.root) + 1 :]
        tc.store.put("savepoints/sp-9/_savepoint.manifest", tc.store.get(key))
        with pytest.raises(RestoreError, match="is a checkpoint manifest, not a savepoint"):
            load_savepoint(tc.resolver, savepoint_dir(tc.root, "sp-9"))
