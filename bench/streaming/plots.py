"""The plot of one streaming benchmark: throughput, commit latency, bytes per checkpoint.

One PNG, three panels, one bar (group) per system in report order, Spark baselines in
grey tones: rows per second (with GIC's mean local-hit ratio under its label when
known); commit p50 and p99 (ms); bytes uploaded per checkpoint (log scale). Stateless;
matplotlib's non-interactive backend.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from bench import common
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
    title: str | None = None,
) -> Path:
    """Write the three-panel bar chart of ``summaries`` to ``path``; return it.
    ``title``: the result's name (default the workload's)."""
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
    labels = []
    for n in names:
        hits = summaries[n].get("local_hit_ratio_mean")
        labels.append(n if hits is None else f"{n}\nlocal hits {float(hits):.0%}")
    for ax in axes:
        ax.set_xticks(xs)
        ax.set_xticklabels(labels, rotation=25, ha="right", fontsize=8)
    fig.suptitle(
        f"{title or workload.name}: {workload.keys:,} keys, {workload.rows_per_batch:,} "
        f"rows/batch, {params.master}, {workload.partitions} partitions, "
        f"{params.measured} measured batches"
    )
    return common.save_figure(fig, path)


def plot_modes(path: Path, title: str, modes: Mapping[str, Mapping[str, Any]]) -> Path:
    """Two panels per cluster mode: every system's rows/s, and GIC against the best Spark
    store of the mode (with the 1.0x goal and 1.5x aim) and its local-hit ratio."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(modes)
    systems = list(dict.fromkeys(s for m in modes.values() for s in m["systems"]))
    fig, (left, right) = plt.subplots(1, 2, figsize=(13, 4.6))
    width = 0.8 / max(1, len(systems))
    for i, system in enumerate(systems):
        values = [float(modes[m]["systems"].get(system, {}).get("rows_per_s", 0)) for m in names]
        color = "0.35" if system.startswith("spark_") else f"C{i}"
        alpha = 0.4 + 0.6 * i / max(1, len(systems) - 1) if system.startswith("spark_") else 1
        left.bar(
            [x + i * width for x in range(len(names))],
            values,
            width,
            label=system,
            color=color,
            alpha=alpha,
        )
    left.set_xticks([x + width * (len(systems) - 1) / 2 for x in range(len(names))])
    left.set_xticklabels(names)
    left.set_title("Throughput (rows/s) per mode")
    left.legend(fontsize=7)
    ratios = [modes[m].get("gic_rows_per_s_vs_best_spark") for m in names]
    drawn = right.bar(range(len(names)), [r or 0.0 for r in ratios], 0.6, color="C3")
    for bar, mode, ratio in zip(drawn, names, ratios, strict=True):
        hits = modes[mode]["systems"].get("gic", {}).get("local_hit_ratio_mean")
        label = "n/a (not run or failed)" if ratio is None else f"{ratio:.2f}x"
        label += "" if hits is None else f"\nhits {hits:.0%}"
        right.annotate(
            label,
            (bar.get_x() + bar.get_width() / 2, bar.get_height()),
            ha="center",
            va="bottom",
            fontsize=8,
        )
    right.axhline(1.0, color="black", linestyle="--", linewidth=1, label="goal 1.0x")
    right.axhline(1.5, color="grey", linestyle=":", linewidth=1, label="aim 1.5x")
    right.set_xticks(range(len(names)))
    right.set_xticklabels(names)
    right.set_ylim(0, max([1.7, *(r for r in ratios if r is not None)]) * 1.15)
    right.set_title("GIC rows/s / best Spark store of the mode (GIC local-hit ratio)")
    right.legend(fontsize=7)
    fig.suptitle(title)
    return common.save_figure(fig, path)
