"""GIC runtime: keyed state with a durable changelog, checkpoints and savepoints.

The public face, by who uses it:

* a streaming job: :mod:`gic_runtime.spark` (``GICJob``, ``GICQuery``, the aggregates
  ``count``/``sum_``/``min_``/``max_``, ``KeyState``; the only part importing pyspark);
* the ``gic`` command: :mod:`gic_runtime.cli`;
* settings and storage: :class:`gic_runtime.config.GICSettings`,
  :mod:`gic_runtime.storage` (``StoreResolver``, ``open_store``), reading output with
  :func:`gic_runtime.sinks.read_file_sink`;
* an integration with another engine: the executor side
  :class:`gic_runtime.executor.StateTask` and the driver side
  :class:`gic_runtime.driver.CheckpointTimeline` (docs/architecture.md §2.8);
* tests of jobs built on GIC: :mod:`gic_runtime.testing` (fakes at the seams).

Everything else is internal and may change; docs/architecture.md §1 draws its layers.
Importing this package imports nothing else, so the engine-agnostic core stays free of
pyspark.
"""
