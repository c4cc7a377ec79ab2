"""Spark and Arrow schemas of keyed-stage outputs."""

from __future__ import annotations

import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.pandas.types import from_arrow_schema, to_arrow_schema
from pyspark.sql.types import StructType

from gic_runtime.errors import ConfigurationError


def arrow_schema(spark: SparkSession, schema: str | pa.Schema) -> pa.Schema:
    """``schema`` as Arrow: a DDL string such as ``"word string, count long"`` or an
    Arrow schema (returned as is)."""
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
    return to_arrow_schema(parsed)


def arrow_schema_of(df: DataFrame) -> pa.Schema:
    """Arrow schema of ``df``'s rows."""
    return to_arrow_schema(df.schema)


def spark_schema(schema: pa.Schema) -> StructType:
    """Spark schema of Arrow ``schema``."""
    return from_arrow_schema(schema)
