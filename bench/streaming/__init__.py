"""Streaming benchmarks: GIC against Spark's own state stores, on identical micro-batches.

Layout (one concept per module):

``workloads``
    The workloads as deterministic streaming sources (``rate-micro-batch``) plus the
    Spark baseline aggregation of each.
``records``
    Values exchanged between the harness and a system run: parameters, one record per
    micro-batch, the result of one run (all JSON round-trippable).
``runner``
    Runs ONE system in a fresh subprocess (fresh JVM) and returns its records.
``spark_query``
    Spark plumbing any system can reuse: the session, a progress listener, and running a
    streaming query for exactly N micro-batches.
``checkpoint_bytes``
    Bytes a checkpoint directory gained per micro-batch.
``spark_stores``
    The baselines: Spark's ``groupBy`` with each built-in state store provider.
``harness``
    The registry of systems, statistics, ratios against the best Spark store, goals,
    JSON result and plot.
``w1_keyed_count`` / ``w2_event_log``
    Entry points (``python -m bench.streaming.w1_keyed_count``, ``python -m bench
    w1_keyed_count``).
"""
