"""StateTask: checkpoints become durable or fail with the project's own error."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from gic_runtime.coordination import StateTask, TaskSettings
from gic_runtime.errors import UploadError
from gic_runtime.state.memory_store import InMemoryStore
from gic_runtime.storage import LocalObjectStore, StoreResolver
from gic_runtime.testing_store import FaultRule, TestingFaultyStore


def _task(tmp_path: Path, store: TestingFaultyStore, timeout_s: float) -> StateTask:
    resolver = StoreResolver()
    resolver.register(store)
    return StateTask(
        root=store.root_uri,
        job_id="job",
        epoch=1,
        bucket_range=range(4),
        num_buckets=4,
        store=InMemoryStore(),
        resolver=resolver,
        settings=TaskSettings(checkpoint_timeout_s=timeout_s),
    )


def test_a_checkpoint_that_never_becomes_durable_fails_with_upload_error(tmp_path: Path) -> None:
    gate = threading.Event()
    store = TestingFaultyStore(LocalObjectStore(tmp_path))
    store.add_rule(FaultRule(methods=frozenset({"put"}), gate=gate))
    task = _task(tmp_path, store, timeout_s=0.3)
    try:
        task.backend.value_state("v").set("k", 1)
        with pytest.raises(UploadError, match=r"did not become durable within 0.3 s"):
            task.checkpoint()
    finally:
        gate.set()
        task.close()


def test_a_durable_checkpoint_references_only_existing_objects(tmp_path: Path) -> None:
    store = TestingFaultyStore(LocalObjectStore(tmp_path))
    task = _task(tmp_path, store, timeout_s=30)
    try:
        for n in range(100):
            task.backend.value_state("v").set(n, n)
        states = task.checkpoint(self_contained=True)
        uris = set().union(*(s.uris() for s in states.values()))
        assert uris
        for uri in uris:
            assert store.exists(uri.removeprefix(store.root_uri + "/"))
        assert sum(s.seq for s in states.values()) == 100
    finally:
        task.close()
