"""``gic gc``: orphan sweep of the job's directory, refused while a driver may write."""

from __future__ import annotations

from typing import Any

from gic_runtime.fencing import highest_epoch
from gic_runtime.status import JobState


def _with_orphan(storage: Any) -> tuple[list[Any], str]:
    written = storage.run_job("wc", range(1, 4))
    orphan = storage.put("jobs/wc/changelog/1/crashed-upload.seg", b"x" * 123)
    return written, orphan


def test_dry_run_lists_the_orphan_and_deletes_nothing(gic: Any, storage: Any) -> None:
    written, orphan = _with_orphan(storage)

    result = gic("gc", "--storage", storage.root, "--job-id", "wc", "--dry-run")

    assert result.exit_code == 0, result.stderr
    assert "dry run, nothing deleted" in result.stdout
    assert f"  {orphan}" in result.stdout.splitlines()
    assert storage.exists(orphan)
    assert highest_epoch(storage.resolver, storage.root, "wc") == 0
    doc = gic.json("gc", "--storage", storage.root, "--job-id", "wc", "--dry-run")
    assert orphan in doc["orphans"]
    referenced = set().union(*(s.manifest.uris() for s in written[-3:]))
    assert not referenced & set(doc["orphans"])
    assert doc["orphaned"] == len(doc["orphans"])
    assert doc["orphaned_bytes"] >= 123
    assert (doc["deleted"], doc["deleted_bytes"], doc["epoch"]) == (0, 0, None)
    assert all(storage.exists(uri) for uri in doc["orphans"])


def test_gc_deletes_the_orphan_after_claiming_an_epoch(gic: Any, storage: Any) -> None:
    written, orphan = _with_orphan(storage)
    referenced = set().union(*(s.manifest.uris() for s in written[-3:]))
    planned = gic.json("gc", "--storage", storage.root, "--job-id", "wc", "--dry-run")

    doc = gic.json("gc", "--storage", storage.root, "--job-id", "wc")

    assert not storage.exists(orphan)
    assert all(storage.exists(uri) for uri in referenced)
    assert all(storage.exists(s.uri) for s in written[-3:])
    assert not any(storage.exists(uri) for uri in planned["orphans"])
    assert doc["deleted"] == planned["orphaned"] == len(planned["orphans"])
    assert doc["deleted_bytes"] == planned["orphaned_bytes"]
    assert doc["orphans"] == []
    assert doc["referenced"] == len(referenced) + 3  # objects and the manifests
    assert doc["epoch"] == 1 == highest_epoch(storage.resolver, storage.root, "wc")
    again = gic("gc", "--storage", storage.root, "--job-id", "wc")
    assert again.exit_code == 0, again.stderr
    assert "fencing epoch 2 claimed" in again.stdout
    assert "deleted            0 objects" in again.stdout


def test_gc_is_refused_while_the_status_says_running(gic: Any, storage: Any) -> None:
    _, orphan = _with_orphan(storage)
    storage.write_status("wc", JobState.RUNNING, age_s=5)

    result = gic("gc", "--storage", storage.root, "--job-id", "wc")

    assert result.exit_code == 2
    [line] = gic.errors(result)
    assert line.startswith("error: job wc looks alive: its status record says running")
    assert "pass --force" in line
    assert storage.exists(orphan)
    assert highest_epoch(storage.resolver, storage.root, "wc") == 0


def test_dry_run_is_allowed_while_the_job_runs(gic: Any, storage: Any) -> None:
    _, orphan = _with_orphan(storage)
    storage.write_status("wc", JobState.RUNNING, age_s=5)

    result = gic("gc", "--storage", storage.root, "--job-id", "wc", "--dry-run")

    assert result.exit_code == 0, result.stderr
    assert "dry run, nothing deleted" in result.stdout
    assert f"  {orphan}" in result.stdout.splitlines()
    assert storage.exists(orphan)
    assert highest_epoch(storage.resolver, storage.root, "wc") == 0  # no epoch claimed


def test_an_unknown_job_is_an_error_not_zeros(gic: Any, storage: Any) -> None:
    _with_orphan(storage)

    for extra in ((), ("--dry-run",)):
        result = gic("gc", "--storage", storage.root, "--job-id", "nope", *extra)

        assert result.exit_code == 1
        [line] = gic.errors(result)
        assert line.startswith(f"error: no job 'nope' under {storage.root} (jobs there: wc)")
        assert result.stdout == ""
    assert highest_epoch(storage.resolver, storage.root, "nope") == 0


def test_force_sweeps_anyway(gic: Any, storage: Any) -> None:
    _, orphan = _with_orphan(storage)
    storage.write_status("wc", JobState.STARTING)

    result = gic("gc", "--storage", storage.root, "--job-id", "wc", "--force")

    assert result.exit_code == 0, result.stderr
    assert not storage.exists(orphan)


def test_a_stale_or_stopped_status_does_not_block(gic: Any, storage: Any) -> None:
    _, orphan = _with_orphan(storage)
    storage.write_status("wc", JobState.RUNNING, age_s=600)  # driver died long ago
    assert gic("gc", "--storage", storage.root, "--job-id", "wc", "--dry-run").exit_code == 0
    storage.write_status("wc", JobState.STOPPED)

    result = gic("gc", "--storage", storage.root, "--job-id", "wc")

    assert result.exit_code == 0, result.stderr
    assert not storage.exists(orphan)


def test_an_unreadable_manifest_aborts_before_deleting(gic: Any, storage: Any) -> None:
    written, orphan = _with_orphan(storage)
    store, key = storage.resolver.resolve(written[-1].uri)
    store.put(key, b"damaged")

    result = gic("gc", "--storage", storage.root, "--job-id", "wc")

    assert result.exit_code == 1
    [line] = gic.errors(result)
    assert written[-1].uri in line
    assert storage.exists(orphan)


def test_savepoints_and_other_jobs_are_never_touched(gic: Any, storage: Any) -> None:
    _, orphan = _with_orphan(storage)
    other = storage.put("jobs/other/changelog/1/x.seg", b"other job")
    savepoint = storage.put("savepoints/sp-1/files/changelog/1/x.seg", b"savepoint")

    result = gic("gc", "--storage", storage.root, "--job-id", "wc")

    assert result.exit_code == 0, result.stderr
    assert not storage.exists(orphan)
    assert storage.exists(other)
    assert storage.exists(savepoint)
