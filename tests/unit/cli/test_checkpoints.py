"""``gic checkpoints``: retained checkpoints, status record and pending requests."""

from __future__ import annotations

from typing import Any

from gic_runtime.checkpoint.manifest import StoredManifest
from gic_runtime.errors import BucketCountMismatchError
from gic_runtime.status import JobState


def _referenced_bytes(stored: StoredManifest) -> int:
    total = 0
    for state in stored.manifest.buckets.values():
        total += sum(h.length for h in state.changelog)
        total += state.snapshot.size if state.snapshot is not None else 0
    return total


def test_json_lists_the_retained_checkpoints_with_what_they_reference(
    gic: Any, storage: Any
) -> None:
    written = storage.run_job("wc", range(1, 6))
    retained = written[-3:]  # retention 3: checkpoints 1 and 2 were subsumed

    doc = gic.json("checkpoints", "--storage", storage.root, "--job-id", "wc")

    assert doc["job_id"] == "wc"
    assert doc["storage"] == storage.root
    assert [c["id"] for c in doc["checkpoints"]] == [3, 4, 5]
    for entry, stored in zip(doc["checkpoints"], retained, strict=True):
        assert entry["uri"] == stored.uri
        assert entry["epoch"] == 1
        assert entry["num_buckets"] == 4
        assert entry["objects"] == len(stored.manifest.uris())
        assert entry["bytes"] == _referenced_bytes(stored) > 0
        assert entry["created_at"].endswith("Z")
        assert entry["restored_from"] is None
    assert doc["unreadable"] == []
    assert doc["status"] is None
    assert doc["highest_epoch"] == 0
    assert doc["pending_requests"] == []


def test_json_shows_the_status_record_and_pending_requests_only(gic: Any, storage: Any) -> None:
    storage.run_job("wc", range(1, 3))
    storage.write_status("wc", JobState.RUNNING)
    channel = storage.channel("wc")
    pending = channel.request_savepoint(format="canonical", requested_by="tester")
    done = channel.request_stop(request_id="stop-1")
    from gic_runtime.control import Outcome

    channel.complete(Outcome.completed(done.request_id, checkpoint_id=2))

    doc = gic.json("checkpoints", "--storage", storage.root, "--job-id", "wc")

    assert doc["status"]["state"] == "running"
    assert doc["status"]["epoch"] == 1
    assert doc["status"]["updated_at"].endswith("Z")
    assert [r["request_id"] for r in doc["pending_requests"]] == [pending.request_id]
    request = doc["pending_requests"][0]
    assert request["type"] == "savepoint"
    assert request["format"] == "canonical"
    assert request["kind"] == "intermediate"
    assert request["target"] == pending.target
    assert request["requested_by"] == "tester"


def test_table_shows_checkpoints_status_and_pending_requests(gic: Any, storage: Any) -> None:
    storage.run_job("wc", range(7, 9))
    storage.write_status("wc", JobState.STOPPED)
    request = storage.channel("wc").request_savepoint()

    result = gic("checkpoints", "--storage", storage.root, "--job-id", "wc")

    assert result.exit_code == 0, result.stderr
    out = result.stdout
    assert "checkpoints of job wc" in out
    assert "status: stopped, epoch 1" in out
    assert f"{request.request_id}: savepoint (intermediate, native)" in out
    rows = [line.split("│")[1].strip() for line in out.splitlines() if line.startswith("│")]
    assert rows == ["7", "8"], out


def test_settings_come_from_the_environment(gic: Any, storage: Any) -> None:
    storage.run_job("from-env", range(1, 2))

    env = {"GIC_STORAGE": storage.root, "GIC_JOB_ID": "from-env"}
    result = gic("checkpoints", "--json", env=env)

    assert result.exit_code == 0, result.stderr
    assert '"job_id": "from-env"' in result.stdout


def test_a_job_without_checkpoints_says_so(gic: Any, storage: Any) -> None:
    storage.channel("starting").request_savepoint()  # the job exists, nothing checkpointed

    result = gic("checkpoints", "--storage", storage.root, "--job-id", "starting")

    assert result.exit_code == 0, result.stderr
    assert "no checkpoints for job starting" in result.stdout
    assert "status: no status record" in result.stdout
    assert "pending control requests (1)" in result.stdout


def test_an_unknown_job_is_an_error_naming_the_jobs_there(gic: Any, storage: Any) -> None:
    storage.run_job("word-count", range(1, 2))
    storage.run_job("event-log", range(1, 2))

    result = gic("checkpoints", "--storage", storage.root, "--job-id", "wordcount")

    assert result.exit_code == 1
    assert result.stdout == ""
    assert gic.errors(result) == [
        f"error: no job 'wordcount' under {storage.root} (jobs there: event-log, "
        "word-count); check --job-id and --storage (gic jobs lists a root's jobs)"
    ]


def test_the_table_says_how_to_describe_a_checkpoint_on_one_line(gic: Any, storage: Any) -> None:
    storage.run_job("a-job-with-a-rather-long-name", range(1, 3))

    result = gic(
        "checkpoints", "--storage", storage.root, "--job-id", "a-job-with-a-rather-long-name",
        env={"COLUMNS": "60"},
    )  # fmt: skip

    assert result.exit_code == 0, result.stderr
    hint = (
        f"describe one with: gic describe ID --storage {storage.root} "
        "--job-id a-job-with-a-rather-long-name"
    )
    assert hint in result.stdout.splitlines()  # not wrapped: stdout is not a terminal


def test_an_unreadable_manifest_is_listed_and_fails_the_command(gic: Any, storage: Any) -> None:
    written = storage.run_job("wc", range(1, 3))
    store, key = storage.resolver.resolve(written[-1].uri)
    store.put(key, b"garbage, not a manifest")

    result = gic("checkpoints", "--storage", storage.root, "--job-id", "wc", "--json")

    assert result.exit_code == 1
    errors = gic.errors(result)
    assert len(errors) == 1
    assert errors[0].startswith("error: checkpoint manifest(s) 2 of job wc cannot be read")
    import json

    doc = json.loads(result.stdout)
    assert [c["id"] for c in doc["checkpoints"]] == [1]
    assert doc["unreadable"][0]["id"] == 2
    assert written[-1].uri in doc["unreadable"][0]["error"]


def test_a_failed_launch_shows_why(gic: Any, storage: Any) -> None:
    storage.run_job("wc", range(1, 3))
    refusal = BucketCountMismatchError("chk-2 has 8 buckets but the job is configured with 16")
    storage.write_status("wc", JobState.FAILED, failure=refusal)

    doc = gic.json("checkpoints", "--storage", storage.root, "--job-id", "wc")
    result = gic("checkpoints", "--storage", storage.root, "--job-id", "wc")

    assert doc["status"]["failure"] == {
        "reason": "InvalidSettings",
        "message": str(refusal),
        "error_type": "BucketCountMismatchError",
    }
    assert result.exit_code == 0, result.stderr
    assert f"failed (InvalidSettings): {refusal}" in " ".join(result.stdout.split())
