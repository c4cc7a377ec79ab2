"""The error contract of every command, settings sources, and the module entry point."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from gic_runtime.errors import GICError


def test_usage_errors_are_one_line_with_status_2(gic: Any) -> None:
    for args in (["savepoint", "--format", "zip"], ["frobnicate"], [], ["describe"]):
        result = gic(*args)
        assert result.exit_code == 2, args
        [line] = gic.errors(result)
        assert line.startswith("error: "), line
        assert "--help" in line
    [line] = gic.errors(gic("savepoint", "--format", "zip"))
    assert "'zip' is not one of 'native', 'canonical'" in line


def test_help_works_for_every_command(gic: Any) -> None:
    for command in ("run", "savepoint", "jobs", "checkpoints", "savepoints", "describe", "gc"):
        result = gic(command, "--help")
        assert result.exit_code == 0, result.stderr
        assert "--storage" in result.stdout
    assert "pending_requests" in gic("checkpoints", "--help").stdout
    assert "--version" in gic("--help").stdout


def test_debug_shows_the_exception(gic: Any, tmp_path: Path) -> None:
    missing = str(tmp_path / "missing")
    result = gic("describe", missing, env={"GIC_DEBUG": "1"})

    assert isinstance(result.exception, GICError)
    quiet = gic("describe", missing)
    assert quiet.exit_code == 1
    assert not isinstance(quiet.exception, GICError)
    assert "Traceback" not in quiet.stderr


def test_credentials_never_reach_the_output(gic: Any, tmp_path: Path) -> None:
    secret = "wJalrXUtnFEMIK7MDENGbPxRfiCYzz"
    result = gic("describe", str(tmp_path / secret), env={"AWS_SECRET_ACCESS_KEY": secret})

    assert result.exit_code == 1
    assert secret not in result.stderr + result.stdout
    assert "***" in result.stderr


def test_settings_from_a_config_file(gic: Any, storage: Any, tmp_path: Path) -> None:
    storage.run_job("filed", range(1, 2))
    config = tmp_path / "gic.json"
    config.write_text(json.dumps({"storage": storage.root, "job_id": "filed"}))

    doc = gic.json("checkpoints", "--config", str(config))
    from_env = gic("checkpoints", "--json", env={"GIC_CONFIG_FILE": str(config)})

    assert [c["id"] for c in doc["checkpoints"]] == [1]
    assert json.loads(from_env.stdout) == doc
    config.write_text(json.dumps({"storage": storage.root, "jobid": "typo"}))
    result = gic("checkpoints", "--config", str(config))
    assert result.exit_code == 1
    [line] = gic.errors(result)
    assert "key 'jobid': not a setting" in line


def test_the_module_runs_without_importing_spark(storage: Any) -> None:
    storage.run_job("wc", range(1, 2))
    code = (
        "import sys, runpy\n"
        "sys.argv = ['gic', 'checkpoints', '--json', '--storage', sys.argv[1], '--job-id', 'wc']\n"
        "try:\n"
        "    runpy.run_module('gic_runtime.cli', run_name='__main__')\n"
        "except SystemExit as exc:\n"
        "    assert exc.code == 0, exc.code\n"
        "loaded = sorted(m for m in sys.modules if m.split('.')[0] in ('pyspark', 'py4j'))\n"
        "assert not loaded, loaded\n"
        "assert 'gic_runtime.spark' not in sys.modules\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, storage.root],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )

    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["checkpoints"][0]["id"] == 1
