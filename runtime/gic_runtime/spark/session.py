"""Spark sessions for GIC jobs: a local one (:func:`local_spark`, what ``gic run`` and
``gic demo`` use) and the one ``spark-submit`` configured (:func:`submitted_spark`, what
the operator's driver pods use); both carry :data:`REQUIRED_CONF`.

Thread-safety: call from the driver's main thread before any query starts.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from pyspark import SparkConf, SparkContext
from pyspark.java_gateway import launch_gateway
from pyspark.sql import SparkSession

from gic_runtime.logs import show_progress

__all__ = ["REQUIRED_CONF", "SPARK_LOG_ENV", "local_spark", "submitted_spark"]

#: Spark settings every GIC job needs (placement must not be rewritten by AQE).
REQUIRED_CONF = {"spark.sql.adaptive.coalescePartitions.enabled": "false"}
#: What :func:`local_spark` adds for a local session.
_LOCAL_CONF = {
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.execution.arrow.pyspark.enabled": "true",
    "spark.driver.memory": "2g",
}
#: File for the output of a JVM that :func:`local_spark` starts (the ``gic`` CLI sets it).
SPARK_LOG_ENV = "GIC_SPARK_LOG"


def local_spark(
    app_name: str, *, partitions: int = 4, cores: int = 2, log_file: str | None = None
) -> SparkSession:
    """A local Spark session suited to GIC jobs (``local[cores]``, no UI).

    The executors' Python workers run this interpreter unless ``PYSPARK_PYTHON`` is set
    (likewise ``PYSPARK_DRIVER_PYTHON``; ``SPARK_LOCAL_IP`` defaults to ``127.0.0.1``):
    they must import ``gic_runtime`` exactly as the driver does. When this call starts
    the JVM and ``log_file`` (else ``$GIC_SPARK_LOG``) names a file, the JVM's stdout
    and stderr (start-up lines, Spark's log at WARN, Python workers' tracebacks) go to
    that file instead of the terminal; without one, Spark logs at ERROR only.
    """
    for name in ("PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON"):
        os.environ.setdefault(name, sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    conf = SparkConf().setMaster(f"local[{cores}]").setAppName(app_name)
    conf.setAll([*_LOCAL_CONF.items(), ("spark.sql.shuffle.partitions", str(partitions))])
    conf.setAll(list(REQUIRED_CONF.items()))
    log = log_file or os.environ.get(SPARK_LOG_ENV) or None
    if log is not None and SparkContext._gateway is None:
        Path(log).parent.mkdir(parents=True, exist_ok=True)
        with open(log, "ab") as out:
            # pyspark's own launcher, with the JVM's output sent to the file
            popen = {"stdout": out, "stderr": out}
            gateway = launch_gateway(conf, popen_kwargs=popen)  # type: ignore[no-untyped-call]
        SparkContext(conf=conf, gateway=gateway)
    spark = SparkSession.builder.config(conf=conf).getOrCreate()
    spark.sparkContext.setLogLevel("WARN" if log is not None else "ERROR")
    return spark


def submitted_spark(app_name: str) -> SparkSession:
    """The session of an app started by ``spark-submit``: master, resources and the
    user's ``--conf`` come from the submission; only :data:`REQUIRED_CONF` and Arrow are
    added (the operator's driver pods start jobs this way). GIC's progress lines go to
    stderr, next to Spark's log (:func:`~gic_runtime.logs.show_progress`)."""
    show_progress(sys.stderr)
    builder = SparkSession.builder.appName(app_name).config(
        "spark.sql.execution.arrow.pyspark.enabled", "true"
    )
    for key, value in REQUIRED_CONF.items():
        builder = builder.config(key, value)
    return builder.getOrCreate()
