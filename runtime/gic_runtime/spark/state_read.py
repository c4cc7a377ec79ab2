"""``read_state``: the state of a checkpoint or savepoint as a DataFrame.

The driver opens the source (:mod:`gic_runtime.savepoint.state_source`: the manifest or
canonical index only, bounded and verified) and lists the buckets that hold state;
each Spark task then reads ``buckets_per_task`` of them from storage itself and yields
their rows (:mod:`gic_runtime.savepoint.state_rows` for the columns), so the driver
never holds state and no row crosses it.

Invariants: a task rebuilds one bucket at a time, in an LMDB store under a temporary
directory of its own (removed after), and turns its entries into rows
:data:`~gic_runtime.savepoint.state_source.CHUNK_ROWS` at a time, so a task's memory
is bounded by that slice, not by the bucket. Tasks reach storage with the credentials
of their own environment (``AWS_*`` / ``GIC_S3_*``, as the job's executors do); nothing
secret travels in the plan. Derived index entries (timers' time index, TTL expiry
index) are never rows. Reading writes nothing.
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Callable, Iterator, Sequence

import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.pandas.types import from_arrow_schema, to_arrow_type
from pyspark.sql.types import DataType

from gic_runtime.errors import ConfigurationError
from gic_runtime.savepoint.state_rows import ROW_SCHEMA, user_table
from gic_runtime.savepoint.state_source import (
    BucketSource,
    StateSource,
    bucket_rows,
    latest_state_source,
    open_state_source,
)
from gic_runtime.state.lmdb_store import LmdbStore
from gic_runtime.storage.s3_settings import S3Settings
from gic_runtime.storage.uri import StorageURI, StoreResolver

__all__ = ["read_state"]

TypeArg = DataType | str | None
_PLAN = "task int, buckets string"


def storage_uri(path: str) -> str:
    """``path`` as a storage URI (a local path becomes ``file://``)."""
    return str(StorageURI.parse(path.strip()))


def _arrow_type(part: str, given: TypeArg) -> pa.DataType | None:
    if given is None:
        return None
    spark_type = DataType.fromDDL(given) if isinstance(given, str) else given
    try:
        return to_arrow_type(spark_type)
    except Exception as exc:
        raise ConfigurationError(
            f"{part}_type {given!r}: no Arrow form of {spark_type} ({exc}); give a Spark type "
            "such as 'string', 'bigint', 'array<string>' or 'struct<a:int,b:string>'"
        ) from exc


def read_state(
    spark: SparkSession,
    source: str,
    *,
    job_id: str | None = None,
    states: Sequence[str] | None = None,
    key_type: TypeArg = None,
    user_key_type: TypeArg = None,
    value_type: TypeArg = None,
    buckets_per_task: int = 1,
) -> DataFrame:
    """The state at ``source`` as a DataFrame, one row per value, map entry, list
    element and timer (columns: docs/operations.md §15.6).

    ``source`` is a checkpoint manifest, a native savepoint (its directory or
    ``_savepoint.manifest``) or a canonical savepoint directory; with ``job_id`` it is
    the storage root and the job's latest checkpoint is read. ``states`` keeps only
    those state names (a timer's is its domain). ``key_type``, ``user_key_type`` and
    ``value_type`` (Spark types or DDL text) decode that column into the type instead of
    JSON text; a value of another shape fails the read. ``buckets_per_task`` buckets
    are read by each task.
    """
    if buckets_per_task < 1:
        raise ConfigurationError(f"buckets_per_task must be >= 1, got {buckets_per_task}")
    types = {
        part: t
        for part, t in (
            ("key", _arrow_type("key", key_type)),
            ("user_key", _arrow_type("user_key", user_key_type)),
            ("value", _arrow_type("value", value_type)),
        )
        if t is not None
    }
    resolver = StoreResolver(S3Settings.from_env())
    opened = _open(resolver, storage_uri(source), job_id)
    schema = ROW_SCHEMA
    for part, arrow in types.items():
        schema = schema.set(schema.get_field_index(part), pa.field(part, arrow))
    spark_schema = from_arrow_schema(schema)
    groups = [
        opened.buckets[i : i + buckets_per_task]
        for i in range(0, len(opened.buckets), buckets_per_task)
    ]
    if not groups:
        return spark.createDataFrame([], spark_schema)
    plan = [(n, json.dumps([b.to_json() for b in group])) for n, group in enumerate(groups)]
    tasks = spark.sparkContext.parallelize(plan, len(plan)).toDF(_PLAN)
    wanted = None if states is None else frozenset(states)
    return tasks.mapInArrow(_reader(wanted, types), spark_schema)


def _open(resolver: StoreResolver, uri: str, job_id: str | None) -> StateSource:
    if job_id is not None:
        return latest_state_source(resolver, uri, job_id)
    return open_state_source(resolver, uri)


def _reader(
    states: frozenset[str] | None, types: dict[str, pa.DataType]
) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """The task function: read the buckets its plan rows name."""

    def read(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        resolver = StoreResolver()  # S3 settings from this executor's environment
        for batch in batches:
            for text in batch.column("buckets").to_pylist():
                for data in json.loads(text):
                    yield from _bucket(resolver, BucketSource.from_json(data), states, types)

    return read


def _bucket(
    resolver: StoreResolver,
    source: BucketSource,
    states: frozenset[str] | None,
    types: dict[str, pa.DataType],
) -> Iterator[pa.RecordBatch]:
    with tempfile.TemporaryDirectory(prefix="gic-read-state-") as scratch:
        for chunk in bucket_rows(resolver, source, lambda: LmdbStore(scratch)):
            rows = chunk
            if states is not None:
                rows = chunk.filter(pa.array([s in states for s in chunk["state"].to_pylist()]))
            if rows.num_rows:
                yield from user_table(rows, types=types).to_batches()
