"""A steady reconcile costs the same whatever a tenant stores in its job's directory.

A driver can fill its job directory with any number of objects below the listing bounds
(99,000 under the 100,000 of ``checkpoints/``). A reconcile that listed the directory on
every pass would then cost 99 LIST requests per pass on S3 (1.5 s on local disk). The
store is wrapped at its seam (a counting store registered with the job's resolver) and
every listing is counted: calls, S3-sized pages and objects returned. A steady pass of a
job restored NoClaim, whose source is not yet released (the case that judges the
release from the manifests), lists nothing; the pass that judges again after the
driver reported a new checkpoint lists only ``checkpoints/chk-``, so stray files of any
other name cost nothing, and stray files named like manifests at most the release
bound. A launch waiting for its restore source, which asks on every pass whether the
job has a checkpoint, lists the same narrow prefix.
"""

from __future__ import annotations

import logging
import math
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from tests.operator.jobs.test_job_lifecycle import NS, World

from gic_operator.jobs.job_controller import JobController
from gic_operator.models import GICJobSpec
from gic_operator.storage import release_checks
from gic_operator.storage.job_storage import JobStorage
from gic_runtime.storage.local import LocalObjectStore
from gic_runtime.storage.object_store import ObjectInfo
from gic_runtime.storage.uri import StoreResolver

JUNK = 99_000
PAGE = 1000  # keys per S3 LIST page


@dataclass
class Cost:
    """What listings cost: calls, S3-sized pages, objects returned, prefixes listed."""

    calls: int = 0
    pages: int = 0
    objects: int = 0
    prefixes: list[str] = field(default_factory=list)


class CountingStore(LocalObjectStore):
    """The local store, counting every listing (ordered and unordered)."""

    def __init__(self, root: Path) -> None:
        super().__init__(root)
        self.cost = Cost()

    def _counted(self, prefix: str, listing: Iterator[ObjectInfo]) -> Iterator[ObjectInfo]:
        self.cost.calls += 1
        self.cost.prefixes.append(prefix)
        seen = 0
        try:
            for info in listing:
                seen += 1
                self.cost.objects += 1
                yield info
        finally:
            self.cost.pages += max(1, math.ceil(seen / PAGE))

    def list(self, prefix: str = "") -> Iterator[ObjectInfo]:
        return self._counted(prefix, super().list(prefix))

    def list_unordered(self, prefix: str = "") -> Iterator[ObjectInfo]:
        return self._counted(prefix, super().list_unordered(prefix))


def counted_world(root: Path) -> tuple[World, CountingStore]:
    """A world whose operator reaches the storage only through a counting store."""
    world = World(root)
    root.mkdir(parents=True)
    store = CountingStore(root)
    resolver = StoreResolver()
    resolver.register(store)

    def storage_for(spec: GICJobSpec, job_id: str) -> JobStorage:
        return JobStorage(resolver, spec.checkpointing.storage, job_id)

    world.jobs = JobController(world.kube, storage_for, clock=world.clock)
    return world, store


def restored_and_running(world: World, retained: int = 3) -> Path:
    """Job ``copier`` (keeping ``retained`` checkpoints) restored NoClaim from a
    Savepoint, its driver running and reporting checkpoint 3 (no manifest yet: the source
    is not released); its job directory."""
    world.completed_savepoint("sp")
    checkpointing = {"storage": world.storage_uri, "buckets": 8, "retainedCheckpoints": retained}
    world.apply_job("copier", restore={"savepoint": "sp"}, checkpointing=checkpointing)
    pod = world.reconcile("copier")["driverPod"]
    world.kube.set_pod_phase(NS, pod, "Running")
    world.driver_reports("copier", checkpoint=3)
    world.reconcile("copier")
    assert world.status("copier")["restoredFrom"]["released"] is False
    return world.root / "jobs" / f"{NS}.copier"


def fill(
    job: Path,
    count: int,
    name: str = "stray-{:06d}",
    dirs: tuple[str, ...] = ("checkpoints", "epochs", "scratch"),
) -> None:
    """``count`` empty files named ``name`` in the job's directories ``dirs`` (by default
    its ``checkpoints/``, ``epochs/`` and one of its own), spread evenly."""
    paths = [job / d for d in dirs]
    for path in paths:
        path.mkdir(parents=True, exist_ok=True)
    for i in range(count):
        os.close(os.open(paths[i % len(paths)] / name.format(i), os.O_CREAT | os.O_WRONLY, 0o644))


def pass_cost(world: World, store: CountingStore) -> Cost:
    store.cost = Cost()
    world.reconcile("copier")
    return store.cost


def passes(root: Path, junk: int) -> tuple[list[Cost], dict[str, Any]]:
    """Costs of: two steady passes, the pass after the driver reported a new checkpoint
    (written, referencing nothing of the source), one steady pass; and the final status."""
    world, store = counted_world(root)
    job = restored_and_running(world)
    fill(job, junk)
    costs = [pass_cost(world, store), pass_cost(world, store)]
    world.write_checkpoint("copier", checkpoint=4)
    world.driver_reports("copier", checkpoint=4)
    costs += [pass_cost(world, store), pass_cost(world, store)]
    return costs, world.status("copier")


def test_a_pass_costs_the_same_with_99000_stray_files(tmp_path: Path) -> None:
    clean, clean_status = passes(tmp_path / "clean", 0)
    flooded, flooded_status = passes(tmp_path / "flooded", JUNK)

    steady = [flooded[0], flooded[1], flooded[3]]
    assert all(c.calls == c.pages == c.objects == 0 for c in steady), steady
    assert [(c.calls, c.pages, c.objects) for c in flooded] == [
        (c.calls, c.pages, c.objects) for c in clean
    ]
    judged = flooded[2]  # the driver reported checkpoint 4: the manifests are read again
    assert judged.pages == judged.calls <= 2 and judged.objects <= 2
    assert set(judged.prefixes) == {f"jobs/{NS}.copier/checkpoints/chk-"}
    # The release is still judged from the manifests, found among the stray files.
    assert clean_status["restoredFrom"]["released"] is True
    assert flooded_status["restoredFrom"]["released"] is True


def waiting_passes(root: Path, junk: int) -> list[Cost]:
    """Costs of three passes of a job waiting for its restore source (a Savepoint not
    completed yet), with ``junk`` stray files in its job directory."""
    world, store = counted_world(root)
    world.create_savepoint("sp")
    world.apply_job("copier", restore={"savepoint": "sp"})
    fill(world.root / "jobs" / f"{NS}.copier", junk)
    costs = [pass_cost(world, store) for _ in range(3)]
    status = world.status("copier")
    assert status["phase"] == "Pending" and "Savepoint 'sp'" in status["message"]
    assert world.kube.pods == {}
    return costs


def test_a_launch_waiting_for_its_restore_source_costs_the_same_with_stray_files(
    tmp_path: Path,
) -> None:
    """Every pass of a launch that waits asks whether the job already has a checkpoint:
    it lists only ``checkpoints/chk-``, so stray files of other names are never listed."""
    clean = waiting_passes(tmp_path / "clean", 0)
    flooded = waiting_passes(tmp_path / "flooded", JUNK)
    assert [(c.calls, c.pages, c.objects) for c in flooded] == [
        (c.calls, c.pages, c.objects) for c in clean
    ]
    assert all(c.objects == 0 and c.pages == c.calls <= 2 for c in flooded), flooded
    assert {p for c in flooded for p in c.prefixes} == {f"jobs/{NS}.copier/checkpoints/chk-"}


def test_stray_manifest_names_cost_at_most_what_the_job_keeps(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Stray files named like manifests are listed only up to what a job keeping
    ``retainedCheckpoints`` holds there; past that the release cannot be told, the source
    stays protected, and the pass goes on."""
    world, store = counted_world(tmp_path / "store")
    job = restored_and_running(world, retained=1)
    fill(job, 3000, name="chk-stray-{:06d}", dirs=("checkpoints",))
    world.write_checkpoint("copier", checkpoint=4)
    world.driver_reports("copier", checkpoint=4)
    with caplog.at_level(logging.WARNING):
        judged = pass_cost(world, store)
    limit = release_checks.release_limit(1)
    assert limit == 1 + release_checks.MANIFEST_SLACK
    assert judged.objects <= 2 * (limit + 1) and judged.pages == judged.calls <= 2
    status = world.status("copier")
    assert status["phase"] == "Running"  # the pass went on
    assert status["restoredFrom"]["released"] is False  # cannot be told: still protected
    assert f"more than {limit} manifests under" in caplog.text
    assert pass_cost(world, store).calls == 0  # and not listed again until a change
