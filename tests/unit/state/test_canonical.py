"""Canonical savepoint: portable export readable with plain pyarrow + msgpack, import with
a fresh lineage (also into a different bucket count), verification on read."""

from __future__ import annotations

import json
from pathlib import Path

import msgpack  # type: ignore[import-untyped, unused-ignore]
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from gic_runtime.errors import CorruptFileError, ObjectExistsError, UnsupportedVersionError
from gic_runtime.event_time import BatchTime
from gic_runtime.formats import crc32c
from gic_runtime.savepoint.canonical import (
    INDEX_NAME,
    read_canonical_index,
    write_canonical_from_states,
    write_canonical_savepoint,
)
from gic_runtime.savepoint.canonical_import import restore_from_canonical
from gic_runtime.state.backend import KeyedStateBackend
from gic_runtime.state.memory_store import InMemoryStore
from gic_runtime.state.ttl import TTL
from gic_runtime.storage.local import LocalObjectStore
from gic_runtime.storage.uri import StoreResolver, join
from gic_runtime.testing.changelog_fakes import TestingChangelogWriter

KEYS = [f"user-{i}" for i in range(40)] + [7, -1, ("t", 2)]


def _filled(num_buckets: int = 8) -> tuple[KeyedStateBackend, TestingChangelogWriter]:
    writer = TestingChangelogWriter()
    backend = KeyedStateBackend(range(num_buckets), num_buckets, InMemoryStore(), writer)
    for i, key in enumerate(KEYS):
        backend.value_state("count").set(key, i)
        backend.map_state("seen").put(key, ("page", i % 3), {"n": i})
        backend.list_state("events").extend(key, [i, str(i), [i, i]])
    return backend, writer


def _dump(backend: KeyedStateBackend) -> dict[str, object]:
    return {
        repr(k): (
            backend.value_state("count").get(k),
            sorted(map(repr, backend.map_state("seen").items(k))),
            backend.list_state("events").get(k),
        )
        for k in KEYS
    }


class TestExport:
    def test_readable_without_the_runtime(
        self, resolver: StoreResolver, object_store: LocalObjectStore
    ) -> None:
        backend, _ = _filled()
        dest = object_store.uri_for("savepoints/sp1")
        index = write_canonical_savepoint(backend, dest, resolver)
        files = sorted((object_store.root / "savepoints/sp1").iterdir())
        assert INDEX_NAME in {f.name for f in files}
        rows = []
        for f in files:
            if f.suffix == ".parquet":
                rows += pq.read_table(f).to_pylist()
        assert len(rows) == sum(f.rows for f in index.files) == len(KEYS) * 5
        counts = {
            msgpack.unpackb(r["key"], use_list=False): msgpack.unpackb(r["value"])
            for r in rows
            if r["state"] == "count"
        }
        assert counts["user-3"] == 3 and counts[("t", 2)] == len(KEYS) - 1
        events = sorted(
            (r["index"], msgpack.unpackb(r["value"]))
            for r in rows
            if r["kind"] == "list" and msgpack.unpackb(r["key"]) == "user-5"
        )
        assert events == [(0, 5), (1, "5"), (2, [5, 5])]
        maps = [r for r in rows if r["kind"] == "map"]
        assert all(r["user_key"] is not None and r["index"] is None for r in maps)
        doc = json.loads((object_store.root / "savepoints/sp1" / INDEX_NAME).read_text())
        assert (doc["format"], doc["version"]) == ("gic-canonical-savepoint", 1)

    def test_export_is_create_if_absent(
        self, resolver: StoreResolver, object_store: LocalObjectStore
    ) -> None:
        backend, _ = _filled()
        dest = object_store.uri_for("sp")
        write_canonical_savepoint(backend, dest, resolver)
        with pytest.raises(ObjectExistsError):
            write_canonical_savepoint(backend, dest, resolver)

    def test_from_bucket_states_equals_live_export(
        self, resolver: StoreResolver, object_store: LocalObjectStore
    ) -> None:
        backend, writer = _filled()
        states = backend.checkpoint().result()
        live = write_canonical_savepoint(backend, object_store.uri_for("live"), resolver)
        offline = write_canonical_from_states(
            states, 8, object_store.uri_for("offline"), resolver, reader=writer.read_changes
        )
        assert [(f.bucket, f.rows, f.size, f.crc) for f in live.files] == [
            (f.bucket, f.rows, f.size, f.crc) for f in offline.files
        ]


class TestImport:
    @pytest.mark.parametrize("target_buckets", [8, 3])
    def test_round_trip_with_fresh_lineage(
        self, resolver: StoreResolver, object_store: LocalObjectStore, target_buckets: int
    ) -> None:
        source, _ = _filled()
        dest = object_store.uri_for("sp")
        write_canonical_savepoint(source, dest, resolver)
        halves = [range(0, target_buckets // 2), range(target_buckets // 2, target_buckets)]
        merged: dict[str, object] = {}
        for part in halves:
            writer = TestingChangelogWriter()
            target = KeyedStateBackend(part, target_buckets, InMemoryStore(), writer)
            stats = restore_from_canonical(target, dest, resolver)
            assert stats.changes == writer.appended
            states = target.checkpoint().result()
            # a fresh lineage: no snapshot, seq counts only the imported changes
            assert all(s.snapshot is None for s in states.values())
            assert sum(s.seq for s in states.values()) == stats.changes
            for k in KEYS:
                try:
                    target.route(k)
                except Exception:
                    continue
                merged[repr(k)] = _dump_one(target, k)
        assert merged == _dump(source)


class TestTimers:
    """Timers travel in canonical savepoints as rows of kind ``timer`` (the domain as
    the state, the time as the user key); the time index is rebuilt on import, also
    under another bucket count."""

    @pytest.mark.parametrize("target_buckets", [8, 5])
    def test_timers_round_trip(
        self, resolver: StoreResolver, object_store: LocalObjectStore, target_buckets: int
    ) -> None:
        source, _ = _filled()
        timers = source.timer_state()
        for i, key in enumerate(KEYS):
            timers.register(key, 1_000 + i)
            if i % 2:
                timers.register(key, -i, "processing")
        dest = object_store.uri_for("sp-timers")
        write_canonical_savepoint(source, dest, resolver)
        rows = [
            r
            for f in (object_store.root / "sp-timers").iterdir()
            if f.suffix == ".parquet"
            for r in pq.read_table(f).to_pylist()
        ]
        timer_rows = [r for r in rows if r["kind"] == "timer"]
        assert len(timer_rows) == len(KEYS) + len(KEYS) // 2  # no time-index rows
        assert {r["state"] for r in timer_rows} == {"event", "processing"}
        assert all(r["value"] == b"" for r in timer_rows)

        target = KeyedStateBackend(
            range(target_buckets), target_buckets, InMemoryStore(), TestingChangelogWriter()
        )
        restore_from_canonical(target, dest, resolver)
        for key in KEYS:
            assert target.timer_state().list(key) == timers.list(key)
        due = target.timer_state().due(range(target_buckets), "event", 1_000 + 4)
        assert [d.at_us for d in due] == [1_000, 1_001, 1_002, 1_003, 1_004]

    def test_bad_timer_row(self, resolver: StoreResolver, object_store: LocalObjectStore) -> None:
        source, _ = _filled()
        source.timer_state().register("user-1", 5)
        dest = object_store.uri_for("sp-bad")
        index = write_canonical_savepoint(source, dest, resolver)
        entry = next(f for f in index.files if f.bucket == source.route("user-1"))
        path = object_store.root / "sp-bad" / entry.name
        table = pq.read_table(path)
        states = [("wall" if k == "timer" else s) for k, s in zip(
            table.column("kind").to_pylist(), table.column("state").to_pylist(), strict=True
        )]  # fmt: skip
        bad = table.set_column(1, "state", pa.array(states, pa.string())).cast(table.schema)
        pq.write_table(bad, path, compression="zstd")
        # re-index the damaged file so only the row itself is wrong
        data = path.read_bytes()
        doc = json.loads((object_store.root / "sp-bad" / INDEX_NAME).read_text())
        for f in doc["body"]["files"]:
            if f["name"] == entry.name:
                f["size"], f["crc32c"] = len(data), crc32c(data)
        doc["crc32c"] = crc32c(
            json.dumps(doc["body"], sort_keys=True, separators=(",", ":")).encode()
        )
        (object_store.root / "sp-bad" / INDEX_NAME).write_text(json.dumps(doc))
        target = KeyedStateBackend(range(8), 8, InMemoryStore(), TestingChangelogWriter())
        with pytest.raises(CorruptFileError, match="timer row with domain 'wall'"):
            restore_from_canonical(target, dest, resolver)


def _dump_one(backend: KeyedStateBackend, k: object) -> object:
    return (
        backend.value_state("count").get(k),
        sorted(map(repr, backend.map_state("seen").items(k))),
        backend.list_state("events").get(k),
    )


class TestVerification:
    def _export(self, resolver: StoreResolver, object_store: LocalObjectStore) -> Path:
        backend, _ = _filled()
        write_canonical_savepoint(backend, object_store.uri_for("sp"), resolver)
        return object_store.root / "sp"

    def test_damaged_bucket_file(
        self, resolver: StoreResolver, object_store: LocalObjectStore
    ) -> None:
        path = self._export(resolver, object_store)
        victim = sorted(path.glob("*.parquet"))[0]
        data = bytearray(victim.read_bytes())
        data[len(data) // 2] ^= 1
        victim.write_bytes(bytes(data))
        target = KeyedStateBackend(range(8), 8, InMemoryStore(), TestingChangelogWriter())
        with pytest.raises(CorruptFileError, match="does not match the index") as err:
            restore_from_canonical(target, object_store.uri_for("sp"), resolver)
        assert victim.name in str(err.value)

    def test_damaged_index(self, resolver: StoreResolver, object_store: LocalObjectStore) -> None:
        path = self._export(resolver, object_store) / INDEX_NAME
        doc = json.loads(path.read_text())
        doc["body"]["files"][0]["rows"] += 1
        path.write_text(json.dumps(doc))
        with pytest.raises(CorruptFileError, match="checksum mismatch"):
            read_canonical_index(resolver, object_store.uri_for("sp"))

    def test_unknown_version(self, resolver: StoreResolver, object_store: LocalObjectStore) -> None:
        path = self._export(resolver, object_store) / INDEX_NAME
        doc = json.loads(path.read_text())
        doc["version"] = 2
        path.write_text(json.dumps(doc))
        with pytest.raises(UnsupportedVersionError, match="version 2"):
            read_canonical_index(resolver, object_store.uri_for("sp"))

    def test_missing_index(self, resolver: StoreResolver, object_store: LocalObjectStore) -> None:
        with pytest.raises(CorruptFileError, match="incomplete") as err:
            read_canonical_index(resolver, object_store.uri_for("nothing"))
        assert join(object_store.uri_for("nothing"), INDEX_NAME) in str(err.value)


class TestTTL:
    """States with a time to live travel with their deadlines (file version 2: the
    columns ``expires_us``, ``ttl_by``, ``ttl_us``); version 1 files still read."""

    @pytest.mark.parametrize("target_buckets", [8, 3])
    def test_ttl_round_trip(
        self, resolver: StoreResolver, object_store: LocalObjectStore, target_buckets: int
    ) -> None:
        source, _ = _filled()
        source.set_batch_time(BatchTime(0, 1_000, None))
        seen = source.value_state("recent", TTL(500))
        pages = source.map_state("pages", TTL(500))
        clicks = source.list_state("clicks", TTL(50, "event"))  # pending: no watermark
        for i, key in enumerate(KEYS):
            seen.set(key, i)
            pages.put(key, "p", [i])
            clicks.extend(key, [i, i + 1])
        dest = object_store.uri_for("sp-ttl")
        write_canonical_savepoint(source, dest, resolver)
        rows = [
            r
            for f in (object_store.root / "sp-ttl").iterdir()
            if f.suffix == ".parquet"
            for r in pq.read_table(f).to_pylist()
        ]
        ttl_rows = [r for r in rows if r["ttl_by"] is not None]
        assert len(ttl_rows) == len(KEYS) * 4
        assert {r["expires_us"] for r in ttl_rows if r["state"] == "recent"} == {1_500}
        assert {r["expires_us"] for r in ttl_rows if r["state"] == "clicks"} == {None}
        assert msgpack.unpackb(next(r for r in ttl_rows if r["state"] == "pages")["value"])

        target = KeyedStateBackend(
            range(target_buckets), target_buckets, InMemoryStore(), TestingChangelogWriter()
        )
        restore_from_canonical(target, dest, resolver)
        target.set_batch_time(BatchTime(0, 1_499, 10))
        for i, key in enumerate(KEYS):
            assert target.value_state("recent", TTL(500)).get(key) == i
            assert target.map_state("pages", TTL(500)).items(key) == [("p", [i])]
            assert target.list_state("clicks", TTL(50, "event")).get(key) == [i, i + 1]
        assert _dump(target) == _dump(source)  # the states without ttl too
        # deadlines came along; the pending elements count from the first watermark
        # a sweep sees (59): due at 109
        target.set_batch_time(BatchTime(0, 1_500, 59))
        assert target.expire() == len(KEYS) * 2  # recent and pages
        target.set_batch_time(BatchTime(0, 1_500, 108))
        assert target.expire() == 0
        target.set_batch_time(BatchTime(0, 1_500, 109))
        assert target.expire() == len(KEYS) * 2  # the clicks

    def test_version_1_files_read(
        self, resolver: StoreResolver, object_store: LocalObjectStore
    ) -> None:
        source, _ = _filled()
        dest = object_store.uri_for("sp-v1")
        index = write_canonical_savepoint(source, dest, resolver)
        doc_path = object_store.root / "sp-v1" / INDEX_NAME
        doc = json.loads(doc_path.read_text())
        for entry in index.files:
            path = object_store.root / "sp-v1" / entry.name
            table = pq.read_table(path)
            meta = {**(table.schema.metadata or {}), b"gic.version": b"1"}
            old = table.select(table.column_names[:7]).replace_schema_metadata(meta)
            pq.write_table(old, path, compression="zstd")
            data = path.read_bytes()
            for f in doc["body"]["files"]:
                if f["name"] == entry.name:
                    f["size"], f["crc32c"] = len(data), crc32c(data)
        doc["crc32c"] = crc32c(
            json.dumps(doc["body"], sort_keys=True, separators=(",", ":")).encode()
        )
        doc_path.write_text(json.dumps(doc))
        target = KeyedStateBackend(range(8), 8, InMemoryStore(), TestingChangelogWriter())
        restore_from_canonical(target, dest, resolver)
        assert _dump(target) == _dump(source)
