"""Object stores: the protocol, the local filesystem and S3 implementations, URIs."""

from gic_runtime.storage.listing import count_bounded, list_bounded
from gic_runtime.storage.local import LocalObjectStore
from gic_runtime.storage.object_store import MAX_DELETE_BATCH, ObjectInfo, ObjectStore, read_bounded
from gic_runtime.storage.s3_settings import S3Settings
from gic_runtime.storage.uri import StorageURI, StoreResolver, join, open_store

__all__ = [
    "MAX_DELETE_BATCH",
    "LocalObjectStore",
    "ObjectInfo",
    "ObjectStore",
    "S3Settings",
    "StorageURI",
    "StoreResolver",
    "count_bounded",
    "join",
    "list_bounded",
    "open_store",
    "read_bounded",
]
