"""Storage URIs: parsing, joining, opening stores, and resolving object URIs to stores."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from gic_runtime.errors import ConfigurationError
from gic_runtime.storage.local import LocalObjectStore
from gic_runtime.storage.s3 import S3ObjectStore
from gic_runtime.storage.s3_settings import S3Settings
from gic_runtime.storage.uri import StorageURI, StoreResolver, join, open_store

OFFLINE = S3Settings(
    endpoint_url="http://127.0.0.1:9", region="us-east-1", access_key_id="a", secret_access_key="b"
)


class TestParse:
    @pytest.mark.parametrize(
        ("uri", "bucket", "path"),
        [
            ("s3://bkt/a/b", "bkt", "a/b"),
            ("s3://bkt/a/b/", "bkt", "a/b"),
            ("s3://bkt", "bkt", ""),
            ("s3://bkt/", "bkt", ""),
        ],
    )
    def test_s3(self, uri: str, bucket: str, path: str) -> None:
        assert StorageURI.parse(uri) == StorageURI("s3", bucket, path)

    def test_file(self) -> None:
        assert StorageURI.parse("file:///data/gic") == StorageURI("file", "", "/data/gic")

    def test_file_localhost(self) -> None:
        assert StorageURI.parse("file://localhost/data") == StorageURI("file", "", "/data")

    def test_file_percent_decoded(self) -> None:
        assert StorageURI.parse("file:///a%20b/c").path == "/a b/c"

    def test_bare_path_is_absolute_local(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        monkeypatch.chdir(tmp_path)
        assert StorageURI.parse("rel/dir") == StorageURI("file", "", str(tmp_path / "rel/dir"))

    @pytest.mark.parametrize(
        ("uri", "hint"),
        [
            ("file://server/share", "file:///absolute/path"),
            ("s3:///prefix", "s3://BUCKET"),
            ("gs://bkt/x", "unsupported storage URI scheme"),
        ],
    )
    def test_rejected(self, uri: str, hint: str) -> None:
        with pytest.raises(ConfigurationError, match=hint):
            StorageURI.parse(uri)

    @pytest.mark.parametrize("uri", ["s3://bkt/a/b", "s3://bkt", "file:///data/gic"])
    def test_str_roundtrip(self, uri: str) -> None:
        assert str(StorageURI.parse(uri)) == uri


class TestJoin:
    def test_single_slashes(self) -> None:
        assert join("s3://b/p/", "/a/", "b", "", "c/") == "s3://b/p/a/b/c"

    def test_no_parts(self) -> None:
        assert join("file:///x/") == "file:///x"


class TestOpenStore:
    def test_file(self, tmp_path: Path) -> None:
        store = open_store((tmp_path / "root").as_uri())
        assert isinstance(store, LocalObjectStore)
        assert store.root_uri == (tmp_path / "root").as_uri()

    def test_s3(self) -> None:
        store = open_store("s3://bkt/jobs/x", OFFLINE)
        assert isinstance(store, S3ObjectStore)
        assert store.root_uri == "s3://bkt/jobs/x"


class TestResolver:
    def test_longest_registered_root_wins(self, tmp_path: Path) -> None:
        outer = LocalObjectStore(tmp_path / "root")
        inner = LocalObjectStore(tmp_path / "root" / "savepoints")
        resolver = StoreResolver(OFFLINE)
        resolver.register(inner)
        resolver.register(outer)
        assert resolver.resolve(inner.uri_for("sp1/m")) == (inner, "sp1/m")
        assert resolver.resolve(outer.uri_for("job/m")) == (outer, "job/m")

    def test_sibling_with_common_name_prefix_is_not_under_root(self) -> None:
        store = S3ObjectStore("bkt", "job", settings=OFFLINE)
        resolver = StoreResolver(OFFLINE)
        resolver.register(store)
        other, key = resolver.resolve("s3://bkt/job2/x")
        assert other is not store
        assert key == "job2/x"
        assert resolver.resolve("s3://bkt/job/x") == (store, "x")

    def test_unregistered_s3_uris_share_one_store_per_bucket(self) -> None:
        resolver = StoreResolver(OFFLINE)
        first, key1 = resolver.resolve("s3://bkt/a/b")
        second, key2 = resolver.resolve("s3://bkt/c")
        third, _ = resolver.resolve("s3://other/c")
        assert isinstance(first, S3ObjectStore)
        assert first is second
        assert third is not first
        assert (key1, key2) == ("a/b", "c")
        assert first.uri_for(key1) == "s3://bkt/a/b"

    def test_unregistered_file_uri_resolves_from_filesystem_root(self, tmp_path: Path) -> None:
        target = tmp_path / "x" / "obj"
        target.parent.mkdir()
        target.write_bytes(b"data")
        store, key = StoreResolver(OFFLINE).resolve(target.as_uri())
        assert key == str(target).lstrip(os.sep)
        assert store.get(key) == b"data"

    def test_resolves_what_uri_for_produces(self, local_store: LocalObjectStore) -> None:
        resolver = StoreResolver(OFFLINE)
        resolver.register(local_store)
        local_store.put("a/b", b"v")
        store, key = resolver.resolve(local_store.uri_for("a/b"))
        assert store is local_store
        assert store.get(key) == b"v"

    @pytest.mark.s3
    def test_registered_s3_store_roundtrip(self, s3_store: S3ObjectStore) -> None:
        resolver = StoreResolver(OFFLINE)
        resolver.register(s3_store)
        s3_store.put("seg/1", b"bytes")
        store, key = resolver.resolve(s3_store.uri_for("seg/1"))
        assert store is s3_store
        assert store.get(key) == b"bytes"
