"""How fast any restore of the state sweep's 4 GB state could be on this machine.

The state sweep's restart at 4 GB (docs/architecture.md §12) reads the whole stored state
before its first batch can end: every batch touches every bucket. This measures the floor
under any such restore, by the same path the sweep's systems use, without GIC's formats
or its per-entry work: objects shaped like the restart's reads (``snapshots`` snapshot
objects of ``snapshot_bytes`` in all and changelog segments of ``segment_bytes`` up to
``tail_bytes``, zstd-compressed hex text as the sweep's ``sha2`` payloads), in one bucket
of a SeaweedFS server on loopback, read by ``processes`` processes (the sweep's two
executor slots) with ``threads`` threads each, one GET per object. Four paths:

``fetch``
    every object through the latency proxy (``latency_ms`` a request, as in the sweep),
    its body read and dropped: the floor of any restore that reads the stored state;
``fetch_unproxied``
    the same, straight to SeaweedFS: what the proxy, a benchmark artifact both systems
    pay, adds;
``fetch_write``
    ``fetch`` and each body written as it is to a local file: the floor of a restore whose
    local copy stays compressed (as a store of compressed blocks keeps it: RocksDB's SST
    files are copied down so);
``fetch_decompress``
    ``fetch`` and each body decompressed into memory (dropped): the floor of a restore
    that holds the state uncompressed;
``fetch_decompress_write``
    and each snapshot's uncompressed bytes written to a local file (the changelog's are
    decompressed, not written: a restore folds them into the snapshots' entries and
    writes the state once): the floor of any restore that lays the state down
    uncompressed on local disk before the first batch, as GIC's LMDB copies do (an image
    of the store, copied as is, costs this much; a restore that builds the store entry by
    entry costs more).

In ``rounds`` interleaved rounds (the order alternates), per path: wall time, CPU time
of the reading processes, of the S3 server and of the benchmark's own process (the
proxy's threads). Every path's bytes are checked against what was stored.

The figures are set against the sweep's recorded restart (``state_sweep.json``'s 4 GB
section, when it is there): the goal is a first batch at most a quarter of Spark's
restart after the query's start, and a first batch ends no earlier than the restore it
waits for.

Run: ``.venv/bin/python -m bench restore_floor`` (``GIC_BENCH_QUICK=1``: a small smoke
run). Writes ``bench/results/restore_floor.json`` and ``.png``.
"""

from __future__ import annotations

import dataclasses
import json
import multiprocessing
import os
import random
import shutil
import sys
import time
import uuid
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any
from unittest import mock

from bench.common import RESULTS, SCRATCH, quick_mode, save_figure, write_result

NAME = "restore_floor"
MODES = ("fetch", "fetch_unproxied", "fetch_write", "fetch_decompress", "fetch_decompress_write")
SWEEP_SIZE = "4GB"
SNAPSHOTS = "snapshots/"
"""Key prefix of the snapshot objects; the rest are changelog segments."""
RESTART_GOAL = 0.25
"""Issue goal: the first batch after a restart at 4 GB at most this fraction of Spark's."""
SPARK = "spark_rocksdb_changelog_s3a"
GIC = "gic_s3"


@dataclasses.dataclass(frozen=True)
class Params:
    snapshots: int = 128
    snapshot_bytes: int = 2_091_180_448
    """The 4 GB restart's snapshots (``adopted_snapshot_bytes`` of its first batch)."""
    tail_bytes: int = 678_471_592
    """The rest of what the 4 GB run stored (its median ``stored_bytes``, 2,769,652,040,
    less the snapshots): the changelog a restore replays, read whole here."""
    segment_bytes: int = 4 << 20
    latency_ms: int = 20
    processes: int = 2
    threads: int = 8
    rounds: int = 3
    distinct_payloads: int = 4
    """Distinct object bodies (generating 4 GB of compressed text costs minutes; SeaweedFS
    stores every object's bytes whatever they hold)."""
    seed: int = 7


QUICK = Params(snapshots=4, snapshot_bytes=4 << 20, tail_bytes=2 << 20, segment_bytes=1 << 20)


@dataclasses.dataclass(frozen=True)
class Stored:
    """What was put in the bucket: per object its key and uncompressed length."""

    keys: tuple[str, ...]
    raw_bytes: Mapping[str, int]
    stored_bytes: int


# --- the state's objects ---------------------------------------------------------------


def compressed_hex(rng: random.Random, target: int) -> tuple[bytes, int]:
    """A zstd frame of hex text compressing to about ``target`` bytes, and its raw length
    (hex text compresses to a little over half: 4 bits of entropy per character, plus
    the frame's tables)."""
    import pyarrow as pa

    codec = pa.Codec("zstd", compression_level=3)
    sample = rng.randbytes(1 << 16).hex().encode()
    per_byte = len(codec.compress(sample, asbytes=True)) / (len(sample) // 2)
    raw = rng.randbytes(max(1, round(target / per_byte))).hex().encode()
    return codec.compress(raw, asbytes=True), len(raw)


def object_sizes(total: int, count: int) -> list[int]:
    """``total`` bytes split into ``count`` objects as even as whole bytes allow."""
    if count <= 0 or total <= 0:
        return []
    base, extra = divmod(total, count)
    return [base + (1 if i < extra else 0) for i in range(count)]


def shape(p: Params) -> list[tuple[str, int]]:
    """Every object the restore reads: ``(key, target compressed bytes)``, snapshots first."""
    segments = max(1, round(p.tail_bytes / p.segment_bytes)) if p.tail_bytes > 0 else 0
    snaps = [
        (f"{SNAPSHOTS}bucket-{i:05d}", n)
        for i, n in enumerate(object_sizes(p.snapshot_bytes, p.snapshots))
    ]
    tail = [
        (f"changelog/segment-{i:06d}", n)
        for i, n in enumerate(object_sizes(p.tail_bytes, segments))
    ]
    return snaps + tail


def put_state(store: Any, p: Params) -> Stored:
    """Write the objects of :func:`shape`: bodies from ``distinct_payloads`` generated
    texts per object size class, on 8 threads."""
    rng = random.Random(p.seed)
    objects = shape(p)
    bodies: dict[tuple[int, int], tuple[bytes, int]] = {}
    plan: list[tuple[str, tuple[int, int]]] = []
    for i, (key, target) in enumerate(objects):
        slot = (target, i % max(1, p.distinct_payloads))
        if slot not in bodies:
            bodies[slot] = compressed_hex(rng, target)
        plan.append((key, slot))

    def put(item: tuple[str, tuple[int, int]]) -> None:
        store.put(item[0], bodies[item[1]][0])

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(put, plan))
    return Stored(
        keys=tuple(k for k, _ in plan),
        raw_bytes={k: bodies[s][1] for k, s in plan},
        stored_bytes=sum(len(bodies[s][0]) for _, s in plan),
    )


# --- reading it back, in worker processes ----------------------------------------------


@dataclasses.dataclass(frozen=True)
class Reader:
    """Where a reading process reads from and how."""

    endpoint: str
    settings: Mapping[str, Any]
    bucket: str
    prefix: str
    threads: int = 8
    mode: str = "fetch"
    out_dir: str = ""


_STORES: dict[tuple[str, str, str], Any] = {}
"""A worker process's stores by (endpoint, bucket, prefix): connected before timing."""


def _store(r: Reader) -> Any:
    from gic_runtime.storage.s3 import S3ObjectStore
    from gic_runtime.storage.s3_settings import S3Settings

    key = (r.endpoint, r.bucket, r.prefix)
    if key not in _STORES:
        settings = S3Settings(endpoint_url=r.endpoint, **r.settings)
        _STORES[key] = S3ObjectStore(r.bucket, r.prefix, settings=settings)
    return _STORES[key]


def _warm(r: Reader) -> int:
    """Import and connect in a worker before anything is timed."""
    _store(r)
    time.sleep(0.2)  # every worker of the pool gets one of these
    return os.getpid()


def _read_share(r: Reader, share: Sequence[tuple[str, int]]) -> dict[str, float]:
    """Read ``share`` (keys with their raw lengths) on ``r.threads`` threads as ``r.mode``
    says; returns bytes fetched, uncompressed and written, wall and CPU time."""
    import pyarrow as pa

    store = _store(r)
    codec = pa.Codec("zstd")
    decompress = r.mode in ("fetch_decompress", "fetch_decompress_write")
    write = r.mode in ("fetch_write", "fetch_decompress_write")

    def _write(key: str, data: bytes) -> int:
        with (Path(r.out_dir) / key.replace("/", "_")).open("wb") as f:
            return f.write(data)

    def one(item: tuple[str, int]) -> tuple[int, int, int]:
        key, raw_len = item
        body = store.get(key)
        if not decompress:
            return len(body), 0, _write(key, body) if write else 0
        raw = codec.decompress(body, decompressed_size=raw_len, asbytes=True)
        if len(raw) != raw_len:
            raise AssertionError(f"{key}: {len(raw)} bytes uncompressed, expected {raw_len}")
        # a restore folds the changelog tail into the snapshots' entries: the state is
        # written once, as large as the snapshots' uncompressed bytes
        lays_down = write and key.startswith(SNAPSHOTS)
        return len(body), len(raw), _write(key, raw) if lays_down else 0

    cpu, wall = time.process_time(), time.perf_counter()
    with ThreadPoolExecutor(r.threads) as pool:
        done = list(pool.map(one, share))
    return {
        "fetched": float(sum(d[0] for d in done)),
        "uncompressed": float(sum(d[1] for d in done)),
        "written": float(sum(d[2] for d in done)),
        "wall_s": time.perf_counter() - wall,
        "cpu_s": time.process_time() - cpu,
    }


def shares(stored: Stored, processes: int) -> list[list[tuple[str, int]]]:
    """Objects dealt round-robin to ``processes`` readers, each share in key order."""
    out: list[list[tuple[str, int]]] = [[] for _ in range(max(1, processes))]
    for i, key in enumerate(stored.keys):
        out[i % len(out)].append((key, stored.raw_bytes[key]))
    return out


def proc_cpu_s(pid: int) -> float:
    """User plus system CPU seconds of process ``pid`` and its reaped children."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    ticks = sum(int(fields[i]) for i in (11, 12, 13, 14))
    return ticks / os.sysconf("SC_CLK_TCK")


# --- one run ---------------------------------------------------------------------------


def run(p: Params) -> dict[str, Any]:
    """Store the objects, then read them ``rounds`` times by every path, interleaved."""
    from tests.support.testing_s3server import TestingS3Server

    from bench.streaming.latency_proxy import LatencyProxy, measure_added_latency

    scratch = SCRATCH / f"{NAME}-{uuid.uuid4().hex[:8]}"
    runs: dict[str, list[dict[str, float]]] = {m: [] for m in MODES}
    prefix = "restore-floor"
    try:
        with TestingS3Server(scratch / "seaweedfs") as server:
            bucket = server.create_bucket()
            s = server.settings
            settings = {
                "region": s.region,
                "access_key_id": s.access_key_id,
                "secret_access_key": s.secret_access_key,
            }
            from gic_runtime.storage.s3 import S3ObjectStore

            began = time.perf_counter()
            stored = put_state(S3ObjectStore(bucket, prefix, settings=s), p)
            put_s = time.perf_counter() - began
            raw_total = sum(stored.raw_bytes.values())
            print(
                f"{NAME}: stored {stored.stored_bytes / 1e9:.2f} GB in {len(stored.keys)} "
                f"objects ({raw_total / 1e9:.2f} GB uncompressed) in {put_s:.0f} s",
                flush=True,
            )
            parts = shares(stored, p.processes)
            ctx = multiprocessing.get_context("spawn")
            with LatencyProxy(server.endpoint_url, p.latency_ms / 1000) as proxy:
                credentials = {
                    k: v for k, v in server.environment().items() if k.startswith("AWS_")
                }
                with mock.patch.dict(os.environ, credentials):
                    latency = measure_added_latency(server.endpoint_url, proxy.endpoint_url, bucket)
                endpoints = {m: proxy.endpoint_url for m in MODES}
                endpoints["fetch_unproxied"] = server.endpoint_url
                for round_ in range(p.rounds):
                    order = MODES if round_ % 2 == 0 else MODES[::-1]
                    for mode in order:
                        out_dir = scratch / f"local-{round_}-{mode}"
                        out_dir.mkdir(parents=True)
                        reader = Reader(
                            endpoints[mode], settings, bucket, prefix, p.threads, mode, str(out_dir)
                        )
                        with ctx.Pool(p.processes) as pool:
                            pool.map(_warm, [reader] * p.processes)
                            server_cpu, own_cpu = proc_cpu_s(server.pid or 0), time.process_time()
                            wall = time.perf_counter()
                            parts_done = pool.starmap(
                                _read_share, [(reader, share) for share in parts]
                            )
                            wall = time.perf_counter() - wall
                            server_cpu = proc_cpu_s(server.pid or 0) - server_cpu
                            own_cpu = time.process_time() - own_cpu
                        shutil.rmtree(out_dir, ignore_errors=True)
                        figures = check_run(mode, parts_done, stored)
                        figures.update(
                            wall_s=round(wall, 3),
                            server_cpu_s=round(server_cpu, 3),
                            proxy_cpu_s=round(own_cpu, 3) if mode != "fetch_unproxied" else 0.0,
                        )
                        runs[mode].append(figures)
                        print(
                            f"round {round_} {mode}: {wall:.1f} s wall, readers "
                            f"{figures['reader_cpu_s']:.1f} s CPU, server {server_cpu:.1f} s, "
                            f"proxy {figures['proxy_cpu_s']:.1f} s",
                            flush=True,
                        )
                requests = proxy.requests_by_method()
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return {
        "params": dataclasses.asdict(p),
        "stored_bytes": stored.stored_bytes,
        "uncompressed_bytes": raw_total,
        "objects": len(stored.keys),
        "put_s": round(put_s, 1),
        "latency": latency,
        "requests_through_proxy": requests,
        "summary": summarize(runs),
        "runs": runs,
        "definitions": DEFINITIONS,
    }


def check_run(mode: str, parts: Sequence[Mapping[str, float]], stored: Stored) -> dict[str, float]:
    """A path's figures summed over its readers; raises unless every stored byte was read
    (and, where the path says so, uncompressed and written)."""
    fetched = sum(d["fetched"] for d in parts)
    if fetched != stored.stored_bytes:
        raise AssertionError(f"{mode}: fetched {fetched:.0f} bytes of {stored.stored_bytes}")
    raw = sum(stored.raw_bytes.values())
    if (
        mode in ("fetch_decompress", "fetch_decompress_write")
        and sum(d["uncompressed"] for d in parts) != raw
    ):
        raise AssertionError(f"{mode}: uncompressed bytes differ from the {raw} stored")
    snapshots_raw = sum(n for k, n in stored.raw_bytes.items() if k.startswith(SNAPSHOTS))
    to_write = {"fetch_write": stored.stored_bytes, "fetch_decompress_write": snapshots_raw}
    written = to_write.get(mode, 0)
    if sum(d["written"] for d in parts) != written:
        raise AssertionError(f"{mode}: written bytes differ from the {written} expected")
    return {
        "reader_cpu_s": round(sum(d["cpu_s"] for d in parts), 3),
        "reader_wall_s_max": round(max(d["wall_s"] for d in parts), 3),
    }


MEASURES = ("wall_s", "reader_cpu_s", "server_cpu_s", "proxy_cpu_s")


def summarize(runs: Mapping[str, Sequence[Mapping[str, float]]]) -> dict[str, Any]:
    """Per path and measure, median, min, max and count over the rounds."""
    from bench.streaming.repeats import spread

    return {
        mode: {m: spread([r[m] for r in rs]) for m in MEASURES} for mode, rs in runs.items() if rs
    }


# --- against the sweep's restart -------------------------------------------------------


def sweep_restart(path: Path) -> dict[str, Any] | None:
    """The 4 GB restart figures of ``state_sweep.json`` (medians), or ``None``."""
    try:
        size = json.loads(path.read_text())["sizes"][SWEEP_SIZE]
        restart = size["restart"]
        gic, spark = restart[GIC], restart[SPARK]
        return {
            "recorded_at": size.get("recorded_at"),
            "spark_to_first_batch_s": spark["to_first_batch_ms"] / 1000,
            "gic_to_first_batch_s": gic["to_first_batch_ms"] / 1000,
            "gic_before_first_batch_s": gic["before_first_batch_ms"] / 1000,
            "gic_steady_batch_s": gic["steady_batch_ms"] / 1000,
        }
    except (OSError, KeyError, TypeError, ValueError):
        return None


def bounds(summary: Mapping[str, Any], restart: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """Per path, the first batch no restore of that kind can beat, over Spark's restart.

    ``floor_s`` is the path's median wall time: a restart whose first batch waits for the
    restore ends no earlier, even with the query's start hidden behind it. ``with_batch_s``
    adds GIC's steady batch, which the first batch runs once its state is there.
    """
    if restart is None:
        return None
    spark = float(restart["spark_to_first_batch_s"])
    target = RESTART_GOAL * spark
    out: dict[str, Any] = {"spark_to_first_batch_s": spark, "goal_s": round(target, 2), "paths": {}}
    for mode, stats in summary.items():
        floor = float(stats["wall_s"]["median"])
        with_batch = floor + float(restart["gic_steady_batch_s"])
        out["paths"][mode] = {
            "floor_s": round(floor, 2),
            "floor_vs_spark": round(floor / spark, 3),
            "with_batch_s": round(with_batch, 2),
            "with_batch_vs_spark": round(with_batch / spark, 3),
            "goal_within_reach": with_batch <= target,
        }
    return out


DEFINITIONS = {
    "wall_s": "from handing the readers their shares to the last reader's end (processes "
    "started, imported and connected before)",
    "reader_cpu_s": "user + system CPU of the reading processes over their reads, summed",
    "server_cpu_s": "user + system CPU of the SeaweedFS process over the same span",
    "proxy_cpu_s": "CPU of the benchmark's own process over the span: the latency proxy's "
    "threads (0 for fetch_unproxied)",
    "summary": "median, min and max over the interleaved rounds",
    "bounds": "per path, its median wall time (floor_s) and that plus GIC's steady batch at "
    "4 GB (with_batch_s), over Spark's restart to its first batch in state_sweep.json; "
    f"goal_within_reach: with_batch_s <= {RESTART_GOAL} x Spark's",
}


def plot(result: Mapping[str, Any]) -> Path:
    """Median wall time per path with min-max whiskers, the goal and both restarts."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    summary = result["summary"]
    modes = [m for m in MODES if m in summary]
    med = [summary[m]["wall_s"]["median"] for m in modes]
    low = [med[i] - summary[m]["wall_s"]["min"] for i, m in enumerate(modes)]
    high = [summary[m]["wall_s"]["max"] - med[i] for i, m in enumerate(modes)]
    fig, ax = plt.subplots(figsize=(7.5, 4.2))
    ax.bar(
        range(len(modes)),
        med,
        0.6,
        yerr=[low, high],
        capsize=4,
        color="C0",
        label="the path (floor)",
    )
    ax.set_xticks(range(len(modes)))
    ax.set_xticklabels([m.replace("_", "\n") for m in modes], fontsize=8)
    ax.set_ylabel("s from the restore's start")
    b = result.get("bounds")
    if b:
        ax.axhline(
            b["goal_s"], color="C3", ls="--", label=f"goal: {RESTART_GOAL} x Spark's first batch"
        )
        restart = result["sweep_restart"]
        batch = restart["gic_steady_batch_s"]
        ax.bar(
            range(len(modes)),
            [batch] * len(modes),
            0.6,
            bottom=med,
            color="C0",
            alpha=0.35,
            label="+ GIC's steady batch (sweep)",
        )
        ax.axhline(
            restart["gic_to_first_batch_s"], color="C2", ls=":", label="GIC's first batch (sweep)"
        )
        ax.axhline(
            restart["spark_to_first_batch_s"],
            color="grey",
            ls=":",
            label="Spark's first batch (sweep)",
        )
        ax.legend(fontsize=8, loc="upper left")
    p = result["params"]
    ax.set_title(
        f"{result['stored_bytes'] / 1e9:.2f} GB in {result['objects']} objects, "
        f"{p['latency_ms']} ms a request, {p['processes']} readers x {p['threads']} threads\n"
        f"median of {p['rounds']} interleaved rounds, min-max",
        fontsize=9,
    )
    return save_figure(fig, RESULTS / f"{NAME}.png")


def set_against_sweep(result: dict[str, Any], sweep: Path) -> dict[str, Any]:
    """``result`` with ``sweep_restart`` and ``bounds`` from the sweep's record at ``sweep``."""
    restart = sweep_restart(sweep)
    return {**result, "sweep_restart": restart, "bounds": bounds(result["summary"], restart)}


def main(argv: Sequence[str] = ()) -> None:
    """Run and record; ``--bounds``: only set the recorded run against the sweep's latest
    restart (after ``state_sweep`` re-measured it) and redraw the plot."""
    args = list(argv)
    sweep = RESULTS / "state_sweep.json"
    if args == ["--bounds"]:
        path = RESULTS / f"{NAME}.json"
        result = set_against_sweep(json.loads(path.read_text()), sweep)
        path.write_text(json.dumps(result, indent=2) + "\n")
        print(f"{NAME}: {json.dumps(result['bounds'])} -> {path}, {plot(result)}")
        return
    if args:
        raise SystemExit(f"usage: python -m bench.{NAME} [--bounds]")
    quick = quick_mode()
    result = run(QUICK if quick else Params())
    # a smoke run's objects are not the 4 GB state: nothing to set against the sweep
    result = set_against_sweep(result, sweep) if not quick else {**result, "bounds": None}
    path = write_result(NAME, result)
    png = plot(result)
    print(f"{NAME}: {json.dumps(result['bounds'])} -> {path}, {png}")


if __name__ == "__main__":
    main(sys.argv[1:])
