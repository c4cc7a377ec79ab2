"""The committed list of Spark settings matches the locked PySpark: same version in its header
and the same keys as a fresh listing from PySpark's jars (regenerate with
``make spark-settings``)."""

from __future__ import annotations

import importlib.metadata
import re
from pathlib import Path

import pytest

from gic_operator import spark_settings, spark_settings_gen

ROOT = Path(__file__).resolve().parents[2]


def locked_pyspark() -> str:
    lock = (ROOT / "requirements" / "dev.lock").read_text(encoding="utf-8")
    found = re.search(r"^pyspark==(\S+)", lock, re.MULTILINE)
    assert found is not None
    return found.group(1)


def test_the_list_names_the_locked_pyspark() -> None:
    assert spark_settings.pyspark_version() == locked_pyspark()
    assert importlib.metadata.version("pyspark") == locked_pyspark()


def test_the_list_is_package_data() -> None:
    pyproject = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    assert '"spark_settings.txt"' in pyproject
    assert spark_settings.DATA_FILE.is_file()


@pytest.fixture(scope="module")
def fresh() -> str:
    """A listing from the installed PySpark's jars (one JVM run)."""
    return spark_settings_gen.generate()


@pytest.mark.slow
def test_the_committed_list_equals_a_fresh_listing(fresh: str) -> None:
    committed = spark_settings.DATA_FILE.read_text(encoding="utf-8")
    assert committed == fresh, f"stale {spark_settings.DATA_FILE}; run make spark-settings"


@pytest.mark.slow
def test_check_names_a_stale_file_and_write_fixes_it(
    fresh: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(spark_settings_gen, "generate", lambda: fresh)
    stale = tmp_path / "spark_settings.txt"
    stale.write_text(spark_settings.header("0.0.0") + "spark.sql.shuffle.partitions\n")
    assert spark_settings_gen.main(["--check", "--out", str(stale)]) == 1
    assert "make spark-settings" in capsys.readouterr().err
    assert spark_settings_gen.main(["--out", str(stale)]) == 0
    assert spark_settings_gen.main(["--check", "--out", str(stale)]) == 0
