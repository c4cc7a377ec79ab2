"""Helpers shared by the benchmarks: percentiles, result files, plots, and a changelog
writer that keeps no changelog."""

from __future__ import annotations

import json
import math
import os
import platform
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from concurrent.futures import Future

    from gic_runtime.changelog.records import Op
    from gic_runtime.handles import ChangelogHandle

RESULTS = Path(__file__).resolve().parent / "results"
SCRATCH = Path(__file__).resolve().parent / "scratch"


def quick_mode(environ: Mapping[str, str] | None = None) -> bool:
    """Whether ``GIC_BENCH_QUICK`` (in ``environ``, default the process environment) asks
    for a small smoke run: set to anything but "" or "0"."""
    env = os.environ if environ is None else environ
    return env.get("GIC_BENCH_QUICK", "") not in ("", "0")


def percentile(values: Sequence[float], q: float) -> float:
    """The ``q``-th percentile (0-100) by nearest rank; NaN for no values."""
    if not values:
        return math.nan
    ordered = sorted(values)
    rank = max(1, math.ceil(q / 100 * len(ordered)))
    return float(ordered[rank - 1])


def ratio(value: float | None, reference: float | None, digits: int = 4) -> float | None:
    """``value / reference`` rounded; None if either is missing or ``reference <= 0``."""
    if value is None or reference is None or reference <= 0:
        return None
    return round(value / reference, digits)


def goal(
    name: str,
    value: float | None,
    *,
    met: str,
    at_most: float | None = None,
    at_least: float | None = None,
) -> dict[str, Any]:
    """One goal as the result JSONs state it: ``<name>_at_most`` (or ``_at_least``) with
    the limit, ``<name>`` with the measured value, and ``<met>``: whether the value is
    within the limit (``None`` when it was not measured). Give exactly one limit."""
    if (at_most is None) == (at_least is None):
        raise ValueError(f"goal {name!r} needs exactly one of at_most and at_least")
    if at_most is not None:
        return {
            f"{name}_at_most": at_most,
            name: value,
            met: None if value is None else value <= at_most,
        }
    assert at_least is not None
    return {
        f"{name}_at_least": at_least,
        name: value,
        met: None if value is None else value >= at_least,
    }


def write_result(name: str, data: Mapping[str, Any]) -> Path:
    """Write ``bench/results/<name>.json`` with machine info, return its path."""
    RESULTS.mkdir(parents=True, exist_ok=True)
    payload = {
        "benchmark": name,
        "recorded_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "machine": {"python": platform.python_version(), "cpus": _cpus()},
        **data,
    }
    path = RESULTS / f"{name}.json"
    path.write_text(json.dumps(payload, indent=2, sort_keys=False) + "\n")
    return path


def bar_plot(name: str, title: str, series: Mapping[str, Mapping[str, float]], ylabel: str) -> Path:
    """Grouped bar chart: one group per metric, one bar per system. Writes ``<name>.png``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    systems = list(series)
    metrics = list(next(iter(series.values())))
    fig, ax = plt.subplots(figsize=(max(6, 1.6 * len(metrics) * len(systems) / 2), 4))
    width = 0.8 / len(systems)
    for i, system in enumerate(systems):
        xs = [m + i * width for m in range(len(metrics))]
        ax.bar(xs, [series[system][m] for m in metrics], width, label=system)
    ax.set_xticks([m + width * (len(systems) - 1) / 2 for m in range(len(metrics))])
    ax.set_xticklabels(metrics)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.legend()
    return save_figure(fig, RESULTS / f"{name}.png")


def save_figure(fig: Any, path: Path) -> Path:
    """Lay ``fig`` out, write it as a PNG at ``path`` (creating its directory) and close it."""
    import matplotlib.pyplot as plt

    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


class SeqOnlyWriter:
    """Changelog writer that only numbers changes: the "no changelog" case of a
    benchmark (:mod:`bench.state_throughput`; the full-snapshot baseline and the restore
    check of :mod:`bench.checkpoint_cost`). It can never persist.

    Single-threaded, like the backend that owns it.
    """

    def __init__(self) -> None:
        self._next: dict[int, int] = {}

    def append(self, bucket: int, op: Op, key: bytes, value: bytes = b"") -> int:
        seq = self._next.get(bucket, 0)
        self._next[bucket] = seq + 1
        return seq

    def append_many(
        self, bucket: int, op: Op, keys: Sequence[bytes], values: Sequence[bytes]
    ) -> int:
        first = self._next.get(bucket, 0)
        self._next[bucket] = first + len(keys)
        return first

    def next_seq(self, bucket: int) -> int:
        return self._next.get(bucket, 0)

    def reset(self, bucket: int, next_seq: int) -> None:
        self._next[bucket] = next_seq

    def persist(self, since: Mapping[int, int]) -> Future[dict[int, tuple[ChangelogHandle, ...]]]:
        raise NotImplementedError("this writer keeps no changelog; it never persists")

    def truncate(self, bucket: int, before_seq: int) -> None:
        """Nothing is kept, so nothing to drop."""

    def close(self) -> None:
        """Nothing to release."""


def _cpus() -> int:
    return os.cpu_count() or 0
