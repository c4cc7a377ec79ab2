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
``state_sweep``
    :data:`KEYED_PAYLOAD`: a keyed count plus a fixed-size payload per key, the state's
    size set by the key count and ``value_bytes`` (:mod:`bench.streaming.state_sweep`).
    A load phase writes every key first: rows with ``value < keys`` have ``key = value``
    (so the first ``ceil(keys / rows_per_batch)`` batches write every key once), later
    rows ``key = pmod(xxhash64(value), keys)``; ``payload`` is ``value_bytes`` hex
    characters of ``sha2(value || ':' || i, 512)`` for ``i = 0, 1, ...`` concatenated.
    State per key: ``count`` and ``max(payload)``. Spark baseline:
    ``groupBy(key).agg(count(*), max(payload))`` (Spark's own state stores, as W1); GIC:
    ``aggregate(count=count(), payload=max_("payload"))``; both emit ``key, count,
    payload`` for every key of the batch.
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
KEYED_PAYLOAD = "keyed_payload"
KINDS = (KEYED_COUNT, EVENT_LOG, SESSIONS, WINDOWED_COUNT, TTL_CHURN, KEYED_PAYLOAD)
"""Workload kinds; the event-time ones (:mod:`bench.streaming.timed_workloads`) are
:data:`SESSIONS`, :data:`WINDOWED_COUNT` and :data:`TTL_CHURN`."""
TIMED_KINDS = (SESSIONS, WINDOWED_COUNT, TTL_CHURN)
SHA512_HEX = 128
"""Hex characters of one ``sha2(..., 512)``."""
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
    value_bytes: int = 0
    """:data:`KEYED_PAYLOAD` only: bytes of the payload each key keeps (0 otherwise)."""

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise BenchmarkError(f"unknown workload kind {self.kind!r}; use one of {KINDS}")
        if min(self.keys, self.rows_per_batch, self.partitions) < 1:
            raise BenchmarkError(f"workload sizes must be positive, got {self}")
        if (self.kind == KEYED_PAYLOAD) != (self.value_bytes > 0):
            raise BenchmarkError(
                f"value_bytes must be positive for {KEYED_PAYLOAD} and 0 otherwise, got {self}"
            )

    @property
    def load_batches(self) -> int:
        """Batches of the load phase (:data:`KEYED_PAYLOAD`: every key written once)."""
        return -(-self.keys // self.rows_per_batch) if self.kind == KEYED_PAYLOAD else 0

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        if not self.value_bytes:  # unchanged for the workloads without a payload
            del data["value_bytes"]
        return data

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
        if self.kind in TIMED_KINDS:
            from bench.streaming.timed_workloads import describe

            return {**base, **describe(self)}
        if self.kind == KEYED_PAYLOAD:
            base["key"] = (
                f"value when value < {self.keys} (the load phase, batches 0.."
                f"{self.load_batches - 1}), else pmod(xxhash64(value), {self.keys}) as long"
            )
            base["payload"] = (
                f"the first {self.value_bytes} characters of sha2(value || ':' || i, 512) "
                f"concatenated for i = 0..{payload_hashes(self.value_bytes) - 1}"
            )
            base["state"] = (
                f"per key: count (long) and max(payload) ({self.value_bytes} characters); "
                f"about {self.keys} x (8 + 8 + {self.value_bytes}) bytes"
            )
            base["spark_baseline"] = (
                "groupBy(key).agg(count(*) as count, max(payload) as payload), update mode"
            )
            base["gic"] = 'aggregate(count=count(), payload=max_("payload"))'
            base["output"] = "key, count, payload: per key of the batch, its new values"
            return base
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


def payload_hashes(value_bytes: int) -> int:
    """``sha2(..., 512)`` calls that make a payload of ``value_bytes`` characters."""
    return max(1, -(-value_bytes // SHA512_HEX))


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
    if spec.kind == KEYED_PAYLOAD:
        value = sf.col("value")
        loaded = sf.when(value < sf.lit(spec.keys), value).otherwise(
            sf.pmod(sf.xxhash64(value), sf.lit(spec.keys))
        )
        text = value.cast("string")
        hashes = [
            sf.sha2(sf.concat(text, sf.lit(f":{i}")), 512)
            for i in range(payload_hashes(spec.value_bytes))
        ]
        payload = sf.substring(sf.concat(*hashes), 1, spec.value_bytes).alias("payload")
        return rate.select(value, loaded.cast("long").alias("key"), payload)
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
    if spec.kind == KEYED_PAYLOAD:
        return grouped.agg(sf.count(sf.lit(1)).alias("count"), sf.max("payload").alias("payload"))
    return grouped.agg(sf.collect_list("payload").alias("events"))
