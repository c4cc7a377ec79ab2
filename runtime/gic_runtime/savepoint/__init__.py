"""Savepoints: self-contained, user-owned snapshots at a batch boundary.

Native savepoints (:mod:`gic_runtime.savepoint.native`) duplicate a checkpoint's own
files; canonical savepoints (:mod:`gic_runtime.savepoint.canonical`) are a portable
per-bucket export, imported from its own submodule.
"""

from gic_runtime.savepoint.native import (
    NativeSavepoint,
    load_savepoint,
    savepoint_manifest_uri,
    write_native_savepoint,
)

__all__ = [
    "NativeSavepoint",
    "load_savepoint",
    "savepoint_manifest_uri",
    "write_native_savepoint",
]
