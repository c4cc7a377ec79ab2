"""Where a batch's output goes once its checkpoint is complete.

:mod:`gic_runtime.sinks.files` holds the :class:`Sink` protocol, the transactional
:class:`FileSink`, its commit markers and :func:`read_file_sink`;
:mod:`gic_runtime.sinks.output_owners` decides which job may write an output directory.
Sinks that need Spark live in :mod:`gic_runtime.spark.spark_sinks`.
"""

from gic_runtime.sinks.files import (
    COMMITS_DIR,
    CommittedBatch,
    FileSink,
    Sink,
    committed_batches,
    decode_marker,
    encode_marker,
    read_file_sink,
    staged_from_manifest,
)
from gic_runtime.sinks.output_owners import OutputClaim, OutputGeneration

__all__ = [
    "COMMITS_DIR",
    "CommittedBatch",
    "FileSink",
    "OutputClaim",
    "OutputGeneration",
    "Sink",
    "committed_batches",
    "decode_marker",
    "encode_marker",
    "read_file_sink",
    "staged_from_manifest",
]
