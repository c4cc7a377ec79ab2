"""Spark and Arrow schemas of keyed-stage inputs and outputs, and the event-time column
checks of a keyed stream."""

from __future__ import annotations

import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.pandas.types import from_arrow_schema, to_arrow_schema
from pyspark.sql.types import StructType

from gic_runtime.errors import ConfigurationError
from gic_runtime.event_time import EventTimeSpec, parse_duration


def arrow_schema(spark: SparkSession, schema: str | pa.Schema) -> pa.Schema:
    """``schema`` as Arrow: a DDL string such as ``"word string, count long"`` or an
    Arrow schema (returned as is). Timestamps become UTC instants (``timestamp[us,
    tz=UTC]``), which an output row may give as any time-zone-aware ``datetime``."""
    if isinstance(schema, pa.Schema):
        return schema
    try:
        parsed = StructType.fromDDL(schema) if hasattr(StructType, "fromDDL") else None
        if parsed is None:  # pragma: no cover - older pyspark
            parsed = spark.createDataFrame([], schema).schema
    except Exception as exc:
        raise ConfigurationError(
            f"output schema {schema!r} is not a valid DDL schema "
            f"(e.g. 'word string, count long'): {exc}"
        ) from exc
    if not isinstance(parsed, StructType):
        raise ConfigurationError(f"output schema {schema!r} must describe columns (a struct)")
    return to_arrow_schema(parsed, timezone="UTC")


def arrow_schema_of(df: DataFrame) -> pa.Schema:
    """Arrow schema of ``df``'s rows (timestamps in the session's time zone, as Spark
    hands them to ``mapInArrow``)."""
    timezone = df.sparkSession.conf.get("spark.sql.session.timeZone") or "UTC"
    return to_arrow_schema(df.schema, timezone=timezone)


def spark_schema(schema: pa.Schema) -> StructType:
    """Spark schema of Arrow ``schema``."""
    return from_arrow_schema(schema)


def event_time_spec(
    df: DataFrame, column: str | None, watermark: str | float | None, keep_late: bool
) -> EventTimeSpec | None:
    """The event-time settings of :meth:`GICJob.keyed`, checked against ``df``'s schema
    (the column exists and is a timestamp)."""
    if column is None:
        if watermark is not None or keep_late:
            raise ConfigurationError(
                "watermark and keep_late need an event-time column: pass event_time='<column>'"
            )
        return None
    schema = arrow_schema_of(df)
    if column not in schema.names:
        raise ConfigurationError(
            f"event_time column {column!r} is not in the stream (columns: "
            f"{', '.join(schema.names)})"
        )
    kind = schema.field(column).type
    if not pa.types.is_timestamp(kind):
        raise ConfigurationError(
            f"event_time column {column!r} has type {kind}, not a timestamp; cast it first "
            "(e.g. df.withColumn(name, F.col(name).cast('timestamp')))"
        )
    delay = 0 if watermark is None else parse_duration(watermark)
    return EventTimeSpec(column, delay, keep_late)
