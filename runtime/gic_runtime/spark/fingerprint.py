"""The fingerprint of a Spark query (:mod:`gic_runtime.query`): its streaming sources as
Spark's analyzed plan names them, its processing and its output schema.

A source is described by its format and what identifies its data, never by tuning
options (``maxFilesPerTrigger``, ``rowsPerBatch``...) nor by anything that could hold a
secret: a file source by its paths (a relative local path made absolute against the
driver's working directory, as Spark reads it), another source by the options in
:data:`IDENTITY_OPTIONS` (topics, tables, streams, hosts) it has, URIs without their
user information. Broker lists (``kafka.bootstrap.servers``) are left out: replacing a
broker does not change the data. A plan leaf of a source type this module does not know
is described by its node name and Spark's one-line text of it, with expression ids and
object hashes taken out. When the plan cannot be read (no JVM plan, an unexpected Spark version) the
source part is left out, and resumes compare processing and output only.

Runs on the driver thread before the query starts (py4j calls into Spark's JVM).
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Iterable
from typing import Any, Final

from pyspark.sql import DataFrame

from gic_runtime.processing import Processor
from gic_runtime.query import (
    QueryFingerprint,
    describe_processing,
    describe_schema,
    describe_sources,
)

_log = logging.getLogger(__name__)

#: Options (lowercase) that say which data a non-file source reads.
IDENTITY_OPTIONS: Final = (
    "path",
    "paths",
    "subscribe",
    "subscribepattern",
    "assign",
    "topic",
    "topics",
    "table",
    "dbtable",
    "tablename",
    "stream",
    "streamname",
    "host",
    "port",
)
#: Source formats that read files (described by their paths).
_FILE_FORMATS: Final = frozenset(
    {"text", "json", "csv", "parquet", "orc", "avro", "binaryfile", "xml", "delta"}
)
_EXPR_ID = re.compile(r"#\d+L?")
_OBJECT_HASH = re.compile(r"@[0-9a-f]{4,}")
_USER_INFO = re.compile(r"(://)[^/@\s]*@")


def query_fingerprint(df: DataFrame, processor: Processor) -> QueryFingerprint:
    """The fingerprint of the query reading ``df`` (the streaming DataFrame given to
    ``keyed()``) and running ``processor``."""
    sources = source_descriptions(df)
    return QueryFingerprint.of(
        source=describe_sources(sources) if sources else None,
        processing=describe_processing(processor),
        output=describe_schema(processor.output_schema),
    )


def source_descriptions(df: DataFrame) -> list[str]:
    """One text per streaming source of ``df``'s plan; empty when the plan cannot be
    read."""
    try:
        plan = df._jdf.queryExecution().analyzed()
        leaves = _iterate(plan.collectLeaves())
        return [_describe_leaf(leaf) for leaf in leaves if bool(leaf.isStreaming())]
    except Exception as exc:  # py4j errors, a Spark without these classes
        _log.debug("cannot describe the query's sources: %s", exc)
        return []


def _iterate(seq: Any) -> Iterable[Any]:
    iterator = seq.iterator()
    while iterator.hasNext():
        yield iterator.next()


def _describe_leaf(leaf: Any) -> str:
    """A streaming leaf: ``<format> files at <paths>``, ``<format> k=v ...`` or Spark's
    own text of the node."""
    name = str(leaf.nodeName())
    if name == "StreamingRelation":
        source = leaf.dataSource()
        fmt = str(source.className())
        options = _scala_map(source.options())
        paths = [str(p) for p in _iterate(source.paths())]
        return _describe(fmt, options, paths)
    if name == "StreamingRelationV2":
        fmt = str(leaf.sourceName())
        options = {str(k): str(v) for k, v in leaf.extraOptions().asCaseSensitiveMap().items()}
        return _describe(fmt, options, [])
    text = _EXPR_ID.sub("", str(leaf.simpleString(100)))
    return f"{name}: {_OBJECT_HASH.sub('', text)}"


def _scala_map(scala: Any) -> dict[str, str]:
    out: dict[str, str] = {}
    for pair in _iterate(scala):
        out[str(pair._1())] = str(pair._2())
    return out


def _describe(fmt: str, options: dict[str, str], paths: list[str]) -> str:
    lowered = {k.lower(): v for k, v in options.items()}
    short = fmt.rsplit(".", 1)[-1].lower() if "." in fmt else fmt.lower()
    if short in _FILE_FORMATS or "path" in lowered or paths:
        found = [*paths, *([lowered["path"]] if "path" in lowered else [])]
        located = sorted({_location(p) for p in found})
        return f"{fmt} files at {', '.join(located) or '(no path)'}"
    identity = [f"{k}={_without_user_info(lowered[k])}" for k in IDENTITY_OPTIONS if k in lowered]
    return " ".join([fmt, *identity])


def _without_user_info(value: str) -> str:
    return _USER_INFO.sub(r"\1", value)


def _location(value: str) -> str:
    """A path or URI as it identifies data: local relative paths made absolute, user
    information (credentials) removed from URIs."""
    if "://" in value:
        return _without_user_info(value)
    if ":" not in value and not os.path.isabs(value):
        return os.path.abspath(value)
    return value
