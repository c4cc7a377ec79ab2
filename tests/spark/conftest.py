"""Fixtures for tests on real PySpark (``local[2]``, 4 shuffle partitions)."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator

import pytest

os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)

from pyspark.sql import SparkSession

from gic_runtime.spark import local_spark


@pytest.fixture(scope="session")
def spark() -> Iterator[SparkSession]:
    session = local_spark("gic-tests", partitions=4)
    yield session
    session.stop()
