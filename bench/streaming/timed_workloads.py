"""The event-time workloads (W3 sessions, W4 windowed count, W5 TTL churn) and their inputs.

Every one reads Spark's ``rate-micro-batch`` source with event time advancing with the
batch: micro-batch ``b`` holds the rows ``value`` in ``[b * R, (b + 1) * R)`` (``R`` rows
per batch) and the source's ``timestamp`` is ``START + b * ADVANCE`` (:data:`START_MS`,
:data:`ADVANCE_MS`). Each row's event time spreads over the batch's interval:

    ts = timestamp + pmod(value, ADVANCE_MS) milliseconds

so batch ``b``'s rows lie in ``[START + b * ADVANCE, START + (b + 1) * ADVANCE)``, every
batch is later than the one before, and with a watermark bound below ``ADVANCE`` no row
is ever late. Keys are pure functions of ``value`` (Spark ``xxhash64``, seed 42), so every
system and every rerun sees the same rows:

``sessions`` (W3)
    ``key = pmod(xxhash64(value), keys)``; a key's session closes :data:`SESSION_GAP_MS`
    after its last event (an event-time timer), emitting ``key, start, end, events``.
    The gap is at least one batch's advance, so a batch never splits a session by itself.
``windowed_count`` (W4)
    the same keys; a one-minute tumbling count per key, watermark bound
    :data:`WINDOW_WATERMARK`, each window written once when the watermark passes its end.
``ttl_churn`` (W5)
    ``key = b * shift + pmod(xxhash64(value), keys)`` with ``shift = keys //``
    :data:`LIFETIME_BATCHES`: ``keys`` keys are live at any time, each for about
    :data:`LIFETIME_BATCHES` batches, after which it never comes back. State is a count
    per key; with a TTL (:data:`TTL`, event time) a key's entry expires after it stops.

Pure values and the source builders; pyspark is imported inside the functions only.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from bench.streaming.records import BenchmarkError
from bench.streaming.workloads import SESSIONS, TTL_CHURN, WINDOWED_COUNT, WorkloadSpec

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

START_MS = 1_767_225_600_000
"""2026-01-01T00:00:00Z: event time of batch 0."""
ADVANCE_MS = 10_000
"""Event time per micro-batch (``advanceMillisPerBatch``)."""
SESSION_GAP_MS = 30_000
SESSION_WATERMARK = "0 seconds"
WINDOW = "1 minute"
WINDOW_WATERMARK = "10 seconds"
TTL = "30 seconds"
TTL_BY = "event"
LIFETIME_BATCHES = 10
SESSION_OUTPUT = "key long, start timestamp, end timestamp, events long"


def sessions(quick: bool = False) -> WorkloadSpec:
    """W3: 300,000 keys, 50,000 rows per batch (quick: 5,000 keys, 2,000 rows)."""
    if quick:
        return WorkloadSpec("w3_sessions", SESSIONS, 5_000, 2_000, 4)
    return WorkloadSpec("w3_sessions", SESSIONS, 300_000, 50_000, 4)


def windowed_count(quick: bool = False) -> WorkloadSpec:
    """W4: 300,000 keys, 100,000 rows per batch (quick: 5,000 keys, 5,000 rows)."""
    if quick:
        return WorkloadSpec("w4_windowed_count", WINDOWED_COUNT, 5_000, 5_000, 4)
    return WorkloadSpec("w4_windowed_count", WINDOWED_COUNT, 300_000, 100_000, 4)


def ttl_churn(quick: bool = False) -> WorkloadSpec:
    """W5: 50,000 live keys, 20,000 rows per batch (quick: 2,000 keys, 1,000 rows)."""
    if quick:
        return WorkloadSpec("w5_ttl_soak", TTL_CHURN, 2_000, 1_000, 4)
    return WorkloadSpec("w5_ttl_soak", TTL_CHURN, 50_000, 20_000, 4)


def churn_shift(spec: WorkloadSpec) -> int:
    """New keys per batch in the TTL churn workload (at least 1)."""
    return max(1, spec.keys // LIFETIME_BATCHES)


def describe(spec: WorkloadSpec) -> dict[str, Any]:
    """What the result JSON says about an event-time workload (beside the spec's fields)."""
    common = {
        "event_time": (
            f"ts = timestamp + pmod(value, {ADVANCE_MS}) ms, where the source's timestamp is "
            f"{START_MS} ms + batch * {ADVANCE_MS} ms (rate-micro-batch startTimestamp, "
            "advanceMillisPerBatch): event time advances with the batch, no row is late"
        ),
        "key": f"pmod(xxhash64(value), {spec.keys}) as long (Spark xxhash64, seed 42)",
    }
    if spec.kind == SESSIONS:
        return {
            **common,
            "logic": (
                f"session per key: a run of events with gaps of at most {SESSION_GAP_MS} ms; "
                "each event moves the key's event-time timer to end + gap; the timer (or an "
                "event after end + gap) emits key, start, end, events"
            ),
            "watermark": SESSION_WATERMARK,
        }
    if spec.kind == WINDOWED_COUNT:
        return {
            **common,
            "logic": f"count per key and {WINDOW} tumbling window, append mode",
            "watermark": WINDOW_WATERMARK,
        }
    if spec.kind == TTL_CHURN:
        return {
            **common,
            "key": (
                f"batch * {churn_shift(spec)} + pmod(xxhash64(value), {spec.keys}): "
                f"{spec.keys} live keys, each for about {LIFETIME_BATCHES} batches"
            ),
            "logic": f"count per key in a value state, with a TTL of {TTL} ({TTL_BY} time) or none",
        }
    raise BenchmarkError(f"{spec.kind!r} is not an event-time workload")


def source(spark: SparkSession, spec: WorkloadSpec) -> DataFrame:
    """The workload's streaming input: ``value`` (long), ``key`` (long), ``ts`` (timestamp)."""
    from pyspark.sql import functions as sf

    rate = (
        spark.readStream.format("rate-micro-batch")
        .option("rowsPerBatch", spec.rows_per_batch)
        .option("numPartitions", spec.partitions)
        .option("startTimestamp", START_MS)
        .option("advanceMillisPerBatch", ADVANCE_MS)
        .load()
    )
    value = sf.col("value")
    hashed = sf.pmod(sf.xxhash64(value), sf.lit(spec.keys))
    if spec.kind == TTL_CHURN:
        batch = sf.floor(value / sf.lit(spec.rows_per_batch))
        key = (batch * sf.lit(churn_shift(spec)) + hashed).cast("long").alias("key")
    else:
        key = hashed.cast("long").alias("key")
    millis = sf.unix_millis(sf.col("timestamp")) + sf.pmod(value, sf.lit(ADVANCE_MS))
    return rate.select(value, key, sf.timestamp_millis(millis).alias("ts"))


def spark_windowed_count(stream: DataFrame) -> DataFrame:
    """Spark's native W4: ``withWatermark`` + ``groupBy(window(ts), key).count()``, with the
    columns GIC writes (``key, window_start, window_end, n``)."""
    from pyspark.sql import functions as sf

    counted = (
        stream.withWatermark("ts", WINDOW_WATERMARK)
        .groupBy(sf.window("ts", WINDOW), sf.col("key"))
        .count()
    )
    return counted.select(
        "key",
        sf.col("window.start").alias("window_start"),
        sf.col("window.end").alias("window_end"),
        sf.col("count").alias("n"),
    )
