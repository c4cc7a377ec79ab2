"""``write_state``: a canonical savepoint built from a DataFrame of state rows, which a
job can start from (``gic run --restore DIR``, ``GIC_RESTORE_SOURCE``).

Two Spark stages. The first checks and encodes every row where it is
(:func:`gic_runtime.savepoint.state_rows.canonical_rows`: kind, user key, list position,
timer, TTL columns, keys that route to a bucket of ``num_buckets``); the shuffle that
groups rows by bucket runs only once all of them passed, so a row that does not fit
fails the write before any file is written. The second writes one Parquet file per
bucket (:mod:`gic_runtime.savepoint.state_write`: duplicates refused there), and the
driver writes the index last, from the files the tasks report.

Invariants: the target must hold nothing; the savepoint is complete exactly when its
index exists; a write that fails removes the bucket files it wrote (best effort; without
the index they never count) and raises :class:`~gic_runtime.errors.StateError` with the
row's problem, not Spark's stack trace. Tasks reach storage with their environment's
credentials. The savepoint carries state only: a job started from it reads its sources
from their beginning (no engine offsets), and its event time starts without a watermark.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Collection, Iterator
from typing import Final

import pyarrow as pa
from pyspark.sql import DataFrame
from pyspark.sql.pandas.types import from_arrow_schema
from pyspark.sql.types import StringType

from gic_runtime.errors import ConfigurationError, StateError
from gic_runtime.savepoint.canonical import SCHEMA as CANONICAL_SCHEMA
from gic_runtime.savepoint.canonical import CanonicalFile, CanonicalIndex
from gic_runtime.savepoint.state_rows import PARTS, ROW_MARK, ROW_SCHEMA, canonical_rows
from gic_runtime.savepoint.state_write import discard, finish, prepare_target, write_buckets
from gic_runtime.spark.state_read import storage_uri
from gic_runtime.storage.s3_settings import S3Settings
from gic_runtime.storage.uri import StoreResolver

__all__ = ["write_state"]

_log = logging.getLogger(__name__)

_FILES: Final = "bucket int, name string, rows long, size long, crc long"
_ROW_ERROR: Final = re.compile(re.escape(ROW_MARK) + r" ([^\n]*)")


def write_state(
    df: DataFrame,
    target: str,
    *,
    num_buckets: int,
    typed: Collection[str] = (),
    partitions: int | None = None,
) -> CanonicalIndex:
    """Write the state rows of ``df`` (the columns :func:`read_state` gives; ``bucket``
    and unknown columns aside, see docs/operations.md §15.6) as a canonical savepoint in
    the new directory ``target`` for a job of ``num_buckets`` buckets; returns its index.

    ``key``, ``user_key`` and ``value`` are JSON text, except the parts named in
    ``typed`` and columns of a type other than string, which hold the values themselves;
    where one is null its ``*_msgpack`` column is used. ``partitions`` tasks write the
    bucket files (default: the cluster's parallelism, at most ``num_buckets``).
    """
    if num_buckets < 1:
        raise ConfigurationError(f"num_buckets must be >= 1, got {num_buckets}")
    allowed = set(ROW_SCHEMA.names)
    unknown = [c for c in df.columns if c not in allowed]
    if unknown:
        raise ConfigurationError(
            f"write_state: columns {', '.join(unknown)} are not part of state rows; select "
            f"only {', '.join(ROW_SCHEMA.names)} (drop or rename the others)"
        )
    if not {"state", "kind"} <= set(df.columns) or not {"key", "key_msgpack"} & set(df.columns):
        raise ConfigurationError(
            "write_state: the rows need the columns state, kind and key (or key_msgpack)"
        )
    bad = [t for t in typed if t not in PARTS]
    if bad:
        raise ConfigurationError(f"typed names {bad}; only {', '.join(PARTS)} can be typed")
    parts = set(typed) | {
        p for p in PARTS if p in df.columns and not isinstance(df.schema[p].dataType, StringType)
    }
    uri = storage_uri(target)
    resolver = StoreResolver(S3Settings.from_env())
    prepare_target(resolver, uri)
    spark = df.sparkSession
    tasks = partitions or min(num_buckets, max(1, spark.sparkContext.defaultParallelism))
    rows = df.drop("bucket").mapInArrow(
        _encoder(num_buckets, frozenset(parts)), from_arrow_schema(CANONICAL_SCHEMA)
    )
    grouped = rows.repartition(tasks, "bucket").sortWithinPartitions("bucket")
    try:
        reported = grouped.mapInArrow(_writer(uri, num_buckets), _FILES).collect()
        files = [CanonicalFile(r.bucket, r.name, r.rows, r.size, r.crc) for r in reported]
        return finish(resolver, uri, num_buckets, files)
    except Exception as exc:
        try:
            discard(resolver, uri, num_buckets)
        except Exception as cleanup:  # the write's own error matters more
            _log.warning("write_state: removing the bucket files in %s failed: %r", uri, cleanup)
        found = _ROW_ERROR.search(str(exc))
        if found is None:
            raise
        raise StateError(f"write_state wrote nothing to {uri}: {found.group(1).strip()}") from None


def _encoder(
    num_buckets: int, typed: frozenset[str]
) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    def encode(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            rows = batch.to_pylist(maps_as_pydicts="strict")
            yield from canonical_rows(rows, num_buckets, typed=typed).to_batches()

    return encode


def _writer(
    uri: str, num_buckets: int
) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    def write(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        resolver = StoreResolver()  # S3 settings from this executor's environment
        tables = (pa.Table.from_batches([b]) for b in batches if b.num_rows)
        files = write_buckets(resolver, uri, num_buckets, tables)
        yield pa.RecordBatch.from_pylist(
            [
                {"bucket": f.bucket, "name": f.name, "rows": f.rows, "size": f.size, "crc": f.crc}
                for f in files
            ],
            schema=pa.schema(
                [
                    ("bucket", pa.int32()),
                    ("name", pa.string()),
                    ("rows", pa.int64()),
                    ("size", pa.int64()),
                    ("crc", pa.int64()),
                ]
            ),
        )

    return write
