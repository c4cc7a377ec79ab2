"""``gic jobs``, ``gic savepoints`` and ``gic --version``: what a storage root holds."""

from __future__ import annotations

from importlib import metadata
from pathlib import Path
from typing import Any

from gic_runtime.status import JobState


def test_jobs_lists_every_job_with_status_and_checkpoints(gic: Any, storage: Any) -> None:
    storage.run_job("word-count", range(1, 5))
    storage.run_job("event-log", range(1, 2))
    storage.write_status("word-count", JobState.STOPPED)

    doc = gic.json("jobs", "--storage", storage.root)

    assert doc["storage"] == storage.root
    by_id = {job["job_id"]: job for job in doc["jobs"]}
    assert list(by_id) == ["event-log", "word-count"]
    assert by_id["word-count"]["checkpoints"] == [2, 3, 4]
    assert by_id["word-count"]["latest_checkpoint"] == 4
    assert by_id["word-count"]["status"]["state"] == "stopped"
    assert by_id["event-log"]["status"] is None
    assert all(job["objects"] > 0 and job["bytes"] > 0 for job in doc["jobs"])
    table = gic("jobs", "--storage", storage.root)
    assert table.exit_code == 0, table.stderr
    rows = [line.split("│")[1:4] for line in table.stdout.splitlines() if line.startswith("│")]
    assert [[cell.strip() for cell in row] for row in rows] == [
        ["event-log", "-", "1"],
        ["word-count", rows[1][1].strip(), "2..4"],
    ]
    assert rows[1][1].strip().startswith("stopped, epoch 1, ")


def test_jobs_of_an_empty_or_missing_root(gic: Any, tmp_path: Path) -> None:
    missing = tmp_path / "nothing"

    result = gic("jobs", "--storage", str(missing))

    assert result.exit_code == 0, result.stderr
    assert result.stdout.strip() == f"no jobs under {missing.as_uri()}"
    assert not missing.exists()  # a read-only command creates nothing
    assert gic.json("jobs", "--storage", str(missing))["jobs"] == []


def _take(gic: Any, storage: Any, job_id: str, *extra: str) -> str:
    result = gic("savepoint", "--storage", storage.root, "--job-id", job_id, *extra)
    assert result.exit_code == 0, result.stderr
    outcome = [e.outcome for e in storage.channel(job_id).entries() if e.outcome][-1]
    path: str = outcome.path
    return path


def test_savepoints_lists_the_root_and_filters_by_job(
    gic: Any, storage: Any, tmp_path: Path
) -> None:
    storage.run_job("wc", range(1, 4))
    storage.run_job("other", range(1, 3))
    native = _take(gic, storage, "wc")
    elsewhere = _take(gic, storage, "wc", "--format", "canonical", "--target", str(tmp_path / "x"))
    theirs = _take(gic, storage, "other", "--format", "canonical")
    storage.put("savepoints/half-written/files/a.seg", b"x")

    every = gic.json("savepoints", "--storage", storage.root)
    of_wc = gic.json("savepoints", "--storage", storage.root, "--job-id", "wc")

    kinds = {s["uri"]: (s["kind"], s["job_id"], s["checkpoint_id"]) for s in every["savepoints"]}
    assert kinds == {
        native: ("native", "wc", 3),
        theirs: ("canonical", None, None),
        f"{storage.root}/savepoints/half-written": ("incomplete", None, None),
    }
    assert every["job_id"] is None
    assert of_wc["job_id"] == "wc"
    assert {s["uri"] for s in of_wc["savepoints"]} == {native, elsewhere}
    assert all(s["files"] > 0 and s["bytes"] > 0 for s in of_wc["savepoints"])
    [listed] = [s for s in of_wc["savepoints"] if s["uri"] == native]
    assert listed["type"] == "intermediate"
    assert listed["created_at"].endswith("Z")
    text = gic("savepoints", "--storage", storage.root, "--job-id", "wc")
    assert text.exit_code == 0, text.stderr
    assert f"  {elsewhere}" in text.stdout.splitlines()
    assert "native (intermediate)" in text.stdout


def test_no_savepoints(gic: Any, storage: Any) -> None:
    result = gic("savepoints", "--storage", storage.root)

    assert result.exit_code == 0, result.stderr
    assert result.stdout.strip() == f"no savepoints under {storage.root}"


def test_version(gic: Any) -> None:
    result = gic("--version")

    assert result.exit_code == 0, result.stderr
    assert result.stdout.strip() == f"gic {metadata.version('gic')}"
