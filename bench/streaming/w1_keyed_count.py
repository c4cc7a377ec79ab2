"""W1, keyed count: every registered system on 500,000 keys, 100,000 rows per batch.

See :mod:`bench.streaming.workloads` for the workload and :mod:`bench.streaming.harness`
for what is measured and compared. Run: ``.venv/bin/python -m bench w1_keyed_count``
(``GIC_BENCH_QUICK=1`` for a small smoke run). Writes ``bench/results/w1_keyed_count.json``
and ``.png``.
"""

from __future__ import annotations

from bench.streaming.modes import main_for
from bench.streaming.workloads import keyed_count


def main() -> None:
    main_for(keyed_count)


if __name__ == "__main__":
    main()
