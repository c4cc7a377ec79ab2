"""The streaming workloads, as deterministic sources every system reads identically.

Both read Spark's built-in ``rate-micro-batch`` source: micro-batch ``b`` holds exactly the
rows ``value = b * rows_per_batch ... (b + 1) * rows_per_batch - 1`` over ``partitions``
input partitions, whatever the trigger timing, so every system (and every rerun) sees the
same batches. Keys and payloads are pure functions of ``value``:

``w1_keyed_count``
    ``key = pmod(xxhash64(value), keys)`` as a **long**; state is one count per key.
    A long key was chosen over a string: it is what a keyed count over ids looks like,
    it keeps the key encoding (Spark ``UnsafeRow`` vs. GIC key bytes) out of the
    comparison, and the state size is dominated by the key space, not key width.
    Spark baseline: ``groupBy(key).count()``.
``w2_event_log``
    ``key`` as above over a smaller key space, ``payload`` a 64-character string
    (``lpad(value, 12, '0') || ':' || sha2(value, 256)`` cut to 64); state is the list of
    every payload seen per key, so it grows by ``rows_per_batch`` events per batch.
    Spark baseline (W2): ``transformWithState`` / ``transformWithStateInPandas``
    appending each key's events to a ``ListState`` and emitting ``key, appended``, as GIC
    does (:mod:`bench.streaming.spark_event_log`). :func:`spark_baseline`'s
    ``groupBy(key).agg(collect_list(payload))`` rewrites a key's whole list whenever the
    key is updated and emits it; it is not W2's baseline.

Spark's ``xxhash64`` uses seed 42, so keys are stable across Spark versions and runs.
The source frame has columns ``value`` (long, unique per row), ``key`` (long) and, for
the event log, ``payload`` (string).

pyspark is imported only inside the functions that need it, so the harness process
never loads it. Specs are immutable values, safe to share between threads.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from bench.streaming.records import BenchmarkError

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

KEYED_COUNT = "keyed_count"
EVENT_LOG = "event_log"
SESSIONS = "sessions"
WINDOWED_COUNT = "windowed_count"
TTL_CHURN = "ttl_churn"
KINDS = (KEYED_COUNT, EVENT_LOG, SESSIONS, WINDOWED_COUNT, TTL_CHURN)
"""Workload kinds; the event-time ones (:mod:`bench.streaming.timed_workloads`) are the
last three."""
PAYLOAD_CHARS = 64


@dataclass(frozen=True)
class WorkloadSpec:
    """One workload at one size."""

    name: str
    """Benchmark name; also the result file's name (``bench/results/<name>.json``)."""
    kind: str
    """One of :data:`KINDS`."""
    keys: int
    """Size of the key space."""
    rows_per_batch: int
    """Rows in every micro-batch (``rate-micro-batch`` ``rowsPerBatch``)."""
    partitions: int
    """Input partitions and shuffle partitions (``spark.sql.shuffle.partitions``)."""

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise BenchmarkError(f"unknown workload kind {self.kind!r}; use one of {KINDS}")
        if min(self.keys, self.rows_per_batch, self.partitions) < 1:
            raise BenchmarkError(f"workload sizes must be positive, got {self}")

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> WorkloadSpec:
        return cls(**data)

    def describe(self) -> dict[str, Any]:
        """What the result JSON says about the workload."""
        base: dict[str, Any] = {
            **self.to_json(),
            "source": (
                f"rate-micro-batch, rowsPerBatch={self.rows_per_batch}, "
                f"numPartitions={self.partitions}: batch b holds value in "
                f"[b*{self.rows_per_batch}, (b+1)*{self.rows_per_batch})"
            ),
            "key": f"pmod(xxhash64(value), {self.keys}) as long (Spark xxhash64, seed 42)",
        }
        if self.kind not in (KEYED_COUNT, EVENT_LOG):
            from bench.streaming.timed_workloads import describe

            return {**base, **describe(self)}
        if self.kind == KEYED_COUNT:
            base["state"] = "one count per key (value state)"
            base["spark_baseline"] = "groupBy(key).count(), update output mode"
            base["output"] = "key, count: per key of the batch, its count so far"
        else:
            base["payload"] = (
                f"substring(lpad(cast(value as string), 12, '0') || ':' || "
                f"sha2(cast(value as string), 256), 1, {PAYLOAD_CHARS}) "
                f"({PAYLOAD_CHARS} characters)"
            )
            base["state"] = "every payload seen per key, in arrival order (list state)"
            base["spark_baseline"] = (
                "transformWithState (Row API) / transformWithStateInPandas on RocksDB: each "
                "key's events of the batch appended to a ListState in one call, the list "
                "never read; output key, appended (what GIC's W2 emits)"
            )
            base["output"] = "key, appended: per key of the batch, how many events it appended"
        return base


def keyed_count(quick: bool = False) -> WorkloadSpec:
    """W1: keyed count, 500,000 keys, 100,000 rows per batch, 4 partitions."""
    if quick:
        return WorkloadSpec("w1_keyed_count", KEYED_COUNT, 20_000, 10_000, 4)
    return WorkloadSpec("w1_keyed_count", KEYED_COUNT, 500_000, 100_000, 4)


def event_log(quick: bool = False) -> WorkloadSpec:
    """W2: per-key event log, 100,000 keys, 100,000 rows (64-byte events) per batch."""
    if quick:
        return WorkloadSpec("w2_event_log", EVENT_LOG, 10_000, 10_000, 4)
    return WorkloadSpec("w2_event_log", EVENT_LOG, 100_000, 100_000, 4)


def source(spark: SparkSession, spec: WorkloadSpec) -> DataFrame:
    """The workload's streaming input: ``value``, ``key`` and (event log) ``payload``."""
    from pyspark.sql import functions as sf

    rate = (
        spark.readStream.format("rate-micro-batch")
        .option("rowsPerBatch", spec.rows_per_batch)
        .option("numPartitions", spec.partitions)
        .load()
    )
    key = sf.pmod(sf.xxhash64(sf.col("value")), sf.lit(spec.keys)).cast("long").alias("key")
    if spec.kind == KEYED_COUNT:
        return rate.select(sf.col("value"), key)
    text = sf.col("value").cast("string")
    payload = sf.substring(
        sf.concat(sf.lpad(text, 12, "0"), sf.lit(":"), sf.sha2(text, 256)), 1, PAYLOAD_CHARS
    ).alias("payload")
    return rate.select(sf.col("value"), key, payload)


def spark_baseline(stream: DataFrame, spec: WorkloadSpec) -> DataFrame:
    """Spark's own stateful aggregation of the workload (run in update output mode)."""
    from pyspark.sql import functions as sf

    grouped = stream.groupBy("key")
    if spec.kind == KEYED_COUNT:
        return grouped.count()
    return grouped.agg(sf.collect_list("payload").alias("events"))
