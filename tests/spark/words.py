"""Deterministic word-count input and its reference output (shared by the Spark and
cluster tests; no pyspark import)."""

from __future__ import annotations

import os
from pathlib import Path

WORDS = ["apple", "banana", "cherry", "date", "elder", "fig", "grape", "kiwi", "lemon", "mango"]


def write_text_batches(directory: Path, count: int, *, start: int = 0, lines: int = 30) -> None:
    """``count`` deterministic text files named so a file source reads them in order."""
    directory.mkdir(parents=True, exist_ok=True)
    for i in range(start, start + count):
        rows = [
            " ".join(WORDS[(i * 7 + j * 3 + k) % len(WORDS)] for k in range(1 + (i + j) % 4))
            for j in range(lines)
        ]
        path = directory / f"part-{i:05d}.txt"
        path.write_text("\n".join(rows) + "\n")
        os.utime(path, (1_700_000_000 + i, 1_700_000_000 + i))


def reference_counts(directory: Path, upto: int) -> list[dict[str, int]]:
    """Cumulative word counts after each of the first ``upto`` files (one per batch)."""
    totals: dict[str, int] = {}
    out: list[dict[str, int]] = []
    for path in sorted(directory.glob("part-*.txt"))[:upto]:
        touched: dict[str, int] = {}
        for word in path.read_text().split():
            totals[word] = totals.get(word, 0) + 1
            touched[word] = totals[word]
        out.append(touched)
    return out
