"""The driver pod's entry process (``gic_runtime.cli.driver_process``): SIGTERM reaches
the process that announced its pid, a child that does not stop is killed after the
bound and the stop is recorded for it, and the exit code tells a stopped pod from a
finished one. Children are small Python processes standing in for ``spark-submit``."""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from gic_runtime.cli import driver_process
from gic_runtime.status import JobState, JobStatus, read_status, write_status
from gic_runtime.storage.uri import StoreResolver

JOB = "pod-job"

#: Announces its pid, then waits; on SIGTERM notes it and exits 0 (a clean stop).
STOPS = """
import os, signal, sys, time
from pathlib import Path
ready = Path(sys.argv[1])
def stop(signum, frame):
    (ready.parent / "got-sigterm").write_text("yes")
    sys.exit(0)
signal.signal(signal.SIGTERM, stop)
Path(os.environ["GIC_DRIVER_PID_FILE"]).write_text(str(os.getpid()))
ready.write_text("ready")
time.sleep(120)
"""
#: Announces its pid and ignores SIGTERM (a driver stuck past its bound).
STUCK = """
import os, signal, sys, time
from pathlib import Path
signal.signal(signal.SIGTERM, signal.SIG_IGN)
Path(os.environ["GIC_DRIVER_PID_FILE"]).write_text(str(os.getpid()))
Path(sys.argv[1]).write_text("ready")
time.sleep(120)
"""


@pytest.fixture
def restore_handlers() -> Iterator[None]:
    saved = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT)}
    yield
    for signum, handler in saved.items():
        signal.signal(signum, handler)


@pytest.fixture
def job_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    for name in list(os.environ):
        if name.startswith("GIC_"):
            monkeypatch.delenv(name)
    root = (tmp_path / "store").as_uri()
    monkeypatch.setenv("GIC_STORAGE", root)
    monkeypatch.setenv("GIC_JOB_ID", JOB)
    monkeypatch.setenv("GIC_EPOCH", "3")
    return root


def sigterm_when_ready(ready: Path) -> threading.Thread:
    """SIGTERM this process (the entry process under test) once the child is ready."""

    def send() -> None:
        for _ in range(600):
            if ready.exists():
                os.kill(os.getpid(), signal.SIGTERM)
                return
            time.sleep(0.05)

    thread = threading.Thread(target=send, daemon=True)
    thread.start()
    return thread


def running_status(root: str, epoch: int) -> None:
    now = time.time()
    status = JobStatus(JOB, epoch, JobState.RUNNING, updated_at=now, started_at=now)
    write_status(StoreResolver(), root, JOB, status)


@pytest.mark.usefixtures("restore_handlers")
def test_sigterm_goes_to_the_announced_driver_and_the_pod_ends_failed(
    tmp_path: Path, job_env: str
) -> None:
    ready = tmp_path / "ready"
    sender = sigterm_when_ready(ready)

    code = driver_process.supervise([sys.executable, "-c", STOPS, str(ready)])

    sender.join()
    assert (tmp_path / "got-sigterm").read_text() == "yes"
    assert code == 128 + signal.SIGTERM  # never 0: the operator must not see "finished"
    assert read_status(StoreResolver(), job_env, JOB) is None  # nothing to record for it


@pytest.mark.usefixtures("restore_handlers")
def test_a_driver_that_does_not_stop_is_killed_and_its_stop_recorded(
    tmp_path: Path, job_env: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GIC_STOP_TIMEOUT_S", "0.2")
    monkeypatch.setattr(driver_process, "MARGIN_S", 0.0)
    running_status(job_env, epoch=3)
    ready = tmp_path / "ready"
    sender = sigterm_when_ready(ready)

    code = driver_process.supervise([sys.executable, "-c", STUCK, str(ready)])

    sender.join()
    assert code == 128 + signal.SIGTERM
    status = read_status(StoreResolver(), job_env, JOB)
    assert status is not None and status.state is JobState.STOPPED
    assert "ended before it recorded its stop" in str(status.extra["stop_reason"])


def test_the_record_of_another_epoch_is_left_alone(job_env: str) -> None:
    running_status(job_env, epoch=4)  # a newer launch's record
    settings = driver_process._settings()
    assert settings is not None

    assert driver_process.record_stop(settings) is False
    status = read_status(StoreResolver(), job_env, JOB)
    assert status is not None and status.state is JobState.RUNNING


@pytest.mark.usefixtures("restore_handlers")
def test_without_a_signal_the_childs_exit_code_is_the_pods(job_env: str) -> None:
    running_status(job_env, epoch=3)

    assert driver_process.supervise([sys.executable, "-c", "raise SystemExit(3)"]) == 3
    assert driver_process.supervise([sys.executable, "-c", "pass"]) == 0
    status = read_status(StoreResolver(), job_env, JOB)
    assert status is not None and status.state is JobState.RUNNING  # not this process's news


def test_the_command_comes_after_a_double_dash() -> None:
    assert driver_process.main([]) == 2
    assert driver_process.main(["--"]) == 2
