"""Storage URIs: parse them, open stores for them, and resolve object URIs to stores.

Supported schemes: ``file:///absolute/path`` (or a plain path) and
``s3://bucket/prefix``. Handles in manifests name objects by full URI, so a manifest
may reference files under several roots (a job's own directory, a claimed savepoint);
:class:`StoreResolver` maps each URI to a store and a key, opening one store per S3
bucket or per filesystem.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote, urlparse

from gic_runtime.errors import ConfigurationError
from gic_runtime.storage.local import LocalObjectStore
from gic_runtime.storage.object_store import ObjectStore
from gic_runtime.storage.s3_settings import S3Settings


@dataclass(frozen=True, slots=True)
class StorageURI:
    """A parsed storage location: ``scheme`` is ``file`` or ``s3``; for ``s3``, ``bucket``
    is the bucket and ``path`` the key prefix; for ``file``, ``path`` is absolute."""

    scheme: str
    bucket: str
    path: str

    @classmethod
    def parse(cls, uri: str) -> StorageURI:
        """Parse ``uri``; a bare path is taken as a local directory."""
        if "://" not in uri:
            return cls("file", "", str(Path(uri).absolute()))
        parsed = urlparse(uri)
        if parsed.scheme == "file":
            if parsed.netloc not in ("", "localhost"):
                raise ConfigurationError(
                    f"file URI {uri!r} names host {parsed.netloc!r}; use file:///absolute/path"
                )
            return cls("file", "", unquote(parsed.path) or "/")
        if parsed.scheme == "s3":
            if not parsed.netloc:
                raise ConfigurationError(
                    f"S3 URI {uri!r} has no bucket; use s3://BUCKET/optional/prefix"
                )
            return cls("s3", parsed.netloc, parsed.path.strip("/"))
        raise ConfigurationError(
            f"unsupported storage URI scheme {parsed.scheme!r} in {uri!r}; "
            "use file:///path or s3://bucket/prefix"
        )

    def __str__(self) -> str:
        if self.scheme == "file":
            return Path(self.path).as_uri()
        return f"s3://{self.bucket}/{self.path}" if self.path else f"s3://{self.bucket}"


def join(uri: str, *parts: str) -> str:
    """Join path segments onto a URI with single slashes."""
    out = uri.rstrip("/")
    for part in parts:
        segment = part.strip("/")
        if segment:
            out = f"{out}/{segment}"
    return out


def open_store(uri: str, s3: S3Settings | None = None) -> ObjectStore:
    """Open a store rooted at ``uri``. S3 settings default to the environment."""
    loc = StorageURI.parse(uri)
    if loc.scheme == "file":
        return LocalObjectStore(loc.path)
    from gic_runtime.storage.s3 import S3ObjectStore

    return S3ObjectStore(loc.bucket, loc.path, settings=s3 or S3Settings.from_env())


class StoreResolver:
    """Maps object URIs to ``(store, key)``.

    Stores registered with :meth:`register` win for URIs under their root (longest root
    first); any other URI gets a store opened lazily at its filesystem root or S3 bucket
    and reused. Thread-safe.
    """

    def __init__(self, s3: S3Settings | None = None) -> None:
        self._s3 = s3
        self._registered: list[tuple[str, ObjectStore]] = []
        self._opened: dict[tuple[str, str], ObjectStore] = {}
        self._lock = threading.Lock()

    def register(self, store: ObjectStore) -> None:
        """Serve every URI under ``store.root_uri`` from ``store``."""
        with self._lock:
            self._registered.append((store.root_uri.rstrip("/") + "/", store))
            self._registered.sort(key=lambda item: -len(item[0]))

    def resolve(self, uri: str) -> tuple[ObjectStore, str]:
        """Return the store holding ``uri`` and the object's key in it."""
        with self._lock:
            for prefix, store in self._registered:
                if uri.startswith(prefix):
                    return store, uri[len(prefix) :]
            loc = StorageURI.parse(uri)
            opened = self._opened.get((loc.scheme, loc.bucket))
            if opened is None:
                if loc.scheme == "file":
                    opened = LocalObjectStore("/")
                else:
                    from gic_runtime.storage.s3 import S3ObjectStore

                    opened = S3ObjectStore(
                        loc.bucket, "", settings=self._s3 or S3Settings.from_env()
                    )
                self._opened[(loc.scheme, loc.bucket)] = opened
            return opened, loc.path.lstrip("/")
