"""W4, a one-minute tumbling count per key over event time, with a watermark.

GIC's ``window(tumbling("1 minute"), n=count())`` (``gic_window``) against Spark's native
``withWatermark("ts", "10 seconds").groupBy(window(ts, "1 minute"), key).count()`` in
append mode on its HDFS-backed store (``spark_hdfs``, the default) and on RocksDB
(``spark_rocksdb``); every system writes each window once, when the watermark passes its
end, to Parquet (:mod:`bench.streaming.timed_workloads`: 300,000 keys, 100,000 rows per
batch, event time advancing 10 s per batch, so a window closes every 6 batches).

Goal (per mode, ``local[2]`` and two executors): GIC's rows/s at least :data:`GOAL` times
the faster Spark store's in the same round, median over the rounds; identical window
counts in every run (``outputs``). Quick mode measures :data:`QUICK_MEASURED` batches so
that windows close. Run: ``.venv/bin/python -m bench w4_windowed_count``
(``GIC_BENCH_QUICK=1``: a smoke run). Writes ``bench/results/w4_windowed_count.json`` and
``.png``.
"""

from __future__ import annotations

from bench.streaming.repeats import Comparison, run_comparison
from bench.streaming.timed_workloads import windowed_count
from bench.streaming.w3_sessions import gic_system, spark_system

GOAL = 1.0
QUICK_MEASURED = 8

COMPARISON = Comparison(
    name="w4_windowed_count",
    workload=windowed_count,
    systems={
        "gic_window": gic_system("gic_window", processor="window"),
        "spark_hdfs": spark_system("spark_hdfs"),
        "spark_rocksdb": spark_system("spark_rocksdb"),
    },
    baselines=("spark_hdfs", "spark_rocksdb"),
    contenders=("gic_window",),
    goal=GOAL,
    quick_measured=QUICK_MEASURED,
)


def main() -> None:
    run_comparison(COMPARISON)


if __name__ == "__main__":
    main()
