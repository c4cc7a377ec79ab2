"""``gic demo`` as a user first runs it: ``.venv/bin/gic demo`` from a shell where the
virtual environment is not activated (its ``bin/`` not on ``PATH``, no
``PYSPARK_PYTHON``), and what happens when Spark's Python workers cannot import GIC."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

BIN = Path(sys.executable).parent
GIC = BIN / "gic"


def user_env(**extra: str) -> dict[str, str]:
    """The environment of a fresh shell: no GIC or Spark variables, no virtual env."""
    path = os.pathsep.join(
        p for p in os.environ.get("PATH", "/usr/bin:/bin").split(os.pathsep) if Path(p) != BIN
    )
    keep = {"HOME", "LANG", "LC_ALL", "TMPDIR", "JAVA_HOME", "USER"}
    env = {k: v for k, v in os.environ.items() if k in keep}
    return {**env, "PATH": path, **extra}


def _run_demo(
    tmp_path: Path, env: dict[str, str], timeout: float
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(GIC), "demo", "--dir", str(tmp_path / "demo")],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


@pytest.mark.slow
def test_demo_runs_from_a_shell_without_the_environment(tmp_path: Path) -> None:
    done = _run_demo(tmp_path, user_env(), timeout=600)

    assert done.returncode == 0, (done.stdout, done.stderr[-4000:])
    assert done.stderr == ""  # Spark's start-up lines and log went to its log file
    lines = done.stdout.splitlines()
    log = tmp_path / "demo" / "spark.log"
    assert f"starting local Spark (local[2], 4 partitions); its log: {log}" in lines
    assert log.is_file() and log.stat().st_size > 0
    storage = (tmp_path / "demo" / "storage").as_uri()
    # one line although stdout is a pipe: nothing wraps it at 80 columns
    assert f"inspect with: gic checkpoints --storage {storage} --job-id word-count-v2" in lines
    assert sum("  ok  " in line for line in lines) == 4


@pytest.mark.slow
def test_workers_that_cannot_import_gic_fail_the_demo_at_once_in_one_line(tmp_path: Path) -> None:
    python = tmp_path / "python-without-gic"  # this interpreter without site-packages
    python.write_text(f'#!/bin/sh\nexec "{sys.executable}" -S "$@"\n')
    python.chmod(0o755)

    started = time.monotonic()
    done = _run_demo(tmp_path, user_env(PYSPARK_PYTHON=str(python)), timeout=600)
    took = time.monotonic() - started

    assert done.returncode == 1, (done.stdout, done.stderr)
    [line] = [line for line in done.stderr.splitlines() if line.strip()]
    assert line.startswith("error: the stateful stage failed: ModuleNotFoundError: No module ")
    assert f"Spark's Python workers run {python} (PYSPARK_PYTHON)" in line
    assert line.endswith(f"(Spark's log: {tmp_path / 'demo' / 'spark.log'})")
    assert "requested stop-with-savepoint" not in done.stdout  # it did not wait for one
    assert took < 240, took  # Spark's start-up and one batch, not a 300 s wait
