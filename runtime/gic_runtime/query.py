"""The query fingerprint: which query wrote a job's checkpoints.

A job id names a directory of state, and nothing but the id ties that state to the code
that reads it: run another query under the same id and it would resume state it never
wrote. So every checkpoint manifest records the *fingerprint* of the query that wrote it
(field ``query``, docs/architecture.md §4.4), and a driver compares it with its own query
before it claims the job (:func:`check_resume`); a mismatch is refused with
:class:`~gic_runtime.errors.QueryMismatchError` before anything is written.

A fingerprint has three parts, each a short text and a digest of its full canonical text:

* ``source``: the streaming sources feeding the query -- format and what identifies the
  data (paths, topics, tables), not tuning options such as ``maxFilesPerTrigger``
  (built by the Spark layer; ``None`` when it cannot tell);
* ``processing``: the processing style, the key column and the user's code -- the
  qualified name of the function (``process``, ``process_batches``) or the declared
  aggregations and the value states they keep (``aggregate``);
* ``output``: the output schema (column names and types).

What is deliberately left out: the transformations between the source and ``keyed()``
(refactoring them is no change of query), tuning options, the sink. The fingerprint
catches a different query under the same job id; it does not prove two queries equal.

Versioning: the stored object carries ``version`` (:data:`FINGERPRINT_VERSION`) and the
three parts, each ``{"text", "digest"}`` or ``null`` (:mod:`gic_runtime.codec`). A
fingerprint of another version, a part this runtime does not know how to compare, or no
fingerprint at all (a manifest written before fingerprints existed) never refuses a
resume: the next checkpoint records this runtime's fingerprint.

Pure functions over immutable values; thread-safe.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Annotated, Any, Final

import pyarrow as pa
from pydantic import Field

from gic_runtime import codec
from gic_runtime.codec import NoneIfInvalid, NonEmptyText, RecordError, Text, json_record
from gic_runtime.errors import QueryMismatchError
from gic_runtime.processing import (
    AggregateProcessor,
    BatchProcessor,
    PerKeyProcessor,
    Processor,
)
from gic_runtime.processing.windows import WindowProcessor

FINGERPRINT_VERSION: Final = 1
#: The parts of a fingerprint, in the order messages list them, with their names there.
PARTS: Final = (("source", "source"), ("processing", "processing"), ("output", "output schema"))
#: Longest text of a part kept in a manifest (the digest covers the whole text).
TEXT_MAX: Final = 400
#: Hex digits of a part's digest (64 bits of SHA-256).
DIGEST_HEX: Final = 16
#: The setting that lets a job resume state written by another query, and its variable.
OVERRIDE_SETTING: Final = "allow_query_change"
OVERRIDE_ENV: Final = "GIC_ALLOW_QUERY_CHANGE"


@json_record("query part")
@dataclass(frozen=True, slots=True)
class QueryPart:
    """One part of a fingerprint: a readable ``text`` (at most :data:`TEXT_MAX`
    characters) and the ``digest`` of the full text, which decides equality."""

    text: Text
    digest: NonEmptyText

    @classmethod
    def of(cls, text: str) -> QueryPart:
        digest = hashlib.sha256(text.encode("utf-8")).hexdigest()[:DIGEST_HEX]
        short = text if len(text) <= TEXT_MAX else text[: TEXT_MAX - 3] + "..."
        return cls(short, digest)


@json_record("query fingerprint", computed=("version",))
@dataclass(frozen=True, slots=True)
class QueryFingerprint:
    """What identifies a query (see the module docstring); ``source`` is ``None`` when
    the engine could not describe its sources (then it is never compared; a malformed
    stored ``source`` reads as ``None``)."""

    source: Annotated[QueryPart | None, NoneIfInvalid, Field(default=None)]  # absent: None
    processing: QueryPart
    output: QueryPart

    @classmethod
    def of(cls, *, source: str | None, processing: str, output: str) -> QueryFingerprint:
        return cls(
            source=None if source is None else QueryPart.of(source),
            processing=QueryPart.of(processing),
            output=QueryPart.of(output),
        )

    def part(self, name: str) -> QueryPart | None:
        value: QueryPart | None = getattr(self, name)
        return value

    @property
    def version(self) -> int:
        """Version of the stored form (:data:`FINGERPRINT_VERSION`)."""
        return FINGERPRINT_VERSION

    def to_json(self) -> dict[str, Any]:
        """The manifest's ``query`` object."""
        return codec.to_json(self)

    @classmethod
    def from_json(cls, data: Mapping[str, Any] | None) -> QueryFingerprint | None:
        """The fingerprint a manifest recorded, or ``None`` when it has none this
        runtime can compare (absent, another version, malformed)."""
        if data is None or data.get("version") != FINGERPRINT_VERSION:
            return None
        try:
            return codec.from_json(cls, data)
        except RecordError:
            return None


@dataclass(frozen=True, slots=True)
class QueryDifference:
    """A part that differs: its name in messages, and both texts."""

    what: str
    stored: str
    current: str

    def describe(self) -> str:
        return f"{self.what} (stored: {self.stored}; this query: {self.current})"


def differences(stored: QueryFingerprint, current: QueryFingerprint) -> list[QueryDifference]:
    """The parts of ``current`` that differ from ``stored``, in :data:`PARTS` order; a
    part missing on either side is not compared."""
    out = []
    for name, what in PARTS:
        old, new = stored.part(name), current.part(name)
        if old is not None and new is not None and old.digest != new.digest:
            out.append(QueryDifference(what, old.text, new.text))
    return out


def check_resume(
    stored: Mapping[str, Any] | None,
    current: QueryFingerprint,
    *,
    job_id: str,
    job_dir: str,
    manifest_uri: str,
    allow_change: bool,
) -> list[QueryDifference]:
    """Compare the fingerprint a job's latest checkpoint recorded (``stored``, the
    manifest's ``query`` object) with the query about to resume it.

    Returns the differences (empty: same query, or nothing comparable). Raises
    :class:`QueryMismatchError` naming the job, what differs and the ways out, unless
    ``allow_change`` (then the caller logs the returned differences and resumes)."""
    recorded = QueryFingerprint.from_json(stored)
    if recorded is None:
        return []
    found = differences(recorded, current)
    if found and not allow_change:
        raise QueryMismatchError(mismatch_message(job_id, job_dir, manifest_uri, found))
    return found


def mismatch_message(
    job_id: str, job_dir: str, manifest_uri: str, found: Sequence[QueryDifference]
) -> str:
    """The refusal's text: the job, the checkpoint, what differs, how to go on."""
    listed = "; ".join(d.describe() for d in found)
    return (
        f"job {job_id}: its checkpoints were written by a different query, so this query "
        f"does not resume them (latest checkpoint: {manifest_uri}). Differs: {listed}. "
        "Nothing was claimed and the job's checkpoints are unchanged. To run this query as a "
        "job of its own, give it another job id (GIC_JOB_ID, gic run --job-id, or the "
        "name passed to GICJob.create); to start this job over with empty state, delete "
        f"its directory {job_dir}/ (gic gc only sweeps unreferenced files, it keeps "
        f"checkpoints); if the change is deliberate (an upgrade of this job), set "
        f"{OVERRIDE_ENV}=1 (setting {OVERRIDE_SETTING}) for the run that resumes it"
    )


# --- describing a query ----------------------------------------------------------------


def callable_name(fn: Callable[..., Any]) -> str:
    """``module.qualname`` of a user function, stable however its script is run: a
    function of a script run as ``__main__`` (python, spark-submit, ``gic run``) is
    named after the script's file (``event_log.log_events``)."""
    inner: Any = fn
    while hasattr(inner, "func") and callable(inner.func):  # functools.partial
        inner = inner.func
    qualname = getattr(inner, "__qualname__", None)
    if qualname is None:  # a callable object
        inner = type(inner)
        qualname = inner.__qualname__
    module = getattr(inner, "__module__", None) or ""
    if module == "__main__" or not module or module.startswith("<"):
        code = getattr(inner, "__code__", None)
        filename = getattr(code, "co_filename", "") if code is not None else ""
        stem = os.path.splitext(os.path.basename(filename))[0]
        module = stem or "__main__"
    return f"{module}.{qualname}"


def describe_processing(processor: Processor) -> str:
    """The processing part: style, key column and code (or declared aggregations)."""
    key = processor.key_column
    if isinstance(processor, AggregateProcessor):
        aggs = ", ".join(
            f"{name}={agg.kind}({agg.column or ''})" for name, agg in processor.aggregations.items()
        )
        states = ", ".join(f"agg:{name}" for name in processor.aggregations)
        return f"aggregate by {key!r}: {aggs} (value states {states})"
    if isinstance(processor, PerKeyProcessor):
        timers = processor.on_timer
        tail = "" if timers is None else f", on_timer {callable_name(timers)}"
        return f"process by {key!r}: {callable_name(processor.fn)}{tail}"
    if isinstance(processor, BatchProcessor):
        batch_timers = processor.on_timers
        tail = "" if batch_timers is None else f", on_timers {callable_name(batch_timers)}"
        return f"process_batches by {key!r}: {callable_name(processor.fn)}{tail}"
    if isinstance(processor, WindowProcessor):
        what = (
            callable_name(processor.fn)
            if processor.fn is not None
            else ", ".join(
                f"{n}={a.kind}({a.column or ''})" for n, a in processor.aggregations.items()
            )
        )
        lateness = f", lateness {processor.lateness_us} us" if processor.lateness_us else ""
        return f"window {processor.spec.describe()}{lateness} by {key!r}: {what}"
    kind = type(processor)
    return f"{kind.__module__}.{kind.__qualname__} by {key!r}"


def describe_schema(schema: pa.Schema) -> str:
    """The output part: column names and types (not nullability or metadata)."""
    return ", ".join(f"{f.name}: {f.type}" for f in schema)


def describe_sources(sources: Sequence[str]) -> str:
    """The source part from the engine's description of each source, independent of
    their order."""
    return "; ".join(sorted(sources))
