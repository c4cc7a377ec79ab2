"""The plot of one streaming benchmark: throughput, commit latency, bytes per checkpoint.

One PNG, three panels, one bar (group) per system in report order, Spark baselines in
grey tones: rows per second; commit p50 and p99 (ms); bytes uploaded per checkpoint (log
scale). Stateless; matplotlib's non-interactive backend.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from bench.streaming.records import BenchParams
from bench.streaming.workloads import WorkloadSpec


def _label(value: float, unit: str) -> str:
    if unit == "bytes":
        for suffix, scale in (("MB", 1e6), ("kB", 1e3)):
            if value >= scale:
                return f"{value / scale:.1f} {suffix}"
        return f"{value:.0f} B"
    if unit == "rows/s":
        return f"{value / 1000:.0f}k"
    return f"{value:.0f}"


def plot(
    path: Path,
    workload: WorkloadSpec,
    params: BenchParams,
    summaries: Mapping[str, Mapping[str, Any]],
) -> Path:
    """Write the three-panel bar chart of ``summaries`` to ``path``; return it."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(summaries)
    colors = ["0.55" if n.startswith("spark_") else f"C{i}" for i, n in enumerate(names)]
    fig, axes = plt.subplots(1, 3, figsize=(max(12, 2.2 * len(names) * 3 / 2), 4.6))
    xs = list(range(len(names)))

    def bars(
        ax: Any, values: list[float], offset: float, width: float, unit: str, **kw: Any
    ) -> None:
        drawn = ax.bar([x + offset for x in xs], values, width, **kw)
        for bar, value in zip(drawn, values, strict=True):
            ax.annotate(
                _label(value, unit),
                (bar.get_x() + bar.get_width() / 2, value),
                ha="center",
                va="bottom",
                fontsize=7,
            )

    ax = axes[0]
    bars(ax, [float(summaries[n]["rows_per_s"]) for n in names], 0, 0.7, "rows/s", color=colors)
    ax.set_title("Throughput (rows/s)")
    ax = axes[1]
    p50 = [float(summaries[n]["commit_ms_p50"]) for n in names]
    p99 = [float(summaries[n]["commit_ms_p99"]) for n in names]
    bars(ax, p50, -0.2, 0.4, "ms", color=colors, alpha=0.6, label="p50")
    bars(ax, p99, 0.2, 0.4, "ms", color=colors, edgecolor="black", label="p99")
    ax.set_title("Commit ms per batch: p50 light, p99 outlined")
    ax = axes[2]
    nbytes = [max(1.0, float(summaries[n]["bytes_uploaded_per_checkpoint"])) for n in names]
    bars(ax, nbytes, 0, 0.7, "bytes", color=colors)
    ax.set_yscale("log")
    ax.set_ylim(min(nbytes) / 3, max(nbytes) * 3)
    ax.set_title("Bytes uploaded per checkpoint (log)")
    for ax in axes:
        ax.set_xticks(xs)
        ax.set_xticklabels(names, rotation=25, ha="right", fontsize=8)
    fig.suptitle(
        f"{workload.name}: {workload.keys:,} keys, {workload.rows_per_batch:,} rows/batch, "
        f"{params.master}, {workload.partitions} partitions, {params.measured} measured batches"
    )
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path
