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


ENV_APP = """
import json, os
print(json.dumps({k: os.environ.get(k) for k in (
    "GIC_JOB_ID", "PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON", "GIC_SPARK_LOG")}))
"""


def test_the_job_id_is_exported_only_when_given(gic: Any, tmp_path: Path) -> None:
    app = tmp_path / "env_app.py"
    app.write_text(ENV_APP)
    local = tmp_path / "local"

    unnamed = gic("run", str(app), "--local-dir", str(local))
    named = gic("run", str(app), "--job-id", "mine", "--local-dir", str(local))

    assert unnamed.exit_code == 0, unnamed.stderr
    env = _app_output(unnamed.stdout)
    assert env["GIC_JOB_ID"] is None  # GICJob.create("...") names the job after the app
    assert "gic run: job named after the app" in unnamed.stderr
    assert _app_output(named.stdout)["GIC_JOB_ID"] == "mine"
    assert "gic run: job mine," in named.stderr
    # this interpreter for Spark's Python, and Spark's output in a log under local_dir
    assert env["PYSPARK_PYTHON"] == env["PYSPARK_DRIVER_PYTHON"] == sys.executable
    log = Path(env["GIC_SPARK_LOG"])
    assert log.parent == local / "logs"
    assert log.name.startswith("env_app-") and log.suffix == ".log"
    assert f"Spark's log: {log}" in unnamed.stderr
    assert "GIC_SPARK_LOG" not in os.environ


def test_local_state_and_the_log_go_beside_a_local_storage_root(gic: Any, tmp_path: Path) -> None:
    app = tmp_path / "env_app.py"
    app.write_text(ENV_APP)
    storage = tmp_path / "project" / "gic-data"

    result = gic("run", str(app), "--storage", str(storage))

    assert result.exit_code == 0, result.stderr
    log = Path(_app_output(result.stdout)["GIC_SPARK_LOG"])
    assert log.parent == tmp_path / "project" / "gic-data-local" / "logs"
    assert f"Spark's log: {log}" in result.stderr
    assert not log.is_relative_to(storage)


def test_a_users_spark_log_and_interpreters_are_kept(gic: Any, tmp_path: Path) -> None:
    app = tmp_path / "env_app.py"
    app.write_text(ENV_APP)
    mine = {"GIC_SPARK_LOG": "/dev/stderr", "PYSPARK_DRIVER_PYTHON": "/opt/py"}

    result = gic("run", str(app), env=mine)

    assert result.exit_code == 0, result.stderr
    env = _app_output(result.stdout)
    assert env["GIC_SPARK_LOG"] == "/dev/stderr"
    assert env["PYSPARK_DRIVER_PYTHON"] == "/opt/py"
    assert env["PYSPARK_PYTHON"] == sys.executable


def test_the_runtimes_progress_lines_are_printed(gic: Any, tmp_path: Path) -> None:
    app = tmp_path / "logs.py"
    app.write_text(
        "import logging\n"
        "log = logging.getLogger('gic_runtime.spark.job')\n"
        "log.info('batch %d: %d rows in, checkpoint %d committed in %.0f ms', 3, 10, 3, 12.0)\n"
        "log.debug('not shown')\n"
        "logging.getLogger('gic_runtime.spark.driver').warning('a warning')\n"
        "logging.getLogger('elsewhere').info('not ours')\n"
    )
    import logging

    result = gic("run", str(app))

    assert result.exit_code == 0, result.stderr
    lines = gic.errors(result)[1:]
    assert lines == [
        "  batch 3: 10 rows in, checkpoint 3 committed in 12 ms",
        "  warning: a warning",
    ]
    assert logging.getLogger("gic_runtime").level == logging.NOTSET  # restored
    assert not logging.getLogger("gic_runtime").handlers


def test_a_worker_import_failure_is_one_line_with_what_to_do(gic: Any, tmp_path: Path) -> None:
    app = tmp_path / "fails.py"
    app.write_text(
        "import os\n"
        "from gic_runtime.errors import GICError\n"
        "with open(os.environ['GIC_SPARK_LOG'], 'w') as log:\n"
        "    log.write('java output')\n"
        'raise GICError("the stateful stage failed: ModuleNotFoundError: No module named "\n'
        "               \"'gic_runtime'\")\n"
    )
    local = tmp_path / "local"
    (local / "logs").mkdir(parents=True)

    result = gic(
        "run", str(app), "--local-dir", str(local), env={"PYSPARK_PYTHON": "/usr/bin/python3"}
    )

    assert result.exit_code == 1
    [line] = gic.errors(result)[1:]
    [log] = (local / "logs").iterdir()
    assert line == (
        "error: the stateful stage failed: ModuleNotFoundError: No module named "
        "'gic_runtime'; Spark's Python workers run /usr/bin/python3 (PYSPARK_PYTHON), which "
        "must import gic_runtime and the job's modules: point PYSPARK_PYTHON at an "
        f"interpreter with gic installed (this one is {sys.executable}) or unset it "
        f"(Spark's log: {log})"
    )
