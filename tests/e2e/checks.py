"""What the tests check in storage: sink output counts, files present, savepoints.

The job (``examples/rate_count.py``) writes, per committed micro-batch, one row per key it
touched with the key's running count ``n`` and largest value ``hi``. Its input is a pure
function of the batch id, so the output can be checked exactly after crashes, upgrades
and restores: :func:`check_output` applies the example's own ``check_counts`` to the
latest row per key over every committed batch, and the same rule to every row, and also
refuses a key appearing twice in one batch (a batch published twice).

Thread-safety: pure functions over storage reads.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any, cast

from gic_runtime.sinks import read_file_sink
from gic_runtime.storage.uri import StoreResolver

from .cluster import KEYS

_EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "rate_count.py"
CheckCounts = Callable[[Mapping[int, Mapping[str, Any]], int], list[str]]


@cache
def example_check_counts() -> CheckCounts:
    """``check_counts`` of ``examples/rate_count.py`` (loaded by path: not a package)."""
    spec = importlib.util.spec_from_file_location("gic_e2e_rate_count", _EXAMPLE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return cast(CheckCounts, module.check_counts)


@dataclass(frozen=True)
class OutputReport:
    """The sink output of one job: committed batch ids, the latest row per key and
    every problem found (empty when the counts are exact)."""

    batches: tuple[int, ...]
    latest: Mapping[int, Mapping[str, Any]]
    problems: tuple[str, ...]

    @property
    def last_batch(self) -> int:
        return self.batches[-1] if self.batches else -1


def check_output(resolver: StoreResolver, uri: str, keys: int = KEYS) -> OutputReport:
    """Read the sink at ``uri`` and check it (see the module docstring)."""
    table = read_file_sink(uri, resolver)
    if table is None:
        return OutputReport((), {}, ("no batch was committed to the sink",))
    rows = table.to_pylist()
    check_counts = example_check_counts()
    problems: list[str] = []
    latest: dict[int, dict[str, Any]] = {}
    seen: set[tuple[int, int]] = set()
    batches: set[int] = set()
    for row in rows:  # in batch order
        key, batch = int(row["key"]), int(row["batch_id"])
        batches.add(batch)
        if (key, batch) in seen:
            problems.append(f"key {key} appears twice in batch {batch}")
        seen.add((key, batch))
        problems += [f"batch {batch}: {p}" for p in check_counts({key: row}, keys)]
        latest[key] = row
    problems += [f"latest: {p}" for p in check_counts(latest, keys)]
    missing = sorted(set(range(keys)) - set(latest))
    if missing:
        problems.append(f"keys never written: {missing}")
    return OutputReport(tuple(sorted(batches)), latest, tuple(problems))


def list_uris(resolver: StoreResolver, prefix_uri: str) -> list[str]:
    """URIs of every object under ``prefix_uri`` (a directory: ``/`` is appended)."""
    store, key = resolver.resolve(prefix_uri.rstrip("/") + "/")
    return [store.uri_for(info.key) for info in store.list(key)]


def exists(resolver: StoreResolver, uri: str) -> bool:
    """Whether the object at ``uri`` exists."""
    store, key = resolver.resolve(uri)
    return store.exists(key)
