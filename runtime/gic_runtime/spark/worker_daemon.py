"""The Python daemon of a GIC job's executors (``spark.python.daemon.module``):
PySpark's own daemon, with ``pyspark.worker`` imported once, before it forks workers.

An executor's Python processes import pyspark from ``pyspark.zip``, and Python compiles
a module imported from a zip at every import (it caches no bytecode there). PySpark's
daemon imports ``pyspark.worker`` only after each fork, so every new worker compiled it
again: about 0.7 s before a worker's first task (docs/architecture.md §13.3), paid on a
job's first batch, after a restart and after an executor is lost. Imported here, it is
compiled once per executor and every forked worker starts with it.

Invariant: nothing imported here starts a thread. ``fork`` copies only the calling
thread, so a library whose import starts threads (numpy, pyarrow and pandas do) would
leave its workers with a pool that is not there; PySpark's daemon imports its worker
module after the fork for that reason. ``pyspark.worker`` imports none of them
(``tests/spark/test_worker_daemon.py`` checks both).
"""

from __future__ import annotations

import pyspark.worker  # noqa: F401  (the preload: see the module docstring)
from pyspark import daemon


def main() -> None:
    """Run PySpark's daemon: it serves the executor until the executor stops it."""
    daemon.manager()


if __name__ == "__main__":
    main()
