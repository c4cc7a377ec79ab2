"""Shared-file registry: reference counts, retention, safe deletion (docs/architecture.md
I1)."""

from __future__ import annotations

import dataclasses
import tempfile
from collections import Counter
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tests.support.stores import DelegatingStore

from gic_runtime.checkpoint import (
    ManifestKind,
    OwnershipPolicy,
    RestoreLineage,
    RestoreMode,
    SavepointInfo,
    SavepointType,
    SharedFileRegistry,
    StoredManifest,
    load_retained,
)
from gic_runtime.errors import ConfigurationError, TransientStorageError
from gic_runtime.storage import StoreResolver


def _registry(
    files: Any, retain: int = 1, policy: OwnershipPolicy | None = None
) -> SharedFileRegistry:
    policy = policy or OwnershipPolicy.for_job(files.root, files.job_id)
    return SharedFileRegistry(files.resolver, policy, retain=retain)


class TestRefcounting:
    def test_subsumed_checkpoint_loses_its_manifest_and_exclusive_files(self, files: Any) -> None:
        shared, only1, only2 = files.job_file(), files.job_file(), files.job_file()
        with _registry(files) as reg:
            c1 = files.complete(1, [shared, only1])
            reg.register(c1)
            assert reg.refcount(shared) == 1
            c2 = files.complete(2, [shared, only2])
            only1_size = len(files.read(only1))
            report = reg.register(c2).result()
            assert report.subsumed == (1,)
            assert report.manifests_deleted == 1
            assert report.objects_deleted == 1
            assert report.bytes_deleted == only1_size
            assert not files.exists(c1.uri) and not files.exists(only1)
            assert files.exists(shared) and files.exists(only2) and files.exists(c2.uri)
            assert reg.refcount(shared) == 1 and reg.refcount(only1) == 0
            assert [s.checkpoint_id for s in reg.retained()] == [2]

    def test_bytes_deleted_are_the_sizes_of_deleted_objects(self, files: Any) -> None:
        a = files.put(f"jobs/{files.job_id}/changelog/1/a", b"x" * 100)
        b = files.put(f"jobs/{files.job_id}/changelog/1/b", b"y" * 23)
        with _registry(files) as reg:
            reg.register(files.complete(1, [a, b]))
            report = reg.register(files.complete(2, [files.job_file()])).result()
            assert report.bytes_deleted == 123
            reg.drain()
            stats = reg.stats()
        assert (stats.objects_deleted, stats.bytes_deleted, stats.manifests_deleted) == (2, 123, 1)
        assert stats.pending == 0 and stats.retained == 1

    def test_nothing_is_deleted_while_within_retention(self, files: Any) -> None:
        with _registry(files, retain=3) as reg:
            stored = [files.complete(i, [files.job_file()]) for i in range(3)]
            for s in stored:
                assert reg.register(s).result().subsumed == ()
            assert files.all_uris() >= {s.uri for s in stored}

    def test_shrinking_retention_at_runtime_subsumes_the_oldest(self, files: Any) -> None:
        with _registry(files, retain=3) as reg:
            stored = [files.complete(i, [files.job_file()]) for i in range(3)]
            for s in stored:
                reg.register(s)
            report = reg.set_retention(1).result()
            assert report.subsumed == (0, 1)
            assert reg.retain == 1
            assert [s.checkpoint_id for s in reg.retained()] == [2]
            assert not files.exists(stored[0].uri) and files.exists(stored[2].uri)
            reg.set_retention(4)
            reg.register(files.complete(3, [files.job_file()]))
            assert [s.checkpoint_id for s in reg.retained()] == [2, 3]

    def test_invalid_uses_are_refused(self, files: Any) -> None:
        with _registry(files) as reg:
            c1 = files.complete(1, [files.job_file()])
            reg.register(c1)
            with pytest.raises(ConfigurationError, match="already registered"):
                reg.register(c1)
            with pytest.raises(ConfigurationError, match="retention must be >= 1"):
                reg.set_retention(0)
            sp = dataclasses.replace(
                c1.manifest,
                kind=ManifestKind.SAVEPOINT,
                savepoint=SavepointInfo(SavepointType.INTERMEDIATE),
            )
            with pytest.raises(ConfigurationError, match="never part of the checkpoint timeline"):
                reg.register(StoredManifest("file:///x/_savepoint.manifest", sp))
        with pytest.raises(ConfigurationError, match="closed"):
            reg.register(files.complete(2, []))


class TestNeverDeletesWhatTheJobDoesNotOwn:
    def test_savepoint_and_no_claim_source_files_survive(self, files: Any) -> None:
        sp_file = files.put("savepoints/sp-1/files/changelog/a")
        source_manifest = files.root + "/savepoints/sp-old/_savepoint.manifest"
        source_file = files.put("savepoints/sp-old/files/changelog/b")
        lineage = RestoreLineage(source_manifest, RestoreMode.NO_CLAIM, 9)
        policy = OwnershipPolicy.for_job(
            files.root, files.job_id, restore=lineage, source=[source_file]
        )
        mine = files.job_file()
        with _registry(files, policy=policy) as reg:
            reg.register(files.complete(1, [sp_file, source_file, mine], restored_from=lineage))
            report = reg.register(files.complete(2, [files.job_file()])).result()
        assert files.exists(sp_file) and files.exists(source_file)
        assert not files.exists(mine)
        assert set(report.kept) == {sp_file, source_file}
        assert report.objects_deleted == 1

    def test_claimed_source_files_are_deleted_when_unreferenced(self, files: Any) -> None:
        source_manifest = files.root + "/savepoints/sp-old/_savepoint.manifest"
        claimed = files.put("savepoints/sp-old/files/changelog/b")
        leftover = files.put("savepoints/sp-old/files/changelog/c")
        lineage = RestoreLineage(source_manifest, RestoreMode.CLAIM, 9)
        policy = OwnershipPolicy.for_job(
            files.root, files.job_id, restore=lineage, source=[claimed]
        )
        with _registry(files, policy=policy) as reg:
            reg.register(files.complete(1, [claimed], restored_from=lineage))
            reg.register(files.complete(2, [claimed]))
            assert files.exists(claimed)
            reg.register(files.complete(3, [files.job_file()])).result()
            reg.drain()
        assert not files.exists(claimed) and files.exists(leftover)

    def test_failed_deletion_is_reported_and_left_for_the_sweep(
        self, tmp_path: Path, make_files: Any
    ) -> None:
        files = make_files(tmp_path / "root")
        flaky = TestingFlakyDeleteStore(files.store)
        files.resolver = StoreResolver()
        files.resolver.register(flaky)
        doomed = files.job_file()
        with _registry(files) as reg:
            reg.register(files.complete(1, [doomed]))
            report = reg.register(files.complete(2, [files.job_file()])).result()
            stats = reg.stats()
        assert files.exists(doomed)
        assert doomed in report.failed and report.objects_deleted == 0
        assert stats.delete_failures == 2  # the manifest and the object


class TestingFlakyDeleteStore(DelegatingStore):
    """Delegates to a real store but every delete fails transiently."""

    def delete_many(self, keys: Iterable[str]) -> int:
        raise TransientStorageError("injected delete failure", uri=self.root_uri)


# --- property: invariant 1 and rebuild ----------------------------------------------------

_steps = st.lists(
    st.one_of(
        st.tuples(st.just("checkpoint"), st.sets(st.integers(0, 11), max_size=6)),
        st.tuples(st.just("retain"), st.integers(1, 4)),
    ),
    min_size=1,
    max_size=12,
)


@settings(max_examples=40, deadline=None)
@given(_steps, st.integers(1, 3))
def test_invariant_1_and_rebuild_over_random_timelines(
    make_files: Any, steps: list[tuple[str, Any]], retain: int
) -> None:
    """Files 0-7 are the job's, 8-9 a savepoint's, 10-11 a no-claim source's. After every
    step: whatever a retained checkpoint, a savepoint or the source references exists;
    job files referenced by no retained checkpoint are gone; counts match a recount; and
    a registry rebuilt from the stored manifests equals the incremental one."""
    with tempfile.TemporaryDirectory(prefix="gic-reg-") as tmp:
        files = make_files(Path(tmp) / "root")
        pool = [files.job_file() for _ in range(8)]
        pool += [files.put(f"savepoints/sp-1/files/f{i}") for i in range(2)]
        pool += [files.put(f"savepoints/src/files/f{i}") for i in range(2)]
        lineage = RestoreLineage(
            files.root + "/savepoints/src/_savepoint.manifest", RestoreMode.NO_CLAIM, 0
        )
        policy = OwnershipPolicy.for_job(
            files.root, files.job_id, restore=lineage, source=pool[10:]
        )
        deleted: set[str] = set()
        ever: set[str] = set()
        next_id = 0
        with SharedFileRegistry(files.resolver, policy, retain=retain) as reg:
            for op, arg in steps:
                if op == "retain":
                    reg.set_retention(arg)
                    reg.drain()
                    continue
                # As in the protocol, a new checkpoint references what the newest one does,
                # fresh uploads, and objects the job does not own.
                newest = reg.retained()[-1].manifest.uris() if reg.retained() else set()
                uris = [pool[i] for i in arg if i >= 8 or pool[i] in newest or pool[i] not in ever]
                reg.register(files.complete(next_id, uris))
                ever |= set(uris)
                next_id += 1
                reg.drain()
                retained = reg.retained()
                live = set().union(*(s.manifest.uris() for s in retained))
                for uri in live | set(pool[8:]):
                    assert files.exists(uri), uri
                for uri in (set(pool[:8]) & ever) - live:
                    assert not files.exists(uri), uri
                deleted |= {u for u in pool[:8] if not files.exists(u)}
                assert not deleted & live
                recount = Counter(u for s in retained for u in s.manifest.uris())
                assert reg.snapshot().refcounts == dict(recount)
                assert {s.uri for s in retained} == {
                    u for u in files.all_uris() if "/checkpoints/" in u
                }
            reg.drain()
            stored = load_retained(files.resolver, files.root, files.job_id)
            with SharedFileRegistry.from_manifests(
                files.resolver, policy, stored, retain=reg.retain
            ) as rebuilt:
                assert rebuilt.snapshot() == reg.snapshot()
                assert rebuilt.pending == 0
