"""What a canonical savepoint keeps beside its index, read back as a start needs it."""

from __future__ import annotations

import pytest

from gic_runtime.checkpoint import Manifest
from gic_runtime.driver.savepoint_requests import (
    EVENT_TIME_RECORD,
    read_event_time_record,
    read_sink_record,
    write_canonical_extras,
)
from gic_runtime.errors import FormatError
from gic_runtime.event_time import NO_PROGRESS, EventTimeProgress
from gic_runtime.storage.local import LocalObjectStore
from gic_runtime.storage.uri import StoreResolver


def manifest(**extra: object) -> Manifest:
    return Manifest("job-a", 4, 2, 1.0, 2, {}, **extra)  # type: ignore[arg-type]


def test_the_event_time_progress_travels_beside_a_canonical_savepoint(
    local_store: LocalObjectStore, resolver: StoreResolver
) -> None:
    directory = f"{local_store.root_uri}/savepoints/sp-1"
    progress = EventTimeProgress(2_000_000, 1_000_000)
    write_canonical_extras(resolver, directory, manifest(event_time=progress, sink={"x": 1}))
    assert read_event_time_record(resolver, directory) == progress
    assert read_sink_record(resolver, directory) == {"x": 1, "job_id": "job-a"}


def test_a_savepoint_of_a_job_without_event_time_has_no_record(
    local_store: LocalObjectStore, resolver: StoreResolver
) -> None:
    directory = f"{local_store.root_uri}/savepoints/sp-2"
    write_canonical_extras(resolver, directory, manifest())
    assert not local_store.exists(f"savepoints/sp-2/{EVENT_TIME_RECORD}")
    assert read_event_time_record(resolver, directory) == NO_PROGRESS


def test_a_forged_record_is_refused(local_store: LocalObjectStore, resolver: StoreResolver) -> None:
    local_store.put(f"savepoints/sp-3/{EVENT_TIME_RECORD}", b'{"watermark_us": 1}')
    with pytest.raises(FormatError):
        read_event_time_record(resolver, f"{local_store.root_uri}/savepoints/sp-3")
