"""``gic run``: validation before Spark starts, and the app's environment.

Running real Spark apps is covered by the Spark tests; here the apps are plain Python.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest

APP = """
import json, os, sys
import helper  # a module next to the app
print(json.dumps({
    "name": __name__,
    "argv": sys.argv,
    "helper": helper.VALUE,
    "env": {k: v for k, v in os.environ.items()
            if k.startswith("GIC_") or k in ("SPARK_LOCAL_IP", "PYSPARK_PYTHON")},
}))
"""


@pytest.fixture
def app(tmp_path: Path) -> Path:
    directory = tmp_path / "apps"
    directory.mkdir()
    (directory / "helper.py").write_text("VALUE = 42\n")
    path = directory / "job.py"
    path.write_text(APP)
    return path


def _app_output(stdout: str) -> Any:
    [line] = [line for line in stdout.splitlines() if line.startswith("{")]
    return json.loads(line)


def test_the_app_runs_as_main_with_the_settings_in_its_environment(
    gic: Any, app: Path, tmp_path: Path
) -> None:
    storage = tmp_path / "data"

    result = gic(
        "run", str(app), "--storage", str(storage), "--job-id", "word-count",
        "--buckets", "16", "--max-batches", "3", "--local-dir", str(tmp_path / "local"),
        "--", "--input", "in/", "-v",
    )  # fmt: skip

    assert result.exit_code == 0, result.stderr
    out = _app_output(result.stdout)
    assert out["name"] == "__main__"
    assert out["argv"] == [str(app), "--input", "in/", "-v"]
    assert out["helper"] == 42
    env = out["env"]
    assert env["GIC_JOB_ID"] == "word-count"
    assert env["GIC_STORAGE"] == storage.as_uri()
    assert env["GIC_NUM_BUCKETS"] == "16"
    assert env["GIC_MAX_BATCHES"] == "3"
    assert env["GIC_LOCAL_DIR"] == str(tmp_path / "local")
    assert env["GIC_RESTORE_SOURCE"] == ""  # unset settings are exported empty
    assert env["SPARK_LOCAL_IP"] == "127.0.0.1"
    assert env["PYSPARK_PYTHON"] == sys.executable
    # what the app's GICJob.create() reads back is exactly what was validated here
    from gic_runtime.config import GICSettings

    settings = GICSettings.from_env(env)
    assert (settings.job_id, settings.num_buckets, settings.max_batches) == ("word-count", 16, 3)
    # the process is left as it was
    assert "GIC_JOB_ID" not in os.environ
    assert "SPARK_LOCAL_IP" not in os.environ
    assert str(app.parent) not in sys.path


def test_restore_options_and_existing_spark_variables(gic: Any, app: Path, tmp_path: Path) -> None:
    source = tmp_path / "savepoints" / "sp-1"

    result = gic(
        "run", str(app), "--restore", str(source), "--restore-mode", "claim",
        env={"PYSPARK_PYTHON": "/opt/python", "GIC_JOB_ID": "env-job"},
    )  # fmt: skip

    assert result.exit_code == 0, result.stderr
    env = _app_output(result.stdout)["env"]
    assert env["GIC_RESTORE_SOURCE"] == source.as_uri()
    assert env["GIC_RESTORE_MODE"] == "claim"
    assert env["GIC_JOB_ID"] == "env-job"
    assert env["PYSPARK_PYTHON"] == "/opt/python"


def test_a_missing_app_file_is_one_line(gic: Any, tmp_path: Path) -> None:
    missing = tmp_path / "nope.py"

    result = gic("run", str(missing))

    assert result.exit_code == 1
    [line] = gic.errors(result)
    assert line.startswith(f"error: job file {missing} does not exist: pass the path")


def test_bad_settings_fail_before_the_app_starts(gic: Any, tmp_path: Path) -> None:
    marker = tmp_path / "started"
    app = tmp_path / "job.py"
    app.write_text(f"open({str(marker)!r}, 'w').close()\n")

    bad_mode = gic("run", str(app), "--restore", "sp", "--restore-mode", "sideways")
    bad_job = gic("run", str(app), "--job-id", "Not_Valid!")
    mode_alone = gic("run", str(app), "--restore-mode", "claim")

    for result in (bad_mode, bad_job, mode_alone):
        assert result.exit_code == 1
        assert len(gic.errors(result)) == 1, result.stderr
    [line] = gic.errors(bad_mode)
    assert "option --restore-mode = 'sideways'" in line
    assert "'claim' or 'no-claim'" in line
    assert "option --job-id = 'Not_Valid!'" in gic.errors(bad_job)[0]
    assert "--restore-mode was given without --restore" in gic.errors(mode_alone)[0]
    assert not marker.exists()


def test_the_apps_exit_status_and_errors_pass_through(gic: Any, tmp_path: Path) -> None:
    exits = tmp_path / "exits.py"
    exits.write_text("import sys\nsys.exit(3)\n")
    fails = tmp_path / "fails.py"
    fails.write_text(
        "from gic_runtime.errors import RestoreError\n"
        "raise RestoreError('the source is gone:\\nrestore from another savepoint')\n"
    )

    assert gic("run", str(exits)).exit_code == 3
    result = gic("run", str(fails))
    assert result.exit_code == 1
    assert gic.errors(result)[-1] == ("error: the source is gone: restore from another savepoint")
