"""Fixtures for checkpoint tests: a local store and a helper that writes real small files
and builds bucket states and manifests pointing at them."""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Sequence
from pathlib import Path

import pytest

from gic_runtime.checkpoint import Manifest, RestoreLineage, StoredManifest, write_manifest
from gic_runtime.formats import crc32c
from gic_runtime.handles import BucketState, ChangelogHandle, SnapshotHandle
from gic_runtime.layout import job_dir, manifest_uri
from gic_runtime.storage import LocalObjectStore, StoreResolver


class TestingJobFiles:
    """Writes objects under a storage root and builds manifests that reference them."""

    __test__ = False

    def __init__(self, root_dir: Path, job_id: str = "job-a") -> None:
        self.store = LocalObjectStore(root_dir)
        self.resolver = StoreResolver()
        self.resolver.register(self.store)
        self.root = self.store.root_uri
        self.job_id = job_id

    def put(self, rel: str, data: bytes | None = None) -> str:
        """Write ``data`` (default: some bytes) at ``rel`` under the root; return its URI."""
        payload = data if data is not None else f"payload of {rel}".encode()
        self.store.put(rel, payload)
        return self.store.uri_for(rel)

    def job_file(self, kind: str = "changelog", job_id: str | None = None) -> str:
        """A fresh object in the job's ``changelog/1`` or ``snapshots/0`` directory."""
        sub = "changelog/1" if kind == "changelog" else "snapshots/0"
        rel = f"jobs/{job_id or self.job_id}/{sub}/{uuid.uuid4().hex[:12]}"
        return self.put(rel)

    def read(self, uri: str) -> bytes:
        store, key = self.resolver.resolve(uri)
        return store.get(key)

    def exists(self, uri: str) -> bool:
        store, key = self.resolver.resolve(uri)
        return store.exists(key)

    def state(self, bucket: int, uris: Sequence[str], snapshot: str | None = None) -> BucketState:
        """A bucket state with one changelog section per URI (whole object), after an
        optional snapshot."""
        base = 5 if snapshot else 0
        handles = []
        seq = base
        for uri in uris:
            data = self.read(uri)
            handles.append(ChangelogHandle(uri, 0, len(data), bucket, seq, seq + 1, crc32c(data)))
            seq += 1
        snap = None
        if snapshot is not None:
            data = self.read(snapshot)
            snap = SnapshotHandle(snapshot, bucket, base, len(data), crc32c(data))
        return BucketState(bucket, seq, snap, tuple(handles), token=f"t{seq}")

    def manifest(
        self,
        checkpoint_id: int,
        uris: Iterable[str],
        *,
        num_buckets: int = 4,
        restored_from: RestoreLineage | None = None,
    ) -> Manifest:
        """A manifest spreading ``uris`` over buckets as changelog sections."""
        per_bucket: dict[int, list[str]] = {}
        for i, uri in enumerate(sorted(uris)):
            per_bucket.setdefault(i % num_buckets, []).append(uri)
        return Manifest(
            job_id=self.job_id,
            checkpoint_id=checkpoint_id,
            epoch=1,
            created_at=1_700_000_000.5,
            num_buckets=num_buckets,
            buckets={b: self.state(b, us) for b, us in per_bucket.items()},
            engine={"offsets": {"source-0": checkpoint_id}},
            restored_from=restored_from,
        )

    def complete(self, checkpoint_id: int, uris: Iterable[str], **kw: object) -> StoredManifest:
        """Write a checkpoint manifest referencing ``uris``."""
        m = self.manifest(checkpoint_id, uris, **kw)  # type: ignore[arg-type]
        return write_manifest(self.resolver, manifest_uri(self.root, self.job_id, checkpoint_id), m)

    @property
    def job_dir(self) -> str:
        return job_dir(self.root, self.job_id)

    def all_uris(self) -> set[str]:
        return {self.store.uri_for(info.key) for info in self.store.list("")}


@pytest.fixture
def files(tmp_path: Path) -> TestingJobFiles:
    return TestingJobFiles(tmp_path / "root")


@pytest.fixture(scope="session")
def make_files() -> type[TestingJobFiles]:
    """The helper class itself, for property tests that need a fresh root per example."""
    return TestingJobFiles
