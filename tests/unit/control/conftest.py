"""Fixtures of the control-plane record tests: a resolver that knows the local store, and
the store's root URI."""

from __future__ import annotations

import pytest

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
