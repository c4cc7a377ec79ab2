"""A :class:`~gic_runtime.materialization.pool.MaterializationScope` on local storage for
the materialization tests: objects under ``tmp_path / "objects"`` (registered in a
resolver of their own unless one is given), records and markers under ``tmp_path /
"materialized"``, job ``job``, epoch 1, and the clock and pool a test moves by hand when
it passes them (the system clock and this process's pool otherwise)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from gic_runtime.clock import Clock
from gic_runtime.materialization.pool import MaterializationPool, MaterializationScope
from gic_runtime.materialization.scheduler import MaterializationSettings
from gic_runtime.storage.local import LocalObjectStore
from gic_runtime.storage.uri import StoreResolver


def local_scope(
    tmp_path: Path,
    resolver: StoreResolver | None = None,
    *,
    clock: Clock | None = None,
    pool: MaterializationPool | None = None,
    **settings: Any,
) -> MaterializationScope:
    """The scope described in the module docstring, with ``settings`` as its
    :class:`MaterializationSettings`."""
    objects = LocalObjectStore(tmp_path / "objects")
    if resolver is None:
        resolver = StoreResolver()
        resolver.register(objects)
    seams: dict[str, Any] = {}
    if clock is not None:
        seams["clock"] = clock
    if pool is not None:
        seams["pool"] = pool
    return MaterializationScope(
        tmp_path / "materialized",
        objects.root_uri,
        "job",
        1,
        resolver,
        MaterializationSettings(**settings),
        **seams,
    )
