"""``gic savepoint``: through a running driver (control channel) or offline."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest

from gic_runtime.checkpoint.catalog import write_manifest
from gic_runtime.checkpoint.manifest import SavepointFormat, SavepointType
from gic_runtime.control import OutcomeState, SavepointRequest
from gic_runtime.handles import BucketState, SnapshotHandle
from gic_runtime.layout import manifest_uri
from gic_runtime.savepoint.canonical import read_canonical_index
from gic_runtime.savepoint.native import load_savepoint
from gic_runtime.status import JobState


def _only_entry(storage: Any, job_id: str) -> Any:
    entries = storage.channel(job_id).entries()
    assert len(entries) == 1
    return entries[0]


def test_offline_native_savepoint_of_a_stopped_job(gic: Any, storage: Any) -> None:
    written = storage.run_job("wc", range(1, 4))
    storage.write_status("wc", JobState.STOPPED)

    result = gic("savepoint", "--storage", storage.root, "--job-id", "wc")

    assert result.exit_code == 0, result.stderr
    assert "offline" in result.stdout
    entry = _only_entry(storage, "wc")
    assert isinstance(entry.request, SavepointRequest)
    assert entry.request.requested_by == "gic (offline)"
    assert entry.outcome.state is OutcomeState.COMPLETED
    assert entry.outcome.checkpoint_id == 3
    assert entry.outcome.path == f"{storage.root}/savepoints/{entry.request.request_id}"
    assert entry.outcome.path in result.stdout
    assert entry.outcome.size_bytes > 0
    savepoint = load_savepoint(storage.resolver, entry.outcome.path)
    assert savepoint.manifest.checkpoint_id == 3
    assert savepoint.manifest.savepoint is not None
    assert savepoint.manifest.savepoint.type is SavepointType.INTERMEDIATE
    # The savepoint holds the latest checkpoint's state and nothing of the job's files.
    assert {b: s.seq for b, s in savepoint.manifest.buckets.items()} == {
        b: s.seq for b, s in written[-1].manifest.buckets.items()
    }
    assert all(u.startswith(entry.outcome.path + "/") for u in savepoint.manifest.uris())


def test_offline_canonical_savepoint_into_a_local_target(
    gic: Any, storage: Any, tmp_path: Path
) -> None:
    storage.run_job("wc", range(1, 3))  # no status record: never reported, not running
    target = tmp_path / "exported"

    result = gic(
        "savepoint", "--storage", storage.root, "--job-id", "wc",
        "--format", "CANONICAL", "--target", str(target),
    )  # fmt: skip

    assert result.exit_code == 0, result.stderr
    assert "offline" in result.stdout
    index = read_canonical_index(storage.resolver, target.as_uri())
    assert index.num_buckets == 4
    assert sum(f.rows for f in index.files) == 20
    entry = _only_entry(storage, "wc")
    assert entry.request.format is SavepointFormat.CANONICAL
    assert entry.outcome.path == target.as_uri()
    assert entry.outcome.checkpoint_id == 2


def test_offline_savepoint_into_an_existing_savepoint_is_refused(
    gic: Any, storage: Any, tmp_path: Path
) -> None:
    storage.run_job("wc", range(1, 2))
    target = str(tmp_path / "sp")
    args = ("savepoint", "--storage", storage.root, "--job-id", "wc", "--target", target)
    assert gic(*args).exit_code == 0

    result = gic(*args)

    assert result.exit_code == 1
    assert gic.errors(result) == [
        f"error: {Path(target).as_uri()} already holds a savepoint (_savepoint.manifest); "
        "choose another --target"
    ]


def test_offline_savepoint_without_checkpoints_is_an_error(gic: Any, storage: Any) -> None:
    storage.write_status("empty", JobState.FAILED)

    result = gic("savepoint", "--storage", storage.root, "--job-id", "empty")

    assert result.exit_code == 1
    [line] = gic.errors(result)
    assert line.startswith("error: job empty has no completed checkpoint")
    assert storage.channel("empty").entries() == []


def test_a_savepoint_of_an_unknown_job_is_an_error(gic: Any, storage: Any) -> None:
    storage.run_job("wc", range(1, 2))

    result = gic("savepoint", "--storage", storage.root, "--job-id", "typo")

    assert result.exit_code == 1
    [line] = gic.errors(result)
    assert line.startswith(f"error: no job 'typo' under {storage.root} (jobs there: wc)")
    assert storage.channel("typo").entries() == []


def test_stop_of_a_job_that_is_not_running_is_an_error(gic: Any, storage: Any) -> None:
    storage.run_job("wc", range(1, 2))
    storage.write_status("wc", JobState.FAILED)

    result = gic("savepoint", "--storage", storage.root, "--job-id", "wc", "--stop")

    assert result.exit_code == 1
    [line] = gic.errors(result)
    assert line.startswith("error: job wc is not running (it is failed)")
    assert storage.channel("wc").entries() == []


def test_a_running_driver_takes_the_savepoint(gic: Any, storage: Any, driver_factory: Any) -> None:
    storage.run_job("wc", range(1, 4))
    storage.write_status("wc", JobState.RUNNING)
    driver = driver_factory("wc")

    result = gic("savepoint", "--storage", storage.root, "--job-id", "wc", "--timeout", "60")

    assert result.exit_code == 0, result.stderr
    assert "by the job's driver" in result.stdout
    assert "offline" not in result.stdout
    entry = _only_entry(storage, "wc")
    assert driver.served == [entry.request.request_id]
    assert entry.request.requested_by == "gic"
    assert entry.outcome.state is OutcomeState.COMPLETED
    assert entry.outcome.path in result.stdout
    assert load_savepoint(storage.resolver, entry.outcome.path).manifest.checkpoint_id == 3


def test_stop_with_savepoint_is_requested_as_terminal(
    gic: Any, storage: Any, driver_factory: Any
) -> None:
    storage.run_job("wc", range(1, 2))
    storage.write_status("wc", JobState.RUNNING)
    driver_factory("wc")

    result = gic(
        "savepoint", "--storage", storage.root, "--job-id", "wc", "--stop",
        "--format", "canonical", "--timeout", "60",
    )  # fmt: skip

    assert result.exit_code == 0, result.stderr
    entry = _only_entry(storage, "wc")
    assert entry.request.kind is SavepointType.TERMINAL
    assert entry.request.format is SavepointFormat.CANONICAL
    assert read_canonical_index(storage.resolver, entry.outcome.path).num_buckets == 4


def test_no_wait_leaves_the_request_pending(gic: Any, storage: Any) -> None:
    storage.run_job("wc", range(1, 2))
    storage.write_status("wc", JobState.RUNNING)

    result = gic("savepoint", "--storage", storage.root, "--job-id", "wc", "--no-wait")

    assert result.exit_code == 0, result.stderr
    [pending] = storage.channel("wc").pending()
    assert f"requested savepoint {pending.request_id}" in result.stdout


def test_waiting_for_a_driver_that_never_answers_times_out(gic: Any, storage: Any) -> None:
    storage.run_job("wc", range(1, 2))
    storage.write_status("wc", JobState.RUNNING)

    result = gic("savepoint", "--storage", storage.root, "--job-id", "wc", "--timeout", "0")

    assert result.exit_code == 1
    [line] = gic.errors(result)
    assert "has no outcome after" in line
    assert "The request stays pending" in line
    assert len(storage.channel("wc").pending()) == 1


def test_a_failed_outcome_is_an_error(gic: Any, storage: Any, driver_factory: Any) -> None:
    storage.run_job("wc", range(1, 2))
    storage.write_status("wc", JobState.RUNNING)
    damaged = storage.put("damaged/_savepoint.manifest", b"not a manifest")
    target = damaged.rsplit("/", 1)[0]
    driver_factory("wc")

    result = gic(
        "savepoint", "--storage", storage.root, "--job-id", "wc",
        "--target", target, "--timeout", "60",
    )  # fmt: skip

    assert result.exit_code == 1
    [line] = gic.errors(result)
    entry = _only_entry(storage, "wc")
    assert entry.outcome.state is OutcomeState.FAILED
    assert line.startswith(f"error: savepoint {entry.request.request_id} failed: ")
    assert target in line


@pytest.mark.parametrize("fmt", ["native", "canonical"])
@pytest.mark.parametrize("where", ["outside", "dotted"])
def test_an_offline_savepoint_copies_nothing_a_manifest_names_outside_the_job(
    gic: Any, storage: Any, tmp_path: Path, fmt: str, where: str
) -> None:
    """A manifest forged to name a file outside the job (``/etc/passwd`` in the report)
    must not make the CLI copy or read it with its user's credentials."""
    secret = tmp_path / "secret.txt"
    secret.write_text("root:x:0:0\n")
    written = storage.run_job("wc", range(1, 3))
    storage.write_status("wc", JobState.STOPPED)
    latest = written[-1]
    uri = secret.as_uri()
    if where == "dotted":  # inside by prefix, outside by path
        uri = f"{storage.root}/jobs/wc/../../{secret.name}"
    forged_state = BucketState(0, 1, SnapshotHandle(uri, 0, 1, 11, 0))
    buckets = {**latest.manifest.buckets, 0: forged_state}
    forged = dataclasses.replace(latest.manifest, checkpoint_id=3, buckets=buckets)
    write_manifest(storage.resolver, manifest_uri(storage.root, "wc", 3), forged)

    result = gic("savepoint", "--storage", storage.root, "--job-id", "wc", "--format", fmt)

    assert result.exit_code == 1
    assert "outside the job's directory" in " ".join(result.stderr.split())
    copies = [p for p in (Path(storage.root.removeprefix("file://")) / "savepoints").rglob("*")]
    assert not any(p.is_file() and "root:x" in p.read_text(errors="replace") for p in copies)
    entry = _only_entry(storage, "wc")
    assert entry.outcome.state is OutcomeState.FAILED
