"""Orphan sweep: removes exactly what no retained checkpoint references, only inside the
job's directory (docs/architecture.md I9, I10)."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gic_runtime.checkpoint import (
    OwnershipPolicy,
    RestoreLineage,
    RestoreMode,
    sweep_orphans,
)
from gic_runtime.errors import CorruptFileError
from gic_runtime.layout import manifest_uri


def _bystanders(files: Any) -> set[str]:
    """Objects a sweep of job-a must never touch."""
    return {
        files.put("jobs/job-ab/changelog/1/x"),
        files.put("jobs/job-b/snapshots/0/y"),
        files.put("savepoints/sp-1/_savepoint.manifest"),
        files.put("savepoints/sp-1/files/changelog/1/z"),
        files.put(f"jobs/{files.job_id}/control/savepoint-request.json"),
        files.put(f"jobs/{files.job_id}/checkpoints/README"),
        files.put("top-level-file"),
    }


@settings(max_examples=40, deadline=None)
@given(
    st.integers(0, 12),
    st.lists(st.sets(st.integers(0, 11), max_size=5), max_size=4),
    st.data(),
)
def test_sweep_deletes_exactly_the_unreferenced_set(
    make_files: Any, n_files: int, manifest_refs: list[set[int]], data: st.DataObject
) -> None:
    with tempfile.TemporaryDirectory(prefix="gic-sweep-") as tmp:
        files = make_files(Path(tmp) / "root")
        pool = [
            files.job_file(data.draw(st.sampled_from(["changelog", "snapshot"])))
            for _ in range(n_files)
        ]
        stored = [
            files.complete(i, [pool[j] for j in refs if j < n_files])
            for i, refs in enumerate(manifest_refs)
        ]
        retained = [s for s in stored if data.draw(st.booleans())]
        keep = _bystanders(files)
        referenced = {s.uri for s in retained}.union(*(s.manifest.uris() for s in retained))
        expected = (set(pool) | {s.uri for s in stored}) - referenced
        before = files.all_uris()

        dry = sweep_orphans(files.resolver, files.root, files.job_id, retained, dry_run=True)
        assert files.all_uris() == before
        assert set(dry.orphans) == expected
        assert (dry.orphaned, dry.deleted, dry.dry_run) == (len(expected), 0, True)

        result = sweep_orphans(files.resolver, files.root, files.job_id, retained, batch_size=3)
        assert files.all_uris() == before - expected
        assert keep <= files.all_uris()
        assert result.deleted == result.orphaned == len(expected)
        assert result.listed == len(pool) + len(stored)
        assert result.referenced == len(pool) + len(stored) - len(expected)
        assert result.orphans == ()
        assert result.listed_bytes == result.referenced_bytes + result.orphaned_bytes
        assert result.deleted_bytes == result.orphaned_bytes


class TestSweep:
    def test_default_retained_set_is_every_manifest_on_storage(self, files: Any) -> None:
        a, b, orphan = files.job_file(), files.job_file("snapshot"), files.job_file()
        c1 = files.complete(1, [a])
        c2 = files.complete(2, [a, b])
        result = sweep_orphans(files.resolver, files.root, files.job_id)
        assert files.all_uris() == {a, b, c1.uri, c2.uri}
        assert not files.exists(orphan)
        assert (result.listed, result.referenced, result.deleted) == (5, 4, 1)

    def test_unreadable_manifest_aborts_before_deleting(self, files: Any) -> None:
        orphan = files.job_file()
        bad = manifest_uri(files.root, files.job_id, 3)
        files.store.put(bad[len(files.root) + 1 :], b"GICM 1 crc32c=00000000\n{}")
        with pytest.raises(CorruptFileError, match="chk-000000000003"):
            sweep_orphans(files.resolver, files.root, files.job_id)
        assert files.exists(orphan)

    def test_never_touches_anything_outside_the_job_directory(self, files: Any) -> None:
        keep = _bystanders(files)
        result = sweep_orphans(files.resolver, files.root, files.job_id, [])
        assert keep <= files.all_uris()
        assert result.listed == 0

    def test_no_claim_source_objects_inside_the_job_dir_are_protected(self, files: Any) -> None:
        old = files.job_file()
        source = manifest_uri(files.root, files.job_id, 4)
        lineage = RestoreLineage(source, RestoreMode.NO_CLAIM, 4)
        policy = OwnershipPolicy.for_job(files.root, files.job_id, restore=lineage, source=[old])
        result = sweep_orphans(files.resolver, files.root, files.job_id, [], policy=policy)
        assert files.exists(old)
        assert (result.protected, result.orphaned, result.deleted) == (1, 0, 0)

    def test_progress_reports_counts_so_far(self, files: Any) -> None:
        for _ in range(7):
            files.job_file()
        calls: list[tuple[int, int]] = []
        result = sweep_orphans(
            files.resolver,
            files.root,
            files.job_id,
            [],
            batch_size=2,
            progress=lambda listed, deleted: calls.append((listed, deleted)),
        )
        assert calls[-1] == (7, 7) == (result.listed, result.deleted)
        assert calls == sorted(calls)
        assert len(calls) >= 3
