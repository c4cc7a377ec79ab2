"""W2, per-key event log: every registered system appending 64-byte events per key.

100,000 keys, 100,000 events per batch, so the state grows by ~6.4 MB of payload per
batch. See :mod:`bench.streaming.workloads` (Spark rewrites each updated key's whole list;
a list state appends) and :mod:`bench.streaming.harness`. Run:
``.venv/bin/python -m bench w2_event_log`` (``GIC_BENCH_QUICK=1`` for a small smoke run).
Writes ``bench/results/w2_event_log.json`` and ``.png``.
"""

from __future__ import annotations

from bench.streaming.modes import main_for
from bench.streaming.workloads import event_log


def main() -> None:
    main_for(event_log)


if __name__ == "__main__":
    main()
