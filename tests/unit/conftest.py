"""Fixtures of the control-plane record tests: a resolver that knows the local store,
the store's root URI, and both together as a :class:`~tests.support.stores.StorageRoot`."""

from __future__ import annotations

import pytest
from tests.support.stores import StorageRoot, storage_root

from gic_runtime.storage.local import LocalObjectStore
from gic_runtime.storage.uri import StoreResolver


@pytest.fixture
def resolver(local_store: LocalObjectStore) -> StoreResolver:
    r = StoreResolver()
    r.register(local_store)
    return r


@pytest.fixture
def root(local_store: LocalObjectStore) -> str:
    return local_store.root_uri


@pytest.fixture
def storage(local_store: LocalObjectStore) -> StorageRoot:
    """The local store registered in its own resolver."""
    return storage_root(local_store)
