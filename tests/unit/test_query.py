"""The query fingerprint: parts and digests, stored form, comparison, the refusal's
message, descriptions of processors, and the manifest field that carries it."""

from __future__ import annotations

import functools
import json
import types
from typing import Any

import pyarrow as pa
import pytest

from gic_runtime.checkpoint import Manifest, decode_manifest, encode_manifest
from gic_runtime.config import GICSettings
from gic_runtime.errors import QueryMismatchError, RestoreError
from gic_runtime.formats import encode_text_record
from gic_runtime.layout import manifest_uri
from gic_runtime.processing import (
    AggregateProcessor,
    BatchProcessor,
    PerKeyProcessor,
    count,
    max_,
)
from gic_runtime.query import (
    FINGERPRINT_VERSION,
    TEXT_MAX,
    QueryFingerprint,
    QueryPart,
    callable_name,
    check_resume,
    describe_processing,
    describe_schema,
    describe_sources,
    differences,
)

JOB_DIR = "file:///data/gic/jobs/word-count"
CHK = f"{JOB_DIR}/checkpoints/chk-000000000001.manifest"
OUT = pa.schema([("word", pa.string()), ("count", pa.int64())])


def word_count() -> QueryFingerprint:
    return QueryFingerprint.of(
        source="text files at /data/text",
        processing=describe_processing(AggregateProcessor("word", {"count": count()}, OUT)),
        output=describe_schema(OUT),
    )


def log_events(table: pa.Table, states: Any) -> pa.Table:
    return table


def event_log() -> QueryFingerprint:
    schema = pa.schema([("user", pa.string()), ("events", pa.int64())])
    return QueryFingerprint.of(
        source="json files at /data/events",
        processing=describe_processing(BatchProcessor("user", log_events, schema)),
        output=describe_schema(schema),
    )


def test_a_part_is_its_text_and_a_digest_of_the_whole_text() -> None:
    part = QueryPart.of("text files at /data/text")
    assert part.text == "text files at /data/text"
    assert len(part.digest) == 16 and part.digest == QueryPart.of(part.text).digest
    assert part.digest != QueryPart.of("text files at /data/other").digest
    long = QueryPart.of("x" * 1000)
    assert len(long.text) == TEXT_MAX and long.text.endswith("...")
    assert long.digest != QueryPart.of("x" * 999).digest  # the whole text decides


def test_stored_form_round_trips_and_unknown_forms_compare_as_nothing() -> None:
    fp = word_count()
    stored = fp.to_json()
    assert stored["version"] == FINGERPRINT_VERSION
    assert set(stored) == {"version", "source", "processing", "output"}
    assert QueryFingerprint.from_json(json.loads(json.dumps(stored))) == fp
    no_source = QueryFingerprint.of(source=None, processing="p", output="o")
    assert no_source.to_json()["source"] is None
    assert QueryFingerprint.from_json(no_source.to_json()) == no_source
    assert QueryFingerprint.from_json(None) is None
    assert QueryFingerprint.from_json({**stored, "version": FINGERPRINT_VERSION + 1}) is None
    assert QueryFingerprint.from_json({**stored, "processing": "p"}) is None
    assert QueryFingerprint.from_json({"version": FINGERPRINT_VERSION}) is None


def test_differences_name_each_part_that_differs() -> None:
    assert differences(word_count(), word_count()) == []
    found = differences(word_count(), event_log())
    assert [d.what for d in found] == ["source", "processing", "output schema"]
    assert found[0].stored == "text files at /data/text"
    assert found[0].current == "json files at /data/events"
    # a part one side could not describe is not compared
    unknown = QueryFingerprint.of(
        source=None,
        processing=word_count().processing.text,
        output=word_count().output.text,
    )
    assert differences(word_count(), unknown) == []
    moved = QueryFingerprint.of(
        source="text files at /data/moved",
        processing=word_count().processing.text,
        output=word_count().output.text,
    )
    assert [d.what for d in differences(word_count(), moved)] == ["source"]


def test_a_resume_by_another_query_is_refused_with_what_differs_and_the_ways_out() -> None:
    with pytest.raises(QueryMismatchError) as caught:
        check_resume(
            word_count().to_json(),
            event_log(),
            job_id="word-count",
            job_dir=JOB_DIR,
            manifest_uri=CHK,
            allow_change=False,
        )
    message = str(caught.value)
    assert isinstance(caught.value, RestoreError)
    assert message.startswith("job word-count: its checkpoints were written by a different")
    assert CHK in message
    for what in (
        "source (stored: text files at /data/text; this query: json files",
        "processing",
        "output schema",
    ):
        assert what in message
    assert "process_batches by 'user'" in message and "aggregate by 'word'" in message
    assert "another job id" in message and "GIC_JOB_ID" in message
    assert f"delete its directory {JOB_DIR}/" in message
    assert "GIC_ALLOW_QUERY_CHANGE=1" in message and "allow_query_change" in message
    assert "unchanged" in message


def test_same_query_no_fingerprint_or_override_resume() -> None:
    common = {"job_id": "j", "job_dir": JOB_DIR, "manifest_uri": CHK}
    assert check_resume(word_count().to_json(), word_count(), allow_change=False, **common) == []
    assert check_resume(None, event_log(), allow_change=False, **common) == []  # older runtime
    changed = check_resume(word_count().to_json(), event_log(), allow_change=True, **common)
    assert [d.what for d in changed] == ["source", "processing", "output schema"]


def test_processing_describes_style_key_and_code() -> None:
    agg = AggregateProcessor(
        "key", {"n": count(), "hi": max_("value")}, pa.schema([("key", pa.int64())])
    )
    assert describe_processing(agg) == (
        "aggregate by 'key': n=count(), hi=max(value) (value states agg:n, agg:hi)"
    )
    schema = pa.schema([("k", pa.string())])
    per_key = describe_processing(PerKeyProcessor("k", log_events, schema))
    assert per_key == f"process by 'k': {__name__}.log_events"
    batch = describe_processing(BatchProcessor("k", log_events, schema))
    assert batch == f"process_batches by 'k': {__name__}.log_events"
    assert describe_schema(OUT) == "word: string, count: int64"
    assert describe_sources(["b", "a"]) == "a; b"


def test_a_scripts_function_is_named_after_its_file() -> None:
    module = types.ModuleType("__main__")
    code = compile("def sessionize(key, rows, state):\n    return None\n", "/x/app.py", "exec")
    exec(code, module.__dict__)
    fn = module.__dict__["sessionize"]
    assert fn.__module__ == "__main__"
    assert callable_name(fn) == "app.sessionize"
    assert callable_name(functools.partial(fn, 1)) == "app.sessionize"

    class Counter:
        def __call__(self, *args: Any) -> None:
            return None

    assert callable_name(Counter()).endswith("Counter")
    assert callable_name(log_events) == f"{__name__}.log_events"


def test_the_manifest_carries_the_fingerprint_and_older_manifests_have_none() -> None:
    uri = manifest_uri("file:///data/gic", "word-count", 1)
    plain = Manifest("word-count", 1, 1, 1.0, 4, {})
    text = encode_manifest(plain, uri)
    assert b'"query"' not in text  # written only when known: older bytes unchanged
    assert decode_manifest(text, uri).query is None
    fp = word_count().to_json()
    recorded = Manifest("word-count", 1, 1, 1.0, 4, {}, query=fp)
    back = decode_manifest(encode_manifest(recorded, uri), uri)
    assert back == recorded
    assert QueryFingerprint.from_json(back.query) == word_count()
    # a body written by a runtime that predates the field (same v2 format, no "query")
    body = json.loads(encode_manifest(plain, uri).split(b"\n", 1)[1])
    assert "query" not in body
    older = encode_text_record("GICM", 2, json.dumps(body, sort_keys=True).encode("ascii"))
    assert decode_manifest(older, uri).query is None


def test_the_override_setting_reads_the_environment() -> None:
    assert GICSettings.load(env={}).allow_query_change is False
    assert GICSettings.load(env={"GIC_ALLOW_QUERY_CHANGE": "1"}).allow_query_change is True
    assert GICSettings(allow_query_change=True).to_env()["GIC_ALLOW_QUERY_CHANGE"] == "true"
