"""``gic describe``: checkpoints, native and canonical savepoints, ownership of files."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from gic_runtime.checkpoint.manifest import RestoreMode
from gic_runtime.driver import RestoreRequest


def _savepoint(gic: Any, storage: Any, job_id: str, *extra: str) -> str:
    result = gic("savepoint", "--storage", storage.root, "--job-id", job_id, *extra)
    assert result.exit_code == 0, result.stderr
    [entry] = [e for e in storage.channel(job_id).entries() if e.outcome is not None][-1:]
    path: str = entry.outcome.path
    return path


def test_a_checkpoint_manifest(gic: Any, storage: Any) -> None:
    written = storage.run_job("wc", range(1, 3))
    stored = written[-1]
    manifest = stored.manifest

    doc = gic.json("describe", stored.uri)

    assert doc["kind"] == "checkpoint"
    assert doc["uri"] == stored.uri
    assert doc["directory"] is None
    assert (doc["job_id"], doc["checkpoint_id"], doc["epoch"]) == ("wc", 2, 1)
    assert doc["num_buckets"] == 4
    assert doc["savepoint"] is None
    buckets = doc["buckets"]
    states = manifest.buckets.values()
    assert buckets["snapshots"] == sum(1 for s in states if s.snapshot) == 4
    assert buckets["changelog_handles"] == sum(len(s.changelog) for s in states)
    assert buckets["seq_total"] == sum(s.seq for s in states) == 40
    assert doc["restored_from"] is None
    total = buckets["snapshot_bytes"] + buckets["changelog_bytes"]
    assert doc["owners"] == [
        {"owner": "job", "label": "job timeline", "objects": len(manifest.uris()), "bytes": total}
    ]


def test_ownership_of_a_checkpoint_restored_in_claim_mode(gic: Any, storage: Any) -> None:
    source = storage.run_job("old", range(1, 3))[-1]
    restored = storage.run_job(
        "new",
        range(10, 11),
        restore=RestoreRequest(source.uri, RestoreMode.CLAIM),
        first_self_contained=False,
    )[-1]
    from_source = restored.manifest.uris() & source.manifest.uris()
    assert from_source  # the claimed files are still referenced

    doc = gic.json("describe", restored.uri)

    assert doc["restored_from"] == {
        "source": source.uri,
        "mode": "claim",
        "source_checkpoint_id": 2,
        "released": False,
    }
    owners = {o["owner"]: o["objects"] for o in doc["owners"]}
    assert owners == {
        "job": len(restored.manifest.uris()) - len(from_source),
        "claimed-source": len(from_source),
    }
    text = gic("describe", restored.uri).stdout
    assert "restore source (claimed)" in text
    assert "still referenced" in text


def test_a_native_savepoint_given_as_a_local_directory(gic: Any, storage: Any) -> None:
    storage.run_job("wc", range(1, 4))
    path = _savepoint(gic, storage, "wc")
    local = path.removeprefix("file://")
    relative = os.path.relpath(local)

    doc = gic.json("describe", relative)

    assert doc["kind"] == "native-savepoint"
    assert doc["directory"] == path
    assert doc["uri"] == f"{path}/_savepoint.manifest"
    assert doc["checkpoint_id"] == 3
    assert doc["savepoint"] == {"type": "intermediate", "format": "native"}
    [owner] = doc["owners"]
    assert owner["owner"] == "savepoint"
    assert owner["bytes"] == doc["buckets"]["snapshot_bytes"] + doc["buckets"]["changelog_bytes"]
    text = gic("describe", local).stdout
    assert "native savepoint (intermediate)" in text
    assert "savepoint" in text


def test_a_canonical_savepoint(gic: Any, storage: Any, tmp_path: Path) -> None:
    storage.run_job("wc", range(1, 3))
    target = tmp_path / "canonical"
    _savepoint(gic, storage, "wc", "--format", "canonical", "--target", str(target))

    doc = gic.json("describe", str(target))
    by_index = gic.json("describe", str(target / "_canonical.json"))

    assert doc == by_index
    assert doc["kind"] == "canonical-savepoint"
    assert doc["num_buckets"] == 4
    assert doc["canonical"]["rows"] == 20
    assert doc["canonical"]["files"] == len(list(target.glob("bucket-*.parquet")))
    assert doc["job_id"] is None
    assert [o["owner"] for o in doc["owners"]] == ["savepoint"]
    text = gic("describe", str(target)).stdout
    assert "canonical savepoint" in text


def test_a_corrupt_manifest_is_one_line(gic: Any, storage: Any) -> None:
    stored = storage.run_job("wc", range(1, 2))[-1]
    store, key = storage.resolver.resolve(stored.uri)
    data = bytearray(store.get(key))
    data[-5] ^= 0xFF
    store.put(key, bytes(data))

    result = gic("describe", stored.uri)

    assert result.exit_code == 1
    [line] = gic.errors(result)
    assert line.startswith("error: ")
    assert "checksum" in line
    assert stored.uri in line
    assert result.stdout == ""


def test_a_foreign_file_is_one_line(gic: Any, tmp_path: Path) -> None:
    other = tmp_path / "notes.txt"
    other.write_text("hello\n")

    result = gic("describe", str(other))

    assert result.exit_code == 1
    [line] = gic.errors(result)
    assert line.startswith("error: ")
    assert other.as_uri() in line


def test_a_missing_path_is_one_line(gic: Any, tmp_path: Path) -> None:
    result = gic("describe", str(tmp_path / "nothing-here"))

    assert result.exit_code == 1
    assert gic.errors(result) == [
        f"error: nothing to describe at {(tmp_path / 'nothing-here').as_uri()}: expected a "
        "checkpoint manifest (chk-N.manifest), a native savepoint directory (with "
        "_savepoint.manifest) or a canonical savepoint directory (with _canonical.json); "
        "check the path"
    ]


def test_a_checkpoint_by_id_of_the_job(gic: Any, storage: Any) -> None:
    written = storage.run_job("wc", range(1, 5))
    job = ("--storage", storage.root, "--job-id", "wc")

    by_id = gic.json("describe", "3", *job)
    latest = gic.json("describe", "latest", *job)

    assert by_id == gic.json("describe", written[2].uri)
    assert (by_id["checkpoint_id"], by_id["job_id"]) == (3, "wc")
    assert latest["checkpoint_id"] == 4
    text = gic("describe", "3", *job, env={"GIC_STORAGE": storage.root}).stdout
    assert "checkpoint" in text


def test_an_id_the_job_does_not_have_lists_the_ones_it_has(gic: Any, storage: Any) -> None:
    storage.run_job("wc", range(1, 6))  # retention 3: 3, 4, 5

    result = gic("describe", "1", "--storage", storage.root, "--job-id", "wc")

    assert result.exit_code == 1
    [line] = gic.errors(result)
    assert line.startswith(
        f"error: job wc has no checkpoint 1 under {storage.root} (its checkpoints: 3, 4, 5)"
    )


def test_an_id_of_an_unknown_job_names_the_jobs_there(gic: Any, storage: Any) -> None:
    storage.run_job("wc", range(1, 2))

    result = gic("describe", "1", "--storage", storage.root, "--job-id", "gic-job")

    assert result.exit_code == 1
    [line] = gic.errors(result)
    assert line.startswith(f"error: no job 'gic-job' under {storage.root} (jobs there: wc)")
