"""Shared fixtures of the state tests: a store of each kind."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from gic_runtime.state.lmdb_store import LmdbStore
from gic_runtime.state.memory_store import InMemoryStore
from gic_runtime.state.stores import KVStore
from gic_runtime.storage.local import LocalObjectStore
from gic_runtime.storage.uri import StoreResolver


@pytest.fixture(params=["memory", "lmdb"])
def make_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Callable[[], KVStore]]:
    """Factory of fresh, empty stores of the parametrized kind (closed at teardown)."""
    made: list[KVStore] = []
    counter = iter(range(1_000))

    def make() -> KVStore:
        store: KVStore
        if request.param == "memory":
            store = InMemoryStore()
        else:
            store = LmdbStore(tmp_path / f"lmdb-{next(counter)}", map_size=1 << 26)
        made.append(store)
        return store

    yield make
    for store in made:
        store.close()


@pytest.fixture
def object_store(tmp_path: Path) -> LocalObjectStore:
    return LocalObjectStore(tmp_path / "objects")


@pytest.fixture
def resolver(object_store: LocalObjectStore) -> StoreResolver:
    resolver = StoreResolver()
    resolver.register(object_store)
    return resolver
