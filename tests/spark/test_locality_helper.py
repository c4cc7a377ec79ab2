"""The placement helper jar: found, built once per source digest, errors that say what
to do (spark.locality). Its scheduling effect is tested on a real cluster in
test_multi_executor.py."""

from __future__ import annotations

import zipfile
from pathlib import Path

import pytest

from gic_runtime.errors import ConfigurationError
from gic_runtime.spark import locality


def test_the_jar_is_built_once_into_the_cache_and_holds_both_classes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(locality.JAR_ENV, raising=False)
    monkeypatch.setenv(locality.CACHE_ENV, str(tmp_path))
    assert locality.placement_jar(build=False) is None
    jar = locality.placement_jar()
    assert jar is not None and jar.parent == tmp_path and jar.name == locality.jar_name()
    names = set(zipfile.ZipFile(jar).namelist())
    assert {"io/gic/spark/PinnedRDD.class", "io/gic/spark/Placement.class"} <= names
    built = jar.stat().st_mtime_ns
    assert locality.placement_jar() == jar and jar.stat().st_mtime_ns == built


def test_a_configured_jar_that_is_missing_is_a_clear_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(locality.JAR_ENV, str(tmp_path / "nope.jar"))
    with pytest.raises(ConfigurationError, match="GIC_PLACEMENT_JAR"):
        locality.placement_jar()


def test_without_a_jdk_there_is_no_jar_and_no_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(locality.JAR_ENV, raising=False)
    monkeypatch.setenv(locality.CACHE_ENV, str(tmp_path))
    monkeypatch.setattr(locality.shutil, "which", lambda name: None)
    assert locality.placement_jar() is None
    with pytest.raises(ConfigurationError, match="JDK"):
        locality.build_jar(tmp_path / "x.jar")


def test_locations_name_their_executor_and_local_masters_pin_nothing() -> None:
    assert locality.location_executor("executor_10.1.2.3_17") == "17"
    assert locality.location_executor("") == ""
    assert locality.is_local_master("local[2]") and locality.is_local_master("local")
    assert not locality.is_local_master("local-cluster[2,1,1024]")
    assert not locality.is_local_master("k8s://https://api:6443")
