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
    Spark plumbing any system can reuse: the session (local or cluster mode), a progress
    listener, and running a streaming query for exactly N micro-batches.
``checkpoint_bytes``
    Bytes a checkpoint directory (or S3 prefix) gained per micro-batch; storage totals.
``spark_stores`` / ``s3a``
    The baselines: Spark's ``groupBy`` with each built-in state store provider, on local
    disk or on S3 through ``hadoop-aws``.
``gic_runner`` / ``gic_records``
    GIC's systems, and the per-batch records built from its reports and manifests.
``harness``
    The registry of systems, statistics, ratios against the best Spark store, goals,
    JSON result and plot of one run.
``modes``
    Cluster modes (``local[2]``, ``local-cluster``, standalone) and running a workload in
    each, with the overview across modes and the multi-executor goal.
``timed_workloads`` / ``gic_timed`` / ``spark_timed`` / ``spark_sessions`` / ``outputs``
    The event-time workloads (sessions, windowed count, TTL churn), GIC's and Spark's
    jobs for them, and output fingerprints with reference outputs.
``spark_event_log``
    W2's Spark baselines: ``transformWithState`` APIs appending to a list state.
``spark_processors``
    One ``StatefulProcessor`` for both of Spark's Python APIs (W2's and W3's baselines).
``systems``
    The systems of W1, W2 and W1 on S3 (each writing its output to Parquet).
``latency_proxy``
    An HTTP proxy holding every S3 request a set time (on :mod:`bench.http_relay`), and
    the measurement of what it added.
``repeats`` / ``plots_timed``
    Comparisons repeated in interleaved rounds (per cluster mode, or per section: a mode
    plus what surrounds it): medians, spreads, per-round ratios, goals, output agreement,
    and their plot.
``w1_keyed_count`` / ``w2_event_log`` / ``w1_s3`` / ``soak`` / ``recovery`` /
``w3_sessions`` / ``w4_windowed_count`` / ``w5_ttl_soak``
    Entry points (``python -m bench NAME``, or ``python -m bench.streaming.NAME``).
"""
