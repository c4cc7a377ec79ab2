"""Manifests on storage: written once, listed, and the latest one found for recovery."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from gic_runtime.checkpoint import (
    ManifestKind,
    SavepointInfo,
    SavepointType,
    catalog,
    find_latest_checkpoint,
    list_checkpoints,
    load_retained,
    read_manifest,
    write_manifest,
)
from gic_runtime.errors import (
    ConfigurationError,
    CorruptFileError,
    ManifestExistsError,
    RestoreError,
    UnsupportedVersionError,
)
from gic_runtime.layout import manifest_uri


def _key(files: Any, checkpoint_id: int) -> str:
    return manifest_uri(files.root, files.job_id, checkpoint_id)[len(files.root) + 1 :]


class TestWriteOnce:
    def test_second_write_of_a_checkpoint_fails_and_keeps_the_first(self, files: Any) -> None:
        first = files.complete(3, [files.job_file()])
        other = files.manifest(3, [files.job_file()])
        with pytest.raises(ManifestExistsError, match="checkpoint 3 of job 'job-a' already has"):
            write_manifest(files.resolver, first.uri, other)
        assert read_manifest(files.resolver, first.uri) == first.manifest

    def test_written_manifest_reads_back(self, files: Any) -> None:
        stored = files.complete(1, [files.job_file(), files.job_file("snapshot")])
        assert read_manifest(files.resolver, stored.uri) == stored.manifest

    def test_a_manifest_readers_would_refuse_is_never_written(
        self, files: Any, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        tiny = dataclasses.replace(catalog.DRIVER_LIMITS, max_values=10)
        monkeypatch.setattr(catalog, "DRIVER_LIMITS", tiny)
        manifest = files.manifest(1, [files.job_file(), files.job_file("snapshot")])
        uri = manifest_uri(files.root, files.job_id, 1)
        with pytest.raises(ConfigurationError, match=r"more than the .* values a reader accepts"):
            write_manifest(files.resolver, uri, manifest)
        assert list_checkpoints(files.resolver, files.root, files.job_id) == ()


class TestListing:
    def test_lists_checkpoints_in_id_order_and_ignores_other_files(self, files: Any) -> None:
        for cid in (10, 2, 7):
            files.complete(cid, [files.job_file()])
        files.put(f"jobs/{files.job_id}/checkpoints/notes.txt")
        files.put(f"jobs/{files.job_id}/checkpoints/sub/chk-000000000001.manifest")
        files.put("jobs/job-ab/checkpoints/chk-000000000099.manifest")
        refs = list_checkpoints(files.resolver, files.root, files.job_id)
        assert [r.checkpoint_id for r in refs] == [2, 7, 10]
        assert refs[0].uri == manifest_uri(files.root, files.job_id, 2)

    def test_no_checkpoints(self, files: Any) -> None:
        assert list_checkpoints(files.resolver, files.root, files.job_id) == ()
        assert find_latest_checkpoint(files.resolver, files.root, files.job_id) is None

    def test_load_retained_refuses_a_corrupt_manifest(self, files: Any) -> None:
        files.complete(1, [files.job_file()])
        files.store.put(_key(files, 2), b"garbage")
        with pytest.raises(CorruptFileError, match="chk-000000000002"):
            load_retained(files.resolver, files.root, files.job_id)


class TestLatest:
    def test_latest_is_the_highest_id(self, files: Any) -> None:
        for cid in (1, 2, 3):
            files.complete(cid, [files.job_file()])
        latest = find_latest_checkpoint(files.resolver, files.root, files.job_id)
        assert latest is not None
        assert latest.stored.checkpoint_id == 3
        assert latest.skipped == ()

    def test_corrupt_newest_fails_by_default_naming_it(self, files: Any) -> None:
        files.complete(1, [files.job_file()])
        files.store.put(_key(files, 2), b"GICM 1 crc32c=00000000\n{}")
        with pytest.raises(CorruptFileError, match=r"newest checkpoint manifest.*chk-000000000002"):
            find_latest_checkpoint(files.resolver, files.root, files.job_id)

    def test_skip_corrupt_falls_back_and_reports_what_it_skipped(self, files: Any) -> None:
        files.complete(1, [files.job_file()])
        files.store.put(_key(files, 2), b"truncated")
        files.store.put(_key(files, 3), b"also broken")
        latest = find_latest_checkpoint(files.resolver, files.root, files.job_id, skip_corrupt=True)
        assert latest is not None
        assert latest.stored.checkpoint_id == 1
        assert [s.checkpoint_id for s in latest.skipped] == [3, 2]
        assert "not a GIC manifest" in latest.skipped[0].reason

    def test_unknown_version_is_never_skipped(self, files: Any) -> None:
        files.complete(1, [files.job_file()])
        files.store.put(_key(files, 2), b"GICM 9 crc32c=00000000\n{}")
        with pytest.raises(UnsupportedVersionError):
            find_latest_checkpoint(files.resolver, files.root, files.job_id, skip_corrupt=True)

    def test_nothing_readable_is_a_restore_error_listing_the_files(self, files: Any) -> None:
        files.store.put(_key(files, 4), b"x")
        with pytest.raises(RestoreError, match="chk-000000000004"):
            find_latest_checkpoint(files.resolver, files.root, files.job_id, skip_corrupt=True)

    def test_a_savepoint_manifest_among_checkpoints_is_rejected(self, files: Any) -> None:
        m = dataclasses.replace(
            files.manifest(5, [files.job_file()]),
            kind=ManifestKind.SAVEPOINT,
            savepoint=SavepointInfo(SavepointType.INTERMEDIATE),
        )
        write_manifest(files.resolver, manifest_uri(files.root, files.job_id, 5), m)
        with pytest.raises(CorruptFileError, match="savepoint manifest sits among"):
            find_latest_checkpoint(files.resolver, files.root, files.job_id)
