"""SIGTERM stops a running driver cleanly (docs/operations.md §5.4): the status record
says ``stopped``, ``gic gc`` accepts the job without ``--force``, and the next launch
continues exactly-once.

The driver runs as a user runs it: ``gic run`` in a process of its own, signalled by
pid (``kill PID``), and the driver pod's command (the entry process with
``spark-submit``), signalled like a kubelet signals a container's first process. The
word count runs on a processing-time trigger, so only the signal ends it.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from gic_runtime.checkpoint.catalog import list_checkpoints
from gic_runtime.status import JobState, read_status
from gic_runtime.storage.uri import StoreResolver

from ..support.processes import log_tail, wait_until
from .test_clean_stop import unreferenced
from .test_word_count import sink_batches
from .words import reference_counts, write_text_batches

REPO = Path(__file__).resolve().parents[2]
APP = REPO / "examples" / "word_count.py"
BIN = Path(sys.executable).parent
JOB = "wc-term"
FILES = 8


def base_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIC_")}
    env.update(
        GIC_STORAGE=(tmp_path / "store").as_uri(),
        GIC_JOB_ID=JOB,
        GIC_NUM_BUCKETS="8",
        GIC_LOCAL_DIR=str(tmp_path / "local"),
        GIC_CONTROL_POLL_S="0.2",
        SPARK_LOCAL_IP="127.0.0.1",
        PYSPARK_PYTHON=sys.executable,
        PATH=f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}",
    )
    env.update(extra)
    return env


def app_args(tmp_path: Path, trigger: str) -> list[str]:
    paths = ["--input", str(tmp_path / "in"), "--output", str(tmp_path / "out")]
    return [*paths, "--trigger", trigger]


def checkpoint_ids(root: str) -> list[int]:
    return sorted(c.checkpoint_id for c in list_checkpoints(StoreResolver(), root, JOB))


class Launch:
    """One launch in a process group of its own; ``signal`` reaches its first process
    only, as a kubelet's or ``kill PID``'s does."""

    def __init__(self, argv: list[str], env: dict[str, str], log: Path) -> None:
        self.log = log
        with log.open("ab") as out:
            self.proc = subprocess.Popen(
                argv,
                env=env,
                cwd=REPO,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    def alive(self) -> None:
        if self.proc.poll() is not None:
            raise AssertionError(f"the driver exited early:\n{log_tail(self.log, 40)}")

    def wait_for_checkpoints(self, root: str, count: int) -> None:
        wait_until(
            lambda: len(checkpoint_ids(root)) >= count,
            timeout=240,
            on_timeout=lambda _: AssertionError(log_tail(self.log, 40)),
            check=self.alive,
            interval=0.1,
        )

    def terminate(self, timeout: float) -> tuple[int, float]:
        """SIGTERM; returns the exit code and the seconds until the process exited."""
        sent = time.monotonic()
        self.proc.send_signal(signal.SIGTERM)
        try:
            code = self.proc.wait(timeout=timeout)
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)  # nothing of it may linger
        return code, time.monotonic() - sent


def gic(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(BIN / "gic"), *args], env=env, capture_output=True, text=True, timeout=120, check=False
    )


def assert_stopped_and_collectable(tmp_path: Path, env: dict[str, str], reason: str) -> None:
    root = env["GIC_STORAGE"]
    status = read_status(StoreResolver(), root, JOB)
    assert status is not None
    assert status.state is JobState.STOPPED, status
    assert reason in str(status.extra.get("stop_reason")), status
    jobs = json.loads(gic("jobs", "--json", env=env).stdout)
    assert [j["status"]["state"] for j in jobs["jobs"] if j["job_id"] == JOB] == ["stopped"]
    gc = gic("gc", env=env)  # no --force: the job must not look alive
    assert gc.returncode == 0, gc.stderr
    assert unreferenced(root, JOB)[0] == set()


def assert_exactly_once(tmp_path: Path, env: dict[str, str], log: Path) -> None:
    """A launch that runs the rest of the input ends with every batch's output once,
    equal to the reference, whatever the stop before it left."""
    again = Launch(
        [str(BIN / "gic"), "run", str(APP), "--", *app_args(tmp_path, "available-now")], env, log
    )
    assert again.proc.wait(timeout=300) == 0, log_tail(log, 40)
    assert sink_batches(tmp_path / "out") == dict(
        enumerate(reference_counts(tmp_path / "in", FILES))
    )


@pytest.mark.slow
def test_sigterm_stops_gic_run_between_batches(tmp_path: Path) -> None:
    write_text_batches(tmp_path / "in", FILES)
    env = base_env(tmp_path)
    log = tmp_path / "driver.log"
    launch = Launch(
        [str(BIN / "gic"), "run", str(APP), "--", *app_args(tmp_path, "2 seconds")], env, log
    )
    launch.wait_for_checkpoints(env["GIC_STORAGE"], 2)

    code, took = launch.terminate(timeout=60)

    assert code == 0, log_tail(log, 40)  # a clean stop: the app's run() returned
    print(f"gic run: SIGTERM to exit {took:.1f} s")
    assert "stopped: stopped by SIGTERM" in log.read_text()
    assert_stopped_and_collectable(tmp_path, env, "stopped by SIGTERM")
    assert checkpoint_ids(env["GIC_STORAGE"])[-1] < FILES - 1  # the signal ended it
    assert_exactly_once(tmp_path, env, log)


@pytest.mark.slow
def test_sigterm_to_the_driver_pods_command_abandons_a_batch_that_does_not_end(
    tmp_path: Path,
) -> None:
    write_text_batches(tmp_path / "in", FILES)
    hold = tmp_path / "hold"
    hold.mkdir()
    # Batch 2 is held after its tasks acked, before its manifest: it outlasts the
    # driver's stop timeout, so the driver must abandon it.
    env = base_env(
        tmp_path,
        GIC_STOP_TIMEOUT_S="3",
        GIC_HOLDPOINTS="after_acks@2",
        GIC_HOLD_DIR=str(hold),
        GIC_HOLD_TIMEOUT_S="120",
    )
    log = tmp_path / "driver.log"
    command = [sys.executable, "-m", "gic_runtime.cli.driver_process", "--", "spark-submit"]
    command += ["--master", "local[2]", "--conf", "spark.ui.enabled=false"]
    command += ["--conf", "spark.sql.shuffle.partitions=2", str(APP)]
    launch = Launch([*command, *app_args(tmp_path, "1 second")], env, log)
    wait_until(
        (hold / "after_acks@2.held").exists,
        timeout=240,
        on_timeout=lambda _: AssertionError(log_tail(log, 40)),
        check=launch.alive,
        interval=0.1,
    )

    code, took = launch.terminate(timeout=60)

    print(f"entry process: SIGTERM to exit {took:.1f} s (stop timeout 3 s)")
    assert code == 128 + signal.SIGTERM, log_tail(log, 40)
    assert took < 3 + 20, log_tail(log, 40)  # within the grace period the pod gets
    assert "abandoning it" in log.read_text()
    assert checkpoint_ids(env["GIC_STORAGE"])[-1] == 1  # batch 2 never committed
    assert_stopped_and_collectable(tmp_path, env, "stopped by SIGTERM")
    release = {k: v for k, v in env.items() if not k.startswith("GIC_HOLD")}
    assert_exactly_once(tmp_path, release, log)
