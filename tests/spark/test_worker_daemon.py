"""GIC's sessions start their executors' Python workers from
:mod:`gic_runtime.spark.worker_daemon`, which imports ``pyspark.worker`` before it forks
and starts no thread doing so."""

from __future__ import annotations

import json
import sys

from pyspark.sql import SparkSession
from tests.support.processes import fresh_python

from gic_runtime.spark.session import WORKER_CONF

THREAD_STARTERS = ("numpy", "pyarrow", "pandas")


def _main_module(_: object) -> str:
    """Run in a Python worker: the module its process was started with."""
    main = sys.modules["__main__"]
    spec = getattr(main, "__spec__", None)
    return spec.name if spec is not None else "?"


def test_the_sessions_workers_are_forked_by_gics_daemon(spark: SparkSession) -> None:
    daemon = WORKER_CONF["spark.python.daemon.module"]
    assert spark.sparkContext.getConf().get("spark.python.daemon.module") == daemon
    started = spark.sparkContext.parallelize(range(4), 4).map(_main_module).collect()
    assert started == [daemon] * 4


def test_the_daemon_preloads_the_worker_and_starts_no_thread() -> None:
    code = (
        "import json, os, sys\n"
        f"import {WORKER_CONF['spark.python.daemon.module']}\n"
        "print(json.dumps({'threads': len(os.listdir('/proc/self/task')),"
        " 'worker': 'pyspark.worker' in sys.modules,"
        f" 'starters': [m for m in {THREAD_STARTERS!r} if m in sys.modules]}}))\n"
    )
    assert json.loads(fresh_python(code)) == {"threads": 1, "worker": True, "starters": []}
