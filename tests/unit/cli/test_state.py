"""``gic state KEY``: one key's state from the latest checkpoint, a checkpoint id, a
native or a canonical savepoint; typed keys; errors by the CLI's contract; stored text
printed terminal-safe."""

from __future__ import annotations

import dataclasses
from typing import Any

from gic_runtime.checkpoint.catalog import write_manifest
from gic_runtime.checkpoint.manifest import map_uris
from gic_runtime.savepoint.canonical import (
    CanonicalIndex,
    write_canonical_index,
    write_canonical_savepoint,
)
from gic_runtime.state.backend import KeyedStateBackend
from gic_runtime.state.keys import bucket_for
from gic_runtime.state.memory_store import InMemoryStore
from gic_runtime.status import JobState
from gic_runtime.testing.changelog_fakes import TestingChangelogWriter


def _job(gic: Any, storage: Any, *args: str) -> Any:
    return gic("state", *args, "--storage", storage.root, "--job-id", "wc")


def test_latest_checkpoint_as_json(gic: Any, storage: Any) -> None:
    written = storage.run_job("wc", range(1, 3))
    doc = gic.json("state", "k3", "--storage", storage.root, "--job-id", "wc")
    assert doc["source"] == {"kind": "checkpoint", "uri": written[-1].uri, "num_buckets": 4}
    assert (doc["key"], doc["bucket"]) == ("k3", bucket_for("k3", 4))
    assert doc["entries"] == [
        {
            "state": "count",
            "kind": "value",
            "user_key": None,
            "index": None,
            "value": 3,
            "expires_us": None,
            "ttl_by": None,
            "ttl_us": None,
        }
    ]


def test_a_checkpoint_by_id_and_as_a_table(gic: Any, storage: Any) -> None:
    storage.run_job("wc", range(1, 3))
    result = _job(gic, storage, "k3", "--from", "1")
    assert result.exit_code == 0, result.stderr
    assert "bucket" in result.stdout and "chk-000000000001" in result.stdout
    [line] = [ln for ln in result.stdout.splitlines() if " count " in ln]
    assert " value " in line and " 1 " in line


def test_errors_follow_the_contract(gic: Any, storage: Any) -> None:
    storage.run_job("wc", range(1, 2))
    missing = _job(gic, storage, "nope")
    assert missing.exit_code == 1
    [line] = gic.errors(missing)
    assert line.startswith('error: key "nope" has no state in ') and "--int" in line
    other = _job(gic, storage, "k3", "--state", "other")
    assert other.exit_code == 1 and "(its states: count)" in other.stderr
    assert _job(gic, storage, "k3", "--from", "9").exit_code == 1
    no_job = gic("state", "k3", "--storage", storage.root, "--job-id", "absent")
    assert no_job.exit_code == 1 and "no job 'absent'" in no_job.stderr
    bad_int = _job(gic, storage, "x", "--int")
    assert bad_int.exit_code == 2 and "is not an integer" in bad_int.stderr
    corrupt = storage.put("junk/chk-000000000001.manifest", b"not a manifest")
    damaged = gic("state", "k3", "--from", corrupt)
    assert damaged.exit_code == 1
    [line] = gic.errors(damaged)
    assert line.startswith("error: ") and "Traceback" not in damaged.stderr


def test_canonical_savepoint_typed_keys_and_stored_text(gic: Any, storage: Any) -> None:
    backend = KeyedStateBackend(range(4), 4, InMemoryStore(), TestingChangelogWriter())
    backend.value_state("name\x1b[2J").set(("eu", 7), "[bold]x\x07")
    backend.map_state("seen").put(42, b"\x00", {1: 2})
    backend.timer_state().register(42, 1_000_000)
    uri = storage.store.uri_for("savepoints/canon")
    write_canonical_savepoint(backend, uri, storage.resolver)

    doc = gic.json("state", "42", "--int", "--from", uri)
    assert doc["source"]["kind"] == "canonical-savepoint"
    assert {(e["state"], e["kind"]): (e["user_key"], e["value"]) for e in doc["entries"]} == {
        ("seen", "map"): ({"$bytes": "AA=="}, {"$map": [[1, 2]]}),
        ("event", "timer"): (1_000_000, None),
    }
    shown = gic("state", '["eu", 7]', "--json-key", "--from", uri)
    assert shown.exit_code == 0, shown.stderr
    assert "\x1b" not in shown.stdout and "\x07" not in shown.stdout
    assert "name\\x1b[2J" in shown.stdout and '"[bold]x\\u0007"' in shown.stdout
    timer = gic("state", "42", "--int", "--from", uri)
    assert "1970-01-01T00:00:01Z" in timer.stdout


def test_a_native_savepoint(gic: Any, storage: Any) -> None:
    storage.run_job("wc", range(1, 3))
    taken = gic("savepoint", "--storage", storage.root, "--job-id", "wc")
    assert taken.exit_code == 0, taken.stderr
    [entry] = [e for e in storage.channel("wc").entries() if e.outcome is not None]
    doc = gic.json("state", "k3", "--from", entry.outcome.path)
    assert doc["source"]["kind"] == "native-savepoint"
    assert [e["value"] for e in doc["entries"]] == [3]


def test_a_manifest_naming_objects_elsewhere_is_refused(gic: Any, storage: Any) -> None:
    stored = storage.run_job("wc", range(1, 3))[-1]
    moved = map_uris(stored.manifest, lambda uri: uri.replace("/jobs/wc/", "/jobs/other/"))
    uri = storage.store.uri_for("elsewhere/chk-000000000002.manifest")
    write_manifest(storage.resolver, uri, moved)
    refused = gic("state", "k3", "--from", uri)
    assert refused.exit_code == 1
    [line] = gic.errors(refused)
    assert "object(s) outside its directory and its restore source" in line


def test_a_canonical_index_naming_another_file_is_refused(gic: Any, storage: Any) -> None:
    backend = KeyedStateBackend(range(4), 4, InMemoryStore(), TestingChangelogWriter())
    backend.value_state("count").set("k", 1)
    uri = storage.store.uri_for("savepoints/canon")
    index = write_canonical_savepoint(backend, uri, storage.resolver)
    [f] = index.files
    storage.store.delete_many(["savepoints/canon/_canonical.json"])
    renamed = dataclasses.replace(f, name="../../secret.parquet")
    write_canonical_index(storage.resolver, uri, CanonicalIndex(4, (renamed,)))
    refused = gic("state", "k", "--from", uri)
    assert refused.exit_code == 1
    assert "its file must be bucket-" in refused.stderr


def test_nothing_there_and_no_checkpoint_yet(gic: Any, storage: Any, tmp_path: Any) -> None:
    nothing = gic("state", "k", "--from", str(tmp_path / "nowhere"))
    assert nothing.exit_code == 1
    [line] = gic.errors(nothing)
    assert line.startswith("error: no state at file://") and "chk-N.manifest" in line
    storage.write_status("fresh", JobState.RUNNING)
    fresh = gic("state", "k", "--storage", storage.root, "--job-id", "fresh")
    assert fresh.exit_code == 1 and "has no completed checkpoint" in fresh.stderr
