"""What a task learns from its executor's environment (executor.environment)."""

from __future__ import annotations

from pathlib import Path

from gic_runtime.executor.environment import LOCAL_DIR_NAME, executor_id, resolve_local_dir

_LOG_URL = "http://127.0.0.1:4041/logPage/?appId=app-1&executorId=7&logType=stderr"


def test_the_executor_id_comes_from_kubernetes_then_the_log_url_then_local_mode() -> None:
    assert executor_id({"SPARK_EXECUTOR_ID": "3", "SPARK_LOG_URL_STDERR": _LOG_URL}) == "3"
    assert executor_id({"SPARK_LOG_URL_STDERR": _LOG_URL}) == "7"
    assert executor_id({"SPARK_LOG_URL_STDOUT": _LOG_URL.replace("=7", "=12")}) == "12"
    assert executor_id({}) == "driver"


def test_an_explicit_local_dir_is_used_and_made_absolute(tmp_path: Path) -> None:
    assert resolve_local_dir(str(tmp_path / "x"), {}) == tmp_path / "x"
    assert resolve_local_dir("rel", {}) == Path("rel").absolute()


def test_the_default_local_dir_is_the_executors_own_scratch_directory() -> None:
    env = {"SPARK_LOCAL_DIRS": "/data/exec-a,/data2/exec-a"}
    assert resolve_local_dir("", env) == Path("/data/exec-a") / LOCAL_DIR_NAME
    other = {"SPARK_LOCAL_DIRS": "/data/exec-b"}
    assert resolve_local_dir("", env) != resolve_local_dir("", other)


def test_without_spark_scratch_the_temp_directory_is_used() -> None:
    assert resolve_local_dir("", {}).name == LOCAL_DIR_NAME
