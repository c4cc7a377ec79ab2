"""Routing rows to state tasks: bucket by key, task by bucket range, partition = task.

Spark's ``repartition(n, col)`` sends a row to partition ``pmod(murmur3(col), n)``.
To make partition ``i`` hold exactly the rows of task ``i``'s buckets, each row gets a
*partition key*: an integer chosen (once per job start, with Spark's own Murmur3 hash
computed here, :func:`spark_int_hash`) so that its hash lands in partition ``i``.
Bucket and task follow the runtime's rules (:func:`~gic_runtime.state.keys.bucket_for`
equals Spark's ``pmod(xxhash64(key), B)``;
:func:`~gic_runtime.coordination.ranges.task_of_bucket`).

Invariant: for every row, ``partition == task_of_bucket(bucket)``; the task verifies it
(:func:`gic_runtime.processing.bucket_column_ok`) and fails loudly otherwise.
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame
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


_MASK = 0xFFFFFFFF


def _rotl(x: int, r: int) -> int:
    return ((x << r) | (x >> (32 - r))) & _MASK


def spark_int_hash(value: int, seed: int = 42) -> int:
    """Spark's ``hash()`` of an ``int`` column (Murmur3 x86_32 of the 4-byte value, seed
    42), as the signed 32-bit integer Spark returns."""
    k1 = (value & _MASK) * 0xCC9E2D51 & _MASK
    k1 = _rotl(k1, 15) * 0x1B873593 & _MASK
    h1 = _rotl((seed & _MASK) ^ k1, 13)
    h1 = (h1 * 5 + 0xE6546B64) & _MASK
    h1 ^= 4
    h1 ^= h1 >> 16
    h1 = h1 * 0x85EBCA6B & _MASK
    h1 ^= h1 >> 13
    h1 = h1 * 0xC2B2AE35 & _MASK
    h1 ^= h1 >> 16
    return h1 - (1 << 32) if h1 & 0x80000000 else h1


def partition_keys(num_tasks: int) -> list[int]:
    """``keys[i]`` is the smallest non-negative int whose Spark hash partition among
    ``num_tasks`` is ``i`` (``pmod(hash(k), n) == i``). Computed here rather than by a
    probe job on Spark (that job was most of a restart's set-up time); the tasks verify
    every row's partition, so a disagreement with Spark fails loudly, never silently."""
    if num_tasks < 1:
        raise ConfigurationError(f"need at least one state task, got {num_tasks}")
    found: dict[int, int] = {}
    candidate = 0
    while len(found) < num_tasks:
        found.setdefault(spark_int_hash(candidate) % num_tasks, candidate)
        candidate += 1
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
