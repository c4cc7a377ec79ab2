"""A superseded driver (a zombie) that commits after a newer launch claimed the job and
swept it never becomes the restore point.

Every driver here is a real process (``zombie_driver.py``: the Spark driver's per-batch
protocol over the in-process API). The zombie runs batches 0-2, then is held right
before the manifest PUT of batch 3 (``GIC_HOLDPOINTS=manifest_put@3``: it has passed
every fence check), while a second process claims a newer epoch and sweeps the job --
deleting the zombie's batch-3 segments, which no retained checkpoint references. Then
the zombie's PUT lands. Afterwards a restart must restore a complete checkpoint with
exactly the state its batches produced, on the local disk and on SeaweedFS.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from tests.support.testing_s3server import TestingS3Server

from gic_runtime.crashpoints import HOLD_DIR_ENV, HOLD_ENV, hold_file, release_file

DRIVER = Path(__file__).with_name("zombie_driver.py")
JOB = "zombie-job"
WAIT_S = 120.0

pytestmark = pytest.mark.slow


def expected_state(last: int) -> dict[str, int]:
    counts: dict[str, int] = {}
    for n in range(last + 1):
        for i in range(24):
            if (i + n) % 3 != 0:
                counts[f"k{i}"] = counts.get(f"k{i}", 0) + n + 1
    return counts


@dataclass
class Drivers:
    """Starts driver processes of one job and ends every one it started (by PID)."""

    root: str
    work: Path
    env: dict[str, str]
    procs: list[subprocess.Popen[bytes]] = field(default_factory=list)
    count: int = 0

    def start(self, batches: int, *, hold: str | None = None, wait: Path | None = None) -> Path:
        self.count += 1
        out = self.work / f"driver-{self.count}.json"
        env = {**self.env, HOLD_DIR_ENV: str(self.work)}
        if hold:
            env[HOLD_ENV] = hold
        cmd = [sys.executable, str(DRIVER), self.root, JOB, str(out), "--batches", str(batches)]
        if wait is not None:
            cmd += ["--wait", str(wait)]
        log = open(self.work / f"driver-{self.count}.log", "wb")  # noqa: SIM115 - closed by the process
        self.procs.append(subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT))
        log.close()
        return out

    def run(self, batches: int, *, wait: Path | None = None) -> dict[str, Any]:
        """Start a driver and wait for its report."""
        out = self.start(batches, wait=wait)
        return self.report(out)

    def report(self, out: Path) -> dict[str, Any]:
        proc = self.procs[int(out.stem.rsplit("-", 1)[1]) - 1]
        proc.wait(timeout=WAIT_S)
        assert proc.returncode == 0, self.log(out)
        report: dict[str, Any] = json.loads(out.read_text())
        return report

    def log(self, out: Path) -> str:
        path = out.with_suffix(".log")
        return path.read_text(errors="replace") if path.exists() else ""

    def close(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait(timeout=30)


def wait_for(path: Path, drivers: Drivers) -> None:
    deadline = time.monotonic() + WAIT_S
    while not path.exists():
        for proc in drivers.procs:
            if proc.poll() is not None and proc.returncode != 0:
                raise AssertionError(f"a driver died with exit code {proc.returncode}")
        assert time.monotonic() < deadline, f"{path.name} never appeared"
        time.sleep(0.02)


def hold_zombie(drivers: Drivers) -> Path:
    """Start the zombie: batches 0-2 committed, held before the manifest PUT of 3."""
    out = drivers.start(5, hold="manifest_put@3")
    wait_for(hold_file(drivers.work, "manifest_put", 3), drivers)
    return out


def release_zombie(drivers: Drivers, out: Path) -> dict[str, Any]:
    """Let the zombie's manifest PUT of checkpoint 3 go; return its report."""
    release_file(drivers.work, "manifest_put", 3).write_text("go")
    return drivers.report(out)


def check_zombie_stopped(report: dict[str, Any], *errors: str) -> None:
    """The zombie never reported checkpoint 3 complete (so it neither published its
    output nor deleted anything for it) and stopped with one of ``errors``."""
    assert report["committed"] == [0, 1, 2]
    assert report["error"] is not None and report["error"]["type"] in errors, report["error"]


def check_restart(drivers: Drivers, last: int) -> None:
    """A restart resumes from checkpoint ``last`` with exactly its state, and the job
    goes on: two more batches, then another restart sees their state exactly."""
    report = drivers.run(2)
    assert report["error"] is None, report["error"]
    assert report["start"] == last
    assert report["restored_exact"], report["restored"]
    assert report["committed"] == [last + 1, last + 2]
    again = drivers.run(0)
    assert again["error"] is None, again["error"]
    assert again["start"] == last + 2
    assert again["restored"] == expected_state(last + 2)


# --- scenarios -------------------------------------------------------------------------


def zombie_lands_after_the_recovery_sweep(drivers: Drivers) -> None:
    """The newer launch claims and sweeps, then dies before its first batch (or is the
    operator's recovery: claim, sweep, relaunch); the zombie's PUT lands afterwards."""
    zombie = hold_zombie(drivers)
    recovery = drivers.run(0)
    assert recovery["error"] is None, recovery["error"]
    assert recovery["start"] == 2 and recovery["restored_exact"]
    stopped = release_zombie(drivers, zombie)
    check_restart(drivers, last=2)
    check_zombie_stopped(stopped, "FencedError")


def zombie_lands_before_the_new_driver_commits(drivers: Drivers) -> None:
    """The new driver is running (claimed, swept) when the zombie's manifest for the
    checkpoint id it is about to write lands; it must still complete its checkpoints."""
    zombie = hold_zombie(drivers)
    gate = drivers.work / "new-driver-go"
    new = drivers.start(2, wait=gate)
    wait_for(Path(str(gate) + ".ready"), drivers)
    stopped = release_zombie(drivers, zombie)
    gate.write_text("go")
    report = drivers.report(new)
    assert report["error"] is None, report["error"]
    assert report["start"] == 2 and report["restored_exact"]
    assert report["committed"] == [3, 4]
    check_restart(drivers, last=4)
    check_zombie_stopped(stopped, "FencedError")


def zombie_lands_after_the_new_driver_committed(drivers: Drivers) -> None:
    """The other order: the new driver already completed checkpoint 3 when the zombie's
    PUT arrives; create-if-absent refuses it."""
    zombie = hold_zombie(drivers)
    new = drivers.run(2)
    assert new["error"] is None, new["error"]
    assert new["committed"] == [3, 4]
    stopped = release_zombie(drivers, zombie)
    check_restart(drivers, last=4)
    check_zombie_stopped(stopped, "ManifestExistsError", "FencedError")


SCENARIOS = [
    zombie_lands_after_the_recovery_sweep,
    zombie_lands_before_the_new_driver_commits,
    zombie_lands_after_the_new_driver_committed,
]


# --- storages ----------------------------------------------------------------------------


@pytest.fixture
def local_drivers(tmp_path: Path) -> Iterator[Drivers]:
    root = (tmp_path / "storage").absolute()
    root.mkdir()
    work = tmp_path / "work"
    work.mkdir()
    drivers = Drivers(root.as_uri(), work, _base_env())
    yield drivers
    drivers.close()


@pytest.fixture
def s3_drivers(tmp_path: Path, s3_server: TestingS3Server, s3_bucket: str) -> Iterator[Drivers]:
    settings = s3_server.settings
    env = _base_env()
    env.update(
        GIC_S3_ENDPOINT_URL=s3_server.endpoint_url,
        AWS_ACCESS_KEY_ID=settings.access_key_id or "",
        AWS_SECRET_ACCESS_KEY=settings.secret_access_key or "",
        AWS_REGION=settings.region or "us-east-1",
    )
    work = tmp_path / "work"
    work.mkdir()
    drivers = Drivers(f"s3://{s3_bucket}/gic", work, env)
    yield drivers
    drivers.close()


def _base_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GIC_", "AWS_"))}
    env["PYTHONUNBUFFERED"] = "1"
    return env


@pytest.mark.parametrize("scenario", SCENARIOS, ids=lambda s: s.__name__)
def test_zombie_commit_on_local_storage(local_drivers: Drivers, scenario: Any) -> None:
    scenario(local_drivers)


@pytest.mark.parametrize("scenario", SCENARIOS, ids=lambda s: s.__name__)
def test_zombie_commit_on_seaweedfs(s3_drivers: Drivers, scenario: Any) -> None:
    scenario(s3_drivers)
