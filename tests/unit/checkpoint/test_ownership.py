"""Ownership classes and the delete guard (docs/architecture.md I9)."""

from __future__ import annotations

from typing import Any

import pytest

from gic_runtime.checkpoint import (
    Manifest,
    Owner,
    OwnershipError,
    OwnershipPolicy,
    RestoreLineage,
    RestoreMode,
    delete_keys,
    delete_uris,
)
from gic_runtime.handles import BucketState, ChangelogHandle
from gic_runtime.layout import manifest_uri

ROOT = "s3://bucket/gic"
SOURCE_SP = f"{ROOT}/savepoints/sp-old/_savepoint.manifest"
SOURCE_FILE = f"{ROOT}/savepoints/sp-old/files/changelog/a.seg"


def _policy(mode: RestoreMode | None = None, **kw: Any) -> OwnershipPolicy:
    lineage = RestoreLineage(SOURCE_SP, mode, 4) if mode else None
    return OwnershipPolicy.for_job(ROOT, "job-a", restore=lineage, **kw)


class TestClassify:
    @pytest.mark.parametrize(
        ("uri", "owner"),
        [
            (f"{ROOT}/jobs/job-a/changelog/1/x.seg", Owner.JOB),
            (f"{ROOT}/jobs/job-a/checkpoints/chk-000000000001.manifest", Owner.JOB),
            (f"{ROOT}/jobs/job-ab/changelog/1/x.seg", Owner.FOREIGN),
            (f"{ROOT}/jobs/job-b/snapshots/0/y.snap", Owner.FOREIGN),
            (f"{ROOT}/savepoints/sp-1/files/changelog/x", Owner.SAVEPOINT),
            ("s3://elsewhere/x", Owner.FOREIGN),
        ],
    )
    def test_without_restore(self, uri: str, owner: Owner) -> None:
        assert _policy().classify(uri) is owner

    def test_known_savepoint_dirs_outside_the_root(self) -> None:
        policy = _policy(savepoint_dirs=["file:///backups/sp-9"])
        assert policy.classify("file:///backups/sp-9/files/x") is Owner.SAVEPOINT
        assert policy.classify("file:///backups/sp-90/files/x") is Owner.FOREIGN

    def test_no_claim_source_objects_and_directory_are_protected(self) -> None:
        policy = _policy(RestoreMode.NO_CLAIM, source=[SOURCE_FILE])
        assert policy.classify(SOURCE_FILE) is Owner.NO_CLAIM_SOURCE
        assert policy.classify(SOURCE_SP) is Owner.NO_CLAIM_SOURCE
        assert policy.classify(f"{ROOT}/savepoints/sp-old/files/other") is Owner.NO_CLAIM_SOURCE
        assert not policy.may_delete(SOURCE_FILE)

    def test_claimed_source_objects_belong_to_the_job(self) -> None:
        lineage = RestoreLineage(SOURCE_SP, RestoreMode.CLAIM, 4)
        policy = OwnershipPolicy.for_job(ROOT, "job-a", restore=lineage, source=[SOURCE_FILE])
        assert policy.classify(SOURCE_FILE) is Owner.CLAIMED_SOURCE
        assert policy.may_delete(SOURCE_FILE)
        # The source manifest and unreferenced leftovers stay with the savepoint.
        assert policy.classify(SOURCE_SP) is Owner.SAVEPOINT
        assert policy.classify(f"{ROOT}/savepoints/sp-old/files/other") is Owner.SAVEPOINT

    def test_no_claim_restore_from_the_jobs_own_checkpoint_protects_only_its_objects(
        self,
    ) -> None:
        source = manifest_uri(ROOT, "job-a", 4)
        old = f"{ROOT}/jobs/job-a/changelog/1/old.seg"
        policy = OwnershipPolicy.for_job(
            ROOT, "job-a", restore=RestoreLineage(source, RestoreMode.NO_CLAIM, 4), source=[old]
        )
        assert policy.classify(old) is Owner.NO_CLAIM_SOURCE
        assert policy.classify(f"{ROOT}/jobs/job-a/changelog/2/new.seg") is Owner.JOB

    @pytest.mark.parametrize("mode", list(RestoreMode))
    def test_source_references(self, mode: RestoreMode) -> None:
        own = f"{ROOT}/jobs/job-a/changelog/1/x"
        handles = tuple(
            ChangelogHandle(u, 0, 1, 0, i, i + 1, 0) for i, u in enumerate([SOURCE_FILE, own])
        )
        m = Manifest("job-a", 5, 1, 0.0, 1, {0: BucketState(0, 2, None, handles)})
        assert _policy(mode, source=[SOURCE_FILE]).source_references(m) == {SOURCE_FILE}
        assert _policy().source_references(m) == frozenset()
        released = Manifest("job-a", 6, 1, 0.0, 1, {0: BucketState(0, 2, None, handles[1:])})
        assert _policy(mode, source=[SOURCE_FILE]).source_references(released) == frozenset()


class TestGuard:
    def test_refuses_savepoint_and_foreign_objects(self) -> None:
        policy = _policy()
        with pytest.raises(OwnershipError, match=r"refusing to delete .*sp-1.*owned by savepoint"):
            policy.check_delete(f"{ROOT}/savepoints/sp-1/x")
        with pytest.raises(OwnershipError, match="owned by foreign"):
            policy.check_delete(f"{ROOT}/jobs/job-b/x")
        policy.check_delete(f"{ROOT}/jobs/job-a/x")

    def test_a_forbidden_key_stops_the_whole_batch(self, files: Any) -> None:
        mine = files.job_file()
        theirs = files.put("savepoints/sp-1/files/x")
        other_job = files.job_file(job_id="job-b")
        policy = OwnershipPolicy.for_job(files.root, files.job_id)
        for victim in (theirs, other_job):
            keys = [mine[len(files.root) + 1 :], victim[len(files.root) + 1 :]]
            with pytest.raises(OwnershipError):
                delete_keys(policy, files.store, keys)
        assert files.exists(mine) and files.exists(theirs) and files.exists(other_job)

    def test_deletes_owned_objects_across_batches(self, files: Any) -> None:
        uris = [files.job_file() for _ in range(5)]
        policy = OwnershipPolicy.for_job(files.root, files.job_id)
        assert delete_uris(policy, files.resolver, uris, batch_size=2) == 5
        assert not any(files.exists(u) for u in uris)
