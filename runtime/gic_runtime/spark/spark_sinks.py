"""Sinks that need Spark: user code per batch (at-least-once), and no output at all.

:class:`ForeachBatchSink` hands each checkpointed batch's output to user code as a
DataFrame together with the batch id, then records a done marker under the job's
``sinks/foreach/`` directory. A crash after the user code ran but before the marker
was written delivers that batch again after recovery (at-least-once): the user code
deduplicates by batch id if it needs exactly-once.
"""

from __future__ import annotations

import io
from collections.abc import Callable, Sequence
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from pyspark.sql import DataFrame, SparkSession

from gic_runtime.coordination.barrier import StagedFile
from gic_runtime.layout import job_dir
from gic_runtime.sinks import OutputClaim, encode_marker
from gic_runtime.spark.schemas import spark_schema
from gic_runtime.storage.uri import StoreResolver, join
from gic_runtime.storage.writes import create_once


class ForeachBatchSink:
    """Calls ``fn(output_df, batch_id)`` once a batch is checkpointed (at-least-once)."""

    def __init__(
        self,
        spark: SparkSession,
        fn: Callable[[DataFrame, int], None],
        *,
        schema: pa.Schema,
        resolver: StoreResolver,
        root: str,
        job_id: str,
    ) -> None:
        self.spark = spark
        self.fn = fn
        self.schema = schema
        self.resolver = resolver
        self._dir = join(job_dir(root, job_id), "sinks", "foreach")

    def describe(self) -> dict[str, Any]:
        return {"kind": "foreach_batch"}

    def claim(self, claim: OutputClaim) -> None:
        """Nothing to claim: the done markers live in the job's own directory."""

    def _marker(self, batch_id: int) -> str:
        return join(self._dir, f"{batch_id:012d}.done")

    def published(self, batch_id: int) -> bool:
        store, key = self.resolver.resolve(self._marker(batch_id))
        return store.exists(key)

    def publish(self, batch_id: int, staged: Sequence[StagedFile]) -> int:
        tables = []
        for item in staged:
            store, key = self.resolver.resolve(item.uri)
            tables.append(pq.read_table(io.BytesIO(store.get(key))))
        table = pa.concat_tables(tables) if tables else self.schema.empty_table()
        df = self.spark.createDataFrame(table.to_pandas(), schema=spark_schema(self.schema))
        self.fn(df, batch_id)
        store, key = self.resolver.resolve(self._marker(batch_id))
        create_once(store, key, encode_marker({"batch_id": batch_id, "rows": table.num_rows}))
        return int(table.num_rows)


class DiscardSink:
    """No output: the processor's results are dropped (state-only jobs, benchmarks)."""

    def describe(self) -> dict[str, Any]:
        return {"kind": "discard"}

    def claim(self, claim: OutputClaim) -> None:
        """Nothing to claim: there is no output."""

    def published(self, batch_id: int) -> bool:
        return True

    def publish(self, batch_id: int, staged: Sequence[StagedFile]) -> int:
        return 0
