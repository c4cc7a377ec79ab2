"""Changelog upload latency with a slow tail, with and without request hedging.

Every PUT takes a few milliseconds (2-6 ms injected plus the local write and fsync);
1.5% of PUTs are held for about 2 s, as a slow S3 partition or a lost connection would.
The same seeded fault stream drives both modes. Each mode uploads ``UPLOADS`` segments
from ``CLIENTS`` concurrent writers, each paced to one upload per ``INTERVAL_S`` so both
modes offer the same load, and records the time from ``submit`` to the winning
attempt. ``requests`` counts PUTs actually issued, so the cost of hedging shows.

Run: ``python -m bench.dstl_hedging`` (about a minute). Writes
``bench/results/dstl_hedging.json`` and ``.png``.
"""

from __future__ import annotations

import os
import tempfile
import threading
import time
from typing import Any

from bench.common import bar_plot, percentile, write_result
from gic_runtime.changelog.retrying import RetryPolicy
from gic_runtime.changelog.uploader import HedgingUploader, UploaderSettings
from gic_runtime.storage import LocalObjectStore, StoreResolver
from gic_runtime.testing.faulty_store import FaultRule, TestingFaultyStore

UPLOADS = int(os.environ.get("GIC_BENCH_HEDGING_UPLOADS", "4000"))
CLIENTS = 16
INTERVAL_S = 0.04
SEGMENT_BYTES = 64 * 1024
TAIL_PROBABILITY = 0.015
TAIL_DELAY_S = 2.0
BASE_DELAY_S = 0.002
BASE_JITTER_S = 0.004
SEED = 20240611


def run_mode(hedged: bool) -> dict[str, Any]:
    """Upload ``UPLOADS`` segments; return latency percentiles and request counts."""
    with tempfile.TemporaryDirectory(prefix="gic-bench-hedging-") as tmp:
        store = TestingFaultyStore(LocalObjectStore(tmp), seed=SEED)
        store.add_rule(
            FaultRule(methods=frozenset({"put"}), delay_s=BASE_DELAY_S, jitter_s=BASE_JITTER_S)
        )
        store.add_rule(
            FaultRule(
                methods=frozenset({"put"}),
                delay_s=TAIL_DELAY_S,
                jitter_s=0.2,
                probability=TAIL_PROBABILITY,
            )
        )
        resolver = StoreResolver()
        resolver.register(store)
        counter = iter(range(10**9))
        lock = threading.Lock()

        def new_uri() -> str:
            with lock:
                n = next(counter)
            return store.uri_for(f"changelog/{n:08d}.seg")

        settings = UploaderSettings(
            max_workers=CLIENTS * 3,
            max_in_flight_bytes=1 << 30,
            max_hedges=1 if hedged else 0,
            retry=RetryPolicy(timeout_s=10.0),
        )
        latencies: list[float] = []
        payload = os.urandom(SEGMENT_BYTES)
        per_client = UPLOADS // CLIENTS
        with HedgingUploader(resolver, new_uri, settings) as uploader:

            def client() -> None:
                mine: list[float] = []
                start = time.perf_counter()
                for k in range(per_client):
                    # Paced: the k-th upload starts no earlier than k intervals in, so
                    # both modes offer the same load (a stalled client catches up).
                    time.sleep(max(0.0, start + k * INTERVAL_S - time.perf_counter()))
                    began = time.perf_counter()
                    uploader.submit(payload).result()
                    mine.append(time.perf_counter() - began)
                with lock:
                    latencies.extend(mine)

            delays: list[float] = []
            finished = threading.Event()

            def sample_hedge_delay() -> None:
                while not finished.wait(0.02):
                    delays.append(uploader.hedge_delay())

            began = time.perf_counter()
            threads = [threading.Thread(target=client) for _ in range(CLIENTS)]
            sampler = threading.Thread(target=sample_hedge_delay)
            for t in [*threads, sampler]:
                t.start()
            for t in threads:
                t.join()
            wall = time.perf_counter() - began
            finished.set()
            sampler.join()
        stats = uploader.stats()
        leftover = sum(1 for _ in LocalObjectStore(tmp).list("changelog/"))
        return {
            "uploads": len(latencies),
            "requests": store.calls("put"),
            "hedges": stats.hedges,
            "p50_ms": 1000 * percentile(latencies, 50),
            "p99_ms": 1000 * percentile(latencies, 99),
            "p999_ms": 1000 * percentile(latencies, 99.9),
            "max_ms": 1000 * max(latencies),
            "hedge_delay_ms_median": 1000 * percentile(delays, 50) if hedged else None,
            "hedge_delay_ms_max": 1000 * max(delays) if hedged and delays else None,
            "objects_left": leftover,
            "wall_s": wall,
        }


def main() -> None:
    unhedged = run_mode(hedged=False)
    hedged = run_mode(hedged=True)
    reduction = 1 - hedged["p999_ms"] / unhedged["p999_ms"]
    extra = hedged["requests"] / unhedged["requests"] - 1
    result = {
        "setup": {
            "uploads_per_mode": UPLOADS,
            "concurrent_clients": CLIENTS,
            "client_interval_ms": 1000 * INTERVAL_S,
            "segment_bytes": SEGMENT_BYTES,
            "tail_probability": TAIL_PROBABILITY,
            "tail_delay_s": TAIL_DELAY_S,
            "base_delay_ms": [1000 * BASE_DELAY_S, 1000 * (BASE_DELAY_S + BASE_JITTER_S)],
            "hedge_policy": "adaptive p97 of recent latencies, clamped to [50 ms, 1 s], "
            "1 hedge per upload, budget 5% of uploads",
            "store": "TestingFaultyStore over LocalObjectStore (fsync per PUT)",
        },
        "unhedged": unhedged,
        "hedged": hedged,
        "p999_reduction": reduction,
        "extra_requests_ratio": extra,
        "goal_met": reduction >= 0.40 and extra < 0.05,
    }
    path = write_result("dstl_hedging", result)
    bar_plot(
        "dstl_hedging",
        f"Changelog upload latency, {TAIL_PROBABILITY:.1%} of PUTs ~{TAIL_DELAY_S:.0f} s",
        {
            mode: {"p50": data["p50_ms"], "p99": data["p99_ms"], "p99.9": data["p999_ms"]}
            for mode, data in (("unhedged", unhedged), ("hedged", hedged))
        },
        "latency (ms)",
    )
    print(
        f"p99.9 {unhedged['p999_ms']:.0f} ms -> {hedged['p999_ms']:.0f} ms "
        f"({reduction:.0%} lower), extra requests {extra:.2%}; wrote {path}"
    )


if __name__ == "__main__":
    main()
