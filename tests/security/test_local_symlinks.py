"""Symbolic links planted under a local storage root never make the runtime reach
outside it: sweeps and ``gic gc`` delete nothing outside, reads and writes through a
link are refused with an error naming the link, and a FIFO never blocks a reader.

A driver runs tenant code and can write its job directory; ``gic gc``, the operator's
recovery sweep and the drivers' own sweeps list that directory and delete what no
checkpoint references.
"""

from __future__ import annotations

import logging
import os
import threading
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gic_runtime.checkpoint.live_sweep import LiveSweeper
from gic_runtime.checkpoint.ownership import OwnershipPolicy
from gic_runtime.checkpoint.sweep import sweep_orphans
from gic_runtime.cli import app
from gic_runtime.errors import ObjectNotFoundError, UnsafePathError
from gic_runtime.status import read_status
from gic_runtime.storage.local import LocalObjectStore
from gic_runtime.storage.uri import StoreResolver

JOB = "tenant"


class Planted:
    """A storage root with one real orphan of the job and links to files outside."""

    def __init__(self, tmp: Path) -> None:
        self.root_dir = tmp / "storage"
        self.outside = tmp / "outside"
        self.outside.mkdir()
        (self.outside / "nested").mkdir()
        self.victims = [
            self.outside / "precious.seg",
            self.outside / "nested" / "other.snap",
            self.outside / "chk-000000000009.manifest",
        ]
        for victim in self.victims:
            victim.write_bytes(b"outside the storage root")
        self.store = LocalObjectStore(self.root_dir)
        job = self.root_dir / "jobs" / JOB
        self.orphan = "jobs/tenant/changelog/1/crashed-upload.seg"
        self.store.put(self.orphan, b"x" * 10)
        (job / "changelog" / "1" / "evil").symlink_to(self.outside)  # a directory link
        (job / "snapshots").symlink_to(self.outside / "nested")  # a whole swept dir
        (job / "changelog" / "1" / "linked.seg").symlink_to(self.victims[0])  # a file link
        (job / "checkpoints").mkdir()
        (job / "checkpoints" / "chk-000000000009.manifest").symlink_to(self.victims[2])
        self.root = self.store.root_uri

    def resolver(self, *, registered: bool = True) -> StoreResolver:
        resolver = StoreResolver()
        if registered:
            resolver.register(LocalObjectStore(self.root_dir))
        return resolver

    def check_outside_intact(self) -> None:
        for victim in self.victims:
            assert victim.read_bytes() == b"outside the storage root", victim
        links = [
            self.root_dir / "jobs" / JOB / "changelog" / "1" / "evil",
            self.root_dir / "jobs" / JOB / "snapshots",
        ]
        assert all(link.is_symlink() for link in links)


@pytest.fixture
def planted(tmp_path: Path) -> Planted:
    return Planted(tmp_path)


@pytest.mark.parametrize("registered", [True, False], ids=["own-store", "resolver-fallback"])
def test_the_orphan_sweep_deletes_nothing_outside_the_root(
    planted: Planted, registered: bool, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="gic_runtime.storage.local")
    resolver = planted.resolver(registered=registered)
    result = sweep_orphans(resolver, planted.root, JOB)
    planted.check_outside_intact()
    assert not planted.store.exists(planted.orphan)  # the job's real orphan went
    assert result.deleted == 1
    assert "symbolic links below the storage root are never followed" in caplog.text


def test_gic_gc_deletes_nothing_outside_the_root(
    planted: Planted, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in list(os.environ):
        if name.startswith(("GIC_", "AWS_")):
            monkeypatch.delenv(name)
    result = CliRunner().invoke(app, ["gc", "--storage", planted.root, "--job-id", JOB])
    assert result.exit_code == 0, result.output
    planted.check_outside_intact()
    assert not planted.store.exists(planted.orphan)


def test_the_live_sweep_deletes_nothing_outside_the_root(planted: Planted) -> None:
    now = [0.0]
    sweeper = LiveSweeper(
        planted.resolver(),
        planted.root,
        JOB,
        interval_s=1.0,
        snapshot_grace_s=600.0,
        clock=lambda: now[0],
        epoch=1,
    )
    policy = OwnershipPolicy.for_job(planted.root, JOB)
    sweeper.sweep((), policy)
    now[0] += 10_000.0  # every snapshot is past its grace period
    sweeper.sweep((), policy)
    planted.check_outside_intact()
    assert not planted.store.exists(planted.orphan)


def test_deleting_a_link_is_refused_naming_it(planted: Planted) -> None:
    link = "jobs/tenant/changelog/1/linked.seg"
    with pytest.raises(UnsafePathError) as info:
        planted.store.delete_many([link])
    assert info.value.path == str(planted.root_dir / link)
    assert "is a symbolic link" in str(info.value)
    with pytest.raises(UnsafePathError):  # through a linked directory
        planted.store.delete_many(["jobs/tenant/snapshots/other.snap"])
    with pytest.raises(UnsafePathError):
        planted.store.delete_many(["jobs/tenant/changelog/1/evil/precious.seg"])
    planted.check_outside_intact()
    planted.store.delete_many(["jobs/tenant/changelog/1/never-there.seg"])  # missing: fine


def test_reads_and_writes_through_a_link_are_refused(planted: Planted) -> None:
    store = planted.store
    via_dir = "jobs/tenant/changelog/1/evil/precious.seg"
    for call in (
        lambda: store.get(via_dir),
        lambda: store.get("jobs/tenant/changelog/1/linked.seg"),
        lambda: store.size("jobs/tenant/changelog/1/linked.seg"),
        lambda: store.exists(via_dir),
        lambda: store.put("jobs/tenant/snapshots/new.snap", b"y"),
        lambda: store.put("jobs/tenant/changelog/1/evil/precious.seg", b"y"),
        lambda: store.copy(via_dir, "jobs/tenant/copied"),
        lambda: store.copy(planted.orphan, "jobs/tenant/snapshots/copied"),
    ):
        with pytest.raises(UnsafePathError):
            call()
    planted.check_outside_intact()
    assert not (planted.outside / "new.snap").exists()
    assert not (planted.outside / "nested" / "copied").exists()


def test_listing_skips_links(planted: Planted) -> None:
    keys = [info.key for info in planted.store.list("jobs/")]
    assert keys == [planted.orphan]
    assert list(planted.store.list("jobs/tenant/snapshots/")) == []


def test_a_fifo_never_blocks_a_reader(tmp_path: Path) -> None:
    store = LocalObjectStore(tmp_path / "storage")
    resolver = StoreResolver()
    resolver.register(store)
    status = tmp_path / "storage" / "jobs" / JOB / "status.json"
    status.parent.mkdir(parents=True)
    os.mkfifo(status)
    outcome: list[BaseException] = []

    def read() -> None:
        try:
            read_status(resolver, store.root_uri, JOB)
        except BaseException as exc:
            outcome.append(exc)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    reader.join(timeout=10)
    assert not reader.is_alive(), "reading a FIFO blocked"
    assert len(outcome) == 1 and isinstance(outcome[0], UnsafePathError), outcome
    assert "is not a regular file" in str(outcome[0])


def test_a_root_that_is_itself_a_link_works(tmp_path: Path) -> None:
    real = tmp_path / "real"
    real.mkdir()
    (tmp_path / "via-link").symlink_to(real)
    store = LocalObjectStore(tmp_path / "via-link")
    store.put("a/b", b"data")
    assert store.get("a/b") == b"data"
    assert [i.key for i in store.list("a/")] == ["a/b"]
    store.delete_many(["a/b"])
    with pytest.raises(ObjectNotFoundError):
        store.get("a/b")
