"""Partition keys computed in Python land where Spark's own hash puts them."""

from __future__ import annotations

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from gic_runtime.spark.placement import partition_keys, spark_int_hash


def test_the_python_murmur3_equals_sparks_hash_of_ints(spark: SparkSession) -> None:
    values = [*range(-2000, 2000), 2**31 - 1, -(2**31), 123_456_789]
    rows = (
        spark.createDataFrame([(v,) for v in values], "v int")
        .select("v", F.hash("v").alias("h"))
        .collect()
    )
    assert {r["v"]: r["h"] for r in rows} == {v: spark_int_hash(v) for v in values}


def test_each_partition_key_is_the_smallest_int_spark_sends_there(spark: SparkSession) -> None:
    for n in (1, 3, 4, 7, 16):
        keys = partition_keys(n)
        probe = spark.range(0, 64 * n).select(
            F.col("id").cast("int").alias("k"),
            F.pmod(F.hash(F.col("id").cast("int")), F.lit(n)).alias("p"),
        )
        smallest = {
            int(r["p"]): int(r["k"])
            for r in probe.groupBy("p").agg(F.min("k").alias("k")).collect()
        }
        assert keys == [smallest[i] for i in range(n)]
