"""Keyed state: value/map/list states over buckets, stores, snapshots and restore."""

from gic_runtime.state.backend import KeyedStateBackend, MaterializationView, RestoreSummary
from gic_runtime.state.keys import bucket_for
from gic_runtime.state.lmdb_store import LmdbStore
from gic_runtime.state.memory_store import InMemoryStore
from gic_runtime.state.states import ListState, MapState, ValueState
from gic_runtime.state.stores import BucketMeta, BucketView, KVStore

__all__ = [
    "BucketMeta",
    "BucketView",
    "InMemoryStore",
    "KVStore",
    "KeyedStateBackend",
    "ListState",
    "LmdbStore",
    "MapState",
    "MaterializationView",
    "RestoreSummary",
    "ValueState",
    "bucket_for",
]
