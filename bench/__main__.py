"""Run every benchmark: ``python -m bench [NAME ...]`` (``make bench``).

Each benchmark module has a ``main()`` that writes ``bench/results/<name>.json`` and a PNG
beside it. Results compare systems side by side within one run, as ratios where it
matters, because absolute times on shared machines are noisy. A benchmark that fails is
reported and the next one still runs; the exit code is 1 if any failed.
"""

from __future__ import annotations

import importlib
import sys
import time
import traceback

BENCHMARKS = (
    "dstl_hedging",
    "checkpoint_cost",
    "state_throughput",
    "selective_read",
    "restore_floor",
    "w1_keyed_count",
    "w2_event_log",
    "w3_sessions",
    "w4_windowed_count",
    "w5_ttl_soak",
    "w1_s3",
    "soak",
    "recovery",
    "state_sweep",
    "operator",
)
MODULES = {
    "w1_keyed_count": "bench.streaming.w1_keyed_count",
    "w2_event_log": "bench.streaming.w2_event_log",
    "w3_sessions": "bench.streaming.w3_sessions",
    "w4_windowed_count": "bench.streaming.w4_windowed_count",
    "w5_ttl_soak": "bench.streaming.w5_ttl_soak",
    "w1_s3": "bench.streaming.w1_s3",
    "soak": "bench.streaming.soak",
    "recovery": "bench.streaming.recovery",
    "state_sweep": "bench.streaming.state_sweep",
}
"""Benchmarks whose module is not ``bench.<name>``."""


def main(argv: list[str]) -> int:
    chosen = argv or list(BENCHMARKS)
    unknown = [name for name in chosen if name not in BENCHMARKS]
    if unknown:
        print(f"unknown benchmark(s): {', '.join(unknown)}; choose from {', '.join(BENCHMARKS)}")
        return 2
    failed: list[str] = []
    for name in chosen:
        started = time.monotonic()
        print(f"== {name}", flush=True)
        try:
            importlib.import_module(MODULES.get(name, f"bench.{name}")).main()
        except Exception:
            traceback.print_exc()
            failed.append(name)
            print(f"== {name} FAILED after {time.monotonic() - started:.1f} s", flush=True)
            continue
        print(f"== {name} done in {time.monotonic() - started:.1f} s", flush=True)
    if failed:
        print(f"failed: {', '.join(failed)}", flush=True)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
