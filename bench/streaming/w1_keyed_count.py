"""W1, keyed count: GIC against Spark's three state stores, 500,000 keys, 100,000 rows
per batch, in interleaved rounds.

Systems (:mod:`bench.streaming.systems`), every one writing its output (``key, count``
per key of the batch) to Parquet, fingerprinted:

``spark_hdfs`` / ``spark_rocksdb`` / ``spark_rocksdb_changelog``
    ``groupBy(key).count()`` in update mode on each of Spark's state stores (the
    baselines, :mod:`bench.streaming.spark_stores`).
``gic``
    ``.aggregate(count=count())`` with incremental checkpoints (the contender).
``gic_no_changelog``
    the same with a full snapshot of every bucket at every checkpoint, in ``local[2]``
    only: what incremental checkpoints save, shown beside the comparison.
``spark_no_state``
    the same query without state (each batch counted alone, no output): the floor under
    every system, shown beside; its rows/s over the best store's is the ratio a store
    whose state cost nothing would reach (``ceiling``, and ``reachable`` in the goals).

Method (:mod:`bench.streaming.repeats`): per mode (``local[2]`` and two one-core
executors by default; ``GIC_BENCH_MODES=...,cluster3`` adds three executors, recorded as
contention on two cores) :data:`~bench.streaming.repeats.ROUNDS` rounds with the systems
interleaved; medians and min-max spreads per system; GIC's rows/s over the best store's
of the same round. Goal: that ratio's median at least :data:`GOAL` in every mode; every
run's output identical. Commit time is the same for every system: from the end of
processing to the batch being durable, offset and commit logs included.

Run: ``.venv/bin/python -m bench w1_keyed_count`` (``GIC_BENCH_QUICK=1``: a smoke run).
Writes ``bench/results/w1_keyed_count.json`` and ``.png``.
"""

from __future__ import annotations

from bench.streaming import systems
from bench.streaming.repeats import run_comparison
from bench.streaming.workloads import keyed_count

GOAL = 1.5
SPARK_STORES = ("spark_hdfs", "spark_rocksdb", "spark_rocksdb_changelog")

COMPARISON = systems.gic_against(
    "w1_keyed_count",
    keyed_count,
    {name: systems.spark_store(name) for name in SPARK_STORES},
    goal=GOAL,
    floor=True,
)


def main() -> None:
    run_comparison(COMPARISON)


if __name__ == "__main__":
    main()
