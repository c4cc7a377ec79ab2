"""A task's staged output: every table its callback yields, in one Parquet file.

A state task writes its batch's output rows to ONE file under the barrier's staging
directory, ``part-<task_index:05d>-<uuid>.parquet``, published by the driver only after
the checkpoint completes. The file is encoded in memory and written once, create-if-
absent, when the callback is done, so a reader never sees a partial file and a failed
task leaves at most a complete file nobody's ack names (the driver drops unacked
staged files with the batch's staging directory).

Invariants: all tables of a file share one schema (``output_schema`` when given, else
the first non-empty table's); zero rows means no file; rows without a staging
directory are a :class:`~gic_runtime.errors.StateError`.

Thread-safety: one task thread uses an :class:`OutputStager`.
"""

from __future__ import annotations

import uuid
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from gic_runtime.coordination.barrier import StagedFile
from gic_runtime.errors import StateError
from gic_runtime.storage.uri import StoreResolver, join
from gic_runtime.storage.writes import create_once


class OutputStager:
    """Collects one task's output tables into one staged Parquet file."""

    def __init__(
        self,
        staging_uri: str | None,
        task_index: int,
        resolver: StoreResolver,
        schema: Any = None,
    ) -> None:
        self._staging_uri = staging_uri
        self._task_index = task_index
        self._resolver = resolver
        self._schema: Any = schema
        self._sink: Any = None
        self._writer: Any = None
        self.rows = 0

    def add(self, table: Any) -> None:
        """Append ``table`` (a ``pyarrow.Table`` or ``RecordBatch``) to the output."""
        if isinstance(table, pa.RecordBatch):
            table = pa.Table.from_batches([table])
        if not isinstance(table, pa.Table):
            raise StateError(
                f"the task's callback yielded a {type(table).__name__}; yield pyarrow "
                "Tables (or RecordBatches) of output rows"
            )
        if table.num_rows == 0:
            return
        if self._staging_uri is None:
            raise StateError(
                "the task's callback produced output rows but the barrier has no "
                "staging_uri; set Barrier.staging_uri when the job has a sink"
            )
        if self._schema is None:
            self._schema = table.schema
        if not table.schema.equals(self._schema):
            try:
                table = table.select(self._schema.names).cast(self._schema)
            except (pa.ArrowException, KeyError, ValueError) as exc:
                raise StateError(
                    f"output table with columns {table.schema} does not match the output "
                    f"schema {self._schema}: {exc}; yield tables of one schema"
                ) from exc
        if self._writer is None:
            self._sink = pa.BufferOutputStream()
            self._writer = pq.ParquetWriter(self._sink, self._schema, compression="zstd")
        self._writer.write_table(table)
        self.rows += table.num_rows

    def finish(self) -> tuple[StagedFile, ...]:
        """Write the file (if any rows) and describe it."""
        if self._writer is None or self._staging_uri is None:
            return ()
        self._writer.close()
        data: bytes = self._sink.getvalue().to_pybytes()
        self._writer = self._sink = None
        uri = join(self._staging_uri, f"part-{self._task_index:05d}-{uuid.uuid4().hex}.parquet")
        store, key = self._resolver.resolve(uri)
        create_once(store, key, data)
        return (StagedFile(uri, self.rows, len(data)),)

    def abort(self) -> None:
        """Drop what was collected (nothing was written yet)."""
        if self._writer is not None:
            self._writer.close()
        self._writer = self._sink = None
