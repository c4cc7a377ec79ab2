"""Rows as a window function's state keeps them, and what it returns, as tables.

A window function (:class:`~gic_runtime.processing.windows.WindowProcessor` with
``process=``) needs the rows of each window when it closes, so the rows are kept in
state as msgpack lists (:func:`plain_rows`; temporal columns as integers) and turned
back into a table of the input schema (:func:`rows_table`). Invariant:
``rows_table(plain_rows(t), t.schema)`` equals ``t`` for every supported column type
(decimals are refused, not rounded).
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from gic_runtime.errors import StateError

__all__ = ["fit_output", "plain_rows", "rows_table"]


def plain_rows(table: pa.Table) -> list[list[Any]]:
    """Rows of ``table`` as msgpack-encodable lists (temporal columns as integers)."""
    columns = []
    for column in table.columns:
        typ = column.type
        values = column
        if pa.types.is_temporal(typ):
            values = pc.cast(column, pa.int32() if pa.types.is_date32(typ) else pa.int64())
        elif pa.types.is_decimal(typ):
            raise StateError(f"a window function cannot keep {typ} columns; cast them first")
        columns.append(values.to_pylist())
    return [list(row) for row in zip(*columns, strict=True)] if columns else []


def rows_table(rows: list[list[Any]], schema: pa.Schema) -> pa.Table:
    """The kept ``rows`` as a table of ``schema`` again."""
    arrays = []
    for i, f in enumerate(schema):
        values = [r[i] for r in rows]
        if pa.types.is_temporal(f.type):
            raw = pa.array(values, pa.int32() if pa.types.is_date32(f.type) else pa.int64())
            arrays.append(raw.cast(f.type))
        else:
            arrays.append(pa.array(values, f.type))
    return pa.Table.from_arrays(arrays, schema=schema)


def fit_output(result: Any, schema: pa.Schema) -> pa.Table:
    """``result`` (a table, or rows as dicts) as a table of ``schema``; StateError when
    it does not fit."""
    try:
        if isinstance(result, pa.Table):
            return result.select(schema.names).cast(schema)
        return pa.Table.from_pylist(list(result), schema=schema)
    except (pa.ArrowInvalid, pa.ArrowTypeError, KeyError) as exc:
        raise StateError(f"a window's output does not fit {schema}: {exc}") from exc
