"""Helpers shared by the benchmarks: percentiles, result files, plots."""

from __future__ import annotations

import json
import math
import platform
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parent / "results"
SCRATCH = Path(__file__).resolve().parent / "scratch"


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


def _cpus() -> int:
    import os

    return os.cpu_count() or 0
