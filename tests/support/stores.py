"""Object stores for tests that wrap a real one: :class:`DelegatingStore` passes every
:class:`~gic_runtime.storage.object_store.ObjectStore` call to ``inner``, so a test store
overrides only the calls it changes (a failing delete, a hook between a LIST and its
answer reaching the caller, a scheduling point per request). :class:`StorageRoot` is a
store registered in its own resolver with its root URI, what most storage tests start
from. :func:`lost_put_answers` puts a store behind PUTs whose answers get lost;
:class:`TestingSnapshotFaults` is a resolver whose snapshot objects fail to resolve.

Thread-safety: as the wrapped store's (a subclass adds its own).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any, BinaryIO

from gic_runtime.errors import TransientStorageError
from gic_runtime.storage.object_store import ObjectInfo, ObjectStore
from gic_runtime.storage.uri import StoreResolver
from gic_runtime.testing.faulty_store import FaultRule, TestingFaultyStore


class DelegatingStore:
    """Every call passed to ``inner`` unchanged."""

    __test__ = False

    def __init__(self, inner: ObjectStore) -> None:
        self.inner = inner

    @property
    def root_uri(self) -> str:
        return self.inner.root_uri

    def uri_for(self, key: str) -> str:
        return self.inner.uri_for(key)

    def put(self, key: str, data: bytes, *, if_absent: bool = False) -> None:
        self.inner.put(key, data, if_absent=if_absent)

    def put_file(self, key: str, file: BinaryIO, size: int, *, if_absent: bool = False) -> None:
        """Read into memory and passed on as :meth:`put`, so a subclass that changes PUTs
        changes these too."""
        file.seek(0)
        data = file.read(size)
        self.put(key, data, if_absent=if_absent)

    def get(self, key: str, *, start: int = 0, length: int | None = None) -> bytes:
        return self.inner.get(key, start=start, length=length)

    def size(self, key: str) -> int:
        return self.inner.size(key)

    def exists(self, key: str) -> bool:
        return self.inner.exists(key)

    def list(self, prefix: str = "") -> Iterator[ObjectInfo]:
        return self.inner.list(prefix)

    def delete_many(self, keys: Iterable[str]) -> int:
        return self.inner.delete_many(keys)

    def copy(self, src_key: str, dst_key: str) -> None:
        self.inner.copy(src_key, dst_key)


@dataclass(frozen=True)
class StorageRoot:
    """A store, a resolver that knows it, and the store's root URI."""

    store: ObjectStore
    resolver: StoreResolver
    root: str


def storage_root(store: ObjectStore) -> StorageRoot:
    """``store`` registered in a fresh resolver."""
    resolver = StoreResolver()
    resolver.register(store)
    return StorageRoot(store, resolver, store.root_uri)


def lost_put_answers(
    storage: StorageRoot, error: Callable[[], Exception], times: int
) -> StorageRoot:
    """``storage``'s store behind a :class:`~gic_runtime.testing.faulty_store.TestingFaultyStore`
    whose next ``times`` PUTs take effect but raise ``error()`` (a request that succeeded
    on the server whose answer was lost), registered in a fresh resolver."""
    faulty = TestingFaultyStore(storage.store)
    faulty.add_rule(FaultRule(methods=frozenset({"put"}), error=error, after=True, times=times))
    return storage_root(faulty)


class TestingSnapshotFaults(StoreResolver):
    """Fails the next ``failures`` resolves of snapshot objects (changelog uploads pass)."""

    __test__ = False

    def __init__(self, store: ObjectStore) -> None:
        super().__init__()
        self.register(store)
        self.failures = 0

    def resolve(self, uri: str) -> tuple[Any, str]:
        if self.failures and "/snapshots/" in uri:
            self.failures -= 1
            raise TransientStorageError("injected: 503 SlowDown", uri=uri)
        return super().resolve(uri)
