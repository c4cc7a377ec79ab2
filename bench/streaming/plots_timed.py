"""Plot of a repeated comparison (:mod:`bench.streaming.repeats`): one row per cluster
mode; left, every system's median rows/s with its min-max spread over the rounds
(baselines grey); right, each contender's median rows/s over the best baseline of the
same round, with its spread, the goal and the aim. A system has one colour in every mode
(:func:`system_colors`). Stateless; matplotlib's Agg backend.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bench import common

if TYPE_CHECKING:
    from bench.streaming.repeats import Comparison

BASELINE_COLOR = "0.55"
CONTENDER_COLOR = "C3"
OTHER_COLORS = ("C4", "C5", "C1", "C2", "C0", "C6", "C7", "C8", "C9")
"""Colours of the systems shown beside (the floor, variants), in first-seen order."""
HEADROOM = 1.35
"""The ratio axis reaches this much above its tallest bar, whisker or line."""


def plot_comparison(path: Path, comparison: Comparison, per_mode: Mapping[str, Any]) -> Path:
    """Write the figure to ``path``; return it."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    colors_of = system_colors(comparison, per_mode)
    rows = max(1, len(per_mode))
    fig, axes = plt.subplots(rows, 2, figsize=(13, 4.2 * rows), squeeze=False)
    for (left, right), (mode, data) in zip(axes, per_mode.items(), strict=False):
        systems = data["systems"]
        names = [n for n in systems if systems[n]["rows_per_s"]["median"] is not None]
        med = [systems[n]["rows_per_s"]["median"] for n in names]
        low = [m - systems[n]["rows_per_s"]["min"] for n, m in zip(names, med, strict=True)]
        high = [systems[n]["rows_per_s"]["max"] - m for n, m in zip(names, med, strict=True)]
        colors = [colors_of[n] for n in names]
        bars = left.bar(range(len(names)), med, 0.6, yerr=[low, high], color=colors, capsize=4)
        for bar, value in zip(bars, med, strict=True):
            left.annotate(
                f"{value / 1000:.1f}k",
                (bar.get_x() + bar.get_width() / 2, value),
                ha="center",
                va="bottom",
                fontsize=7,
            )
        left.set_xticks(range(len(names)))
        left.set_xticklabels(names, rotation=20, ha="right", fontsize=8)
        left.set_title(f"{mode} ({data['master']}): rows/s, median and min-max over rounds")
        ratios = data["ratios"]["ratios"]
        contenders = [c for c in ratios if ratios[c]["median"] is not None]
        values = [ratios[c]["median"] for c in contenders]
        err = [
            [v - ratios[c]["min"] for c, v in zip(contenders, values, strict=True)],
            [ratios[c]["max"] - v for c, v in zip(contenders, values, strict=True)],
        ]
        drawn = right.bar(
            range(len(contenders)), values, 0.5, yerr=err, color=CONTENDER_COLOR, capsize=4
        )
        for bar, value in zip(drawn, values, strict=True):
            right.annotate(
                f"{value:.2f}x",
                (bar.get_x() + bar.get_width() / 2, value),
                ha="center",
                va="bottom",
                fontsize=8,
            )
        right.axhline(comparison.goal, color="black", linestyle="--", linewidth=1, label="goal")
        if comparison.aim:
            right.axhline(comparison.aim, color="grey", linestyle=":", linewidth=1, label="aim")
        # headroom above the tallest bar, whisker or line, so the legend never sits on a bar
        tops = [v + e for v, e in zip(values, err[1], strict=True)]
        right.set_ylim(0, max([*tops, comparison.goal, comparison.aim or 0.0]) * HEADROOM)
        right.set_xticks(range(len(contenders)))
        right.set_xticklabels(contenders, fontsize=8)
        identical = data["outputs"]["identical"]
        right.set_title(
            f"rows/s / best baseline of the round (outputs identical: {identical})", fontsize=9
        )
        right.legend(fontsize=7, loc="upper right")
    versus = f"{', '.join(comparison.contenders)} vs {', '.join(comparison.baselines)}"
    fig.suptitle(f"{comparison.name}: {versus}")
    return common.save_figure(fig, path)


def system_colors(comparison: Comparison, per_mode: Mapping[str, Any]) -> dict[str, str]:
    """One colour per system over every mode: baselines grey, contenders the ratio bars'
    red, every other system the next of :data:`OTHER_COLORS` in the order it first
    appears (so a system missing from one mode does not shift the others' colours)."""
    colors: dict[str, str] = {}
    others = 0
    for data in per_mode.values():
        for name in data["systems"]:
            if name in colors:
                continue
            if name in comparison.baselines:
                colors[name] = BASELINE_COLOR
            elif name in comparison.contenders:
                colors[name] = CONTENDER_COLOR
            else:
                colors[name] = OTHER_COLORS[others % len(OTHER_COLORS)]
                others += 1
    return colors
