"""W2, per-key event log: every key's 64-byte events appended to a list state, GIC
against Spark's ``transformWithState`` APIs doing the same, in interleaved rounds.

100,000 keys, 100,000 events per batch, so the state grows by ~6.4 MB of payload per
batch (:mod:`bench.streaming.workloads`). Systems, every one appending each key's events
of the batch to the key's list state in one call and emitting ``key, appended`` to
Parquet, fingerprinted:

``spark_tws_row`` / ``spark_tws_pandas``
    ``transformWithState`` (Row API) and ``transformWithStateInPandas`` with a
    ``ListState`` on RocksDB (the baselines, :mod:`bench.streaming.spark_event_log`).
``spark_tws_row_changelog``
    the Row API on RocksDB with changelog checkpointing (a baseline too).
``gic``
    ``process_batches`` appending to a list state
    (:func:`bench.streaming.gic_runner.append_events`, the contender).
``gic_no_changelog``
    the same with full snapshots at every checkpoint, ``local[2]`` only, shown beside.

Method and goal as W1's (:mod:`bench.streaming.w1_keyed_count`): rounds with the systems
interleaved, GIC's rows/s over the best baseline's of the same round, median at least
:data:`GOAL` in every mode; identical outputs; :data:`BATCHES` warm-up and measured
batches. Run:
``.venv/bin/python -m bench w2_event_log`` (``GIC_BENCH_QUICK=1``: a smoke run). Writes
``bench/results/w2_event_log.json`` and ``.png``.
"""

from __future__ import annotations

from bench.streaming import systems
from bench.streaming.repeats import run_comparison
from bench.streaming.workloads import event_log

GOAL = 1.5
BATCHES = (3, 10)
"""Warm-up and measured batches of a full run: Spark's APIs call Python once per key
(about 63,000 keys per batch), so a batch takes them tens of seconds."""
SPARK_APIS = ("spark_tws_row", "spark_tws_pandas", "spark_tws_row_changelog")

COMPARISON = systems.gic_against(
    "w2_event_log",
    event_log,
    {name: systems.spark_event_log(name) for name in SPARK_APIS},
    goal=GOAL,
    batches=BATCHES,
)


def main() -> None:
    run_comparison(COMPARISON)


if __name__ == "__main__":
    main()
