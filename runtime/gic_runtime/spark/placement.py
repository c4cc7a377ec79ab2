"""Routing rows to state tasks: bucket by key, task by bucket range, partition = task.

Spark's ``repartition(n, col)`` sends a row to partition ``pmod(murmur3(col), n)``.
To make partition ``i`` hold exactly the rows of task ``i``'s buckets, each row gets a
*partition key*: an integer chosen (once per job start, by asking Spark itself) so that
its hash lands in partition ``i``. Bucket and task follow the runtime's rules
(:func:`~gic_runtime.state.keys.bucket_for` equals Spark's
``pmod(xxhash64(key), B)``; :func:`~gic_runtime.coordination.barrier.task_of_bucket`).

Invariant: for every row, ``partition == task_of_bucket(bucket)``; the task verifies it
(:func:`gic_runtime.processing.bucket_column_ok`) and fails loudly otherwise.
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import (
    ByteType,
    DataType,
    IntegerType,
    LongType,
    ShortType,
    StringType,
)

from gic_runtime.errors import ConfigurationError

BUCKET_COLUMN = "__gic_bucket"
PARTITION_COLUMN = "__gic_partition"
INTERNAL_COLUMNS = (BUCKET_COLUMN, PARTITION_COLUMN)

_INTEGRAL = (ByteType, ShortType, IntegerType, LongType)


def partition_keys(spark: SparkSession, num_tasks: int) -> list[int]:
    """``keys[i]`` is an int whose Spark hash partition among ``num_tasks`` is ``i``."""
    probe = spark.range(0, 64 * num_tasks).select(
        F.col("id").cast("int").alias("k"),
        F.pmod(F.hash(F.col("id").cast("int")), F.lit(num_tasks)).alias("p"),
    )
    found = {
        int(r["p"]): int(r["k"]) for r in probe.groupBy("p").agg(F.min("k").alias("k")).collect()
    }
    missing = [i for i in range(num_tasks) if i not in found]
    if missing:  # pragma: no cover - 64 probes per partition never miss in practice
        raise ConfigurationError(f"found no partition key for partitions {missing}")
    return [found[i] for i in range(num_tasks)]


def key_expression(df: DataFrame, key: str) -> Column:
    """The key column as Spark must hash it to agree with the runtime's ``bucket_for``
    (strings as UTF-8, integers as 64-bit)."""
    if key not in df.columns:
        raise ConfigurationError(f"key column {key!r} is not in the stream (columns: {df.columns})")
    typ: DataType = df.schema[key].dataType
    if isinstance(typ, StringType):
        return F.col(key)
    if isinstance(typ, _INTEGRAL):
        return F.col(key).cast("long")
    raise ConfigurationError(
        f"key column {key!r} has type {typ.simpleString()}; keyed state needs a string or "
        "integer key: cast it (e.g. F.col(key).cast('string'))"
    )


def route(df: DataFrame, key: str, num_buckets: int, part_keys: list[int]) -> DataFrame:
    """``df`` with the bucket and partition-key columns, hash-partitioned so partition
    ``i`` holds exactly task ``i``'s rows."""
    num_tasks = len(part_keys)
    bucket = F.pmod(F.xxhash64(key_expression(df, key)), F.lit(num_buckets)).cast("int")
    task = F.floor(((bucket + 1) * num_tasks - 1) / num_buckets).cast("int")
    lookup = F.array(*[F.lit(k) for k in part_keys])
    routed = df.withColumn(BUCKET_COLUMN, bucket).withColumn(
        PARTITION_COLUMN, F.element_at(lookup, task + 1)
    )
    return routed.repartition(num_tasks, PARTITION_COLUMN)
