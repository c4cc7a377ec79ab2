"""Reading a batch's keys of checkpointed buckets against restoring the buckets.

After a restart the first batch waits until every bucket its rows touch is restored
(docs/architecture.md §6): in the state sweep's 4 GB restart, every bucket, 15,500
group keys each, though the batch touches 390 of them. This measures what that batch
could cost instead: :func:`~gic_runtime.state.selective_read.select_keys` reading just
the touched keys from the same files, against
:func:`~gic_runtime.state.restore.restore_buckets` rebuilding the buckets in LMDB, as an
executor does.

State, per bucket, shaped like the sweep's 4 GB size: ``keys`` group keys with two
aggregate states each, as GIC's ``aggregate`` stores them (a count, and a
``value_bytes``-character payload: hex text, as the sweep's ``sha2`` payloads); one
snapshot of every bucket, then ``tail_batches`` batches of ``batch_keys`` updates per
bucket (the count always changes, the payload with probability ``payload_changes``),
each batch one changelog segment with a section of every bucket: the tail a restart
replays. Storage is a local directory read through the page cache, so the figures are
the CPU work of each path, without a network's latency or bandwidth (both paths read the
same bytes).

In ``rounds`` interleaved rounds (the order alternates), each path runs over every
bucket from a fresh local directory; per path: wall time and CPU time of the process
(every thread: the fetch threads' downloads and decompression included). After each
round the selected values are checked against the restored buckets' values for the
same keys (a mismatch raises).

Run: ``.venv/bin/python -m bench selective_read`` (``GIC_BENCH_QUICK=1``: a small
smoke run). Writes ``bench/results/selective_read.json`` and ``.png``.
"""

from __future__ import annotations

import dataclasses
import random
import resource
import shutil
import statistics
import time
import uuid
from collections.abc import Sequence
from functools import partial
from pathlib import Path
from typing import Any

import msgpack  # type: ignore[import-untyped, unused-ignore]

from bench.common import RESULTS, SCRATCH, quick_mode, save_figure, write_result
from gic_runtime.changelog.records import ChangeRecord, Op
from gic_runtime.changelog.segment import SegmentBuilder
from gic_runtime.handles import BucketState, ChangelogHandle
from gic_runtime.state.lmdb_store import LmdbStore
from gic_runtime.state.restore import restore_buckets
from gic_runtime.state.selective_read import select_keys
from gic_runtime.state.snapshot import upload_snapshot
from gic_runtime.storage.local import LocalObjectStore
from gic_runtime.storage.uri import StoreResolver

NAME = "selective_read"
MODES = ("restore", "select")


@dataclasses.dataclass(frozen=True)
class Params:
    buckets: int = 8
    keys: int = 15_500
    value_bytes: int = 2000
    tail_batches: int = 23
    batch_keys: int = 390
    payload_changes: float = 0.4
    rounds: int = 3
    seed: int = 11


QUICK = Params(buckets=2, keys=2_000, tail_batches=4, batch_keys=50, rounds=3)


def _key(aggregate: str, group: int) -> bytes:
    return bytes(msgpack.packb([f"agg:{aggregate}", group]))


def _payload(rng: random.Random, size: int) -> bytes:
    return bytes(msgpack.packb(rng.randbytes(size // 2).hex()))


def build(objects: LocalObjectStore, p: Params) -> tuple[list[BucketState], list[list[int]]]:
    """Every bucket's snapshot and changelog tail; returns the bucket states and, per
    bucket, the group keys the batch after them touches."""
    rng = random.Random(p.seed)
    resolver = StoreResolver()
    resolver.register(objects)
    groups = [list(range(b * p.keys, (b + 1) * p.keys)) for b in range(p.buckets)]
    snapshots = {}
    for b in range(p.buckets):
        items = sorted(
            [(_key("count", g), bytes(msgpack.packb(1))) for g in groups[b]]
            + [(_key("payload", g), _payload(rng, p.value_bytes)) for g in groups[b]]
        )
        uri = objects.uri_for(f"snapshots/{b}.snap")
        snapshots[b] = upload_snapshot(resolver, uri, items, bucket=b, seq=0, compress=True)
    handles: dict[int, list[ChangelogHandle]] = {b: [] for b in range(p.buckets)}
    seqs = dict.fromkeys(range(p.buckets), 0)
    for batch in range(p.tail_batches):
        builder = SegmentBuilder()
        for b in range(p.buckets):
            changes: list[tuple[Op, bytes, bytes]] = []
            for g in rng.sample(groups[b], p.batch_keys):
                changes.append((Op.PUT, _key("count", g), bytes(msgpack.packb(batch + 2))))
                if rng.random() < p.payload_changes:
                    changes.append((Op.PUT, _key("payload", g), _payload(rng, p.value_bytes)))
            start = seqs[b]
            builder.add_records(
                b, start, [ChangeRecord(start + i, *c) for i, c in enumerate(changes)]
            )
            seqs[b] += len(changes)
        data, infos = builder.build()
        key = f"changelog/{batch:06d}.seg"
        objects.put(key, data, if_absent=True)
        for info in infos:
            handles[info.bucket].append(info.handle(objects.uri_for(key)))
    states = [
        BucketState(b, seqs[b], snapshots[b], tuple(handles[b]), handles[b][-1].uri)
        for b in range(p.buckets)
    ]
    touched = [sorted(rng.sample(groups[b], p.batch_keys)) for b in range(p.buckets)]
    return states, touched


def _cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _timed(fn: Any) -> tuple[Any, float, float]:
    cpu, wall = _cpu_s(), time.perf_counter()
    out = fn()
    return out, time.perf_counter() - wall, _cpu_s() - cpu


def _spread(values: Sequence[float]) -> dict[str, float]:
    return {
        "median": round(statistics.median(values), 4),
        "min": round(min(values), 4),
        "max": round(max(values), 4),
    }


def run(p: Params) -> dict[str, Any]:
    scratch = SCRATCH / f"{NAME}-{uuid.uuid4().hex[:8]}"
    runs: dict[str, list[dict[str, float]]] = {m: [] for m in MODES}
    try:
        objects = LocalObjectStore(scratch / "storage")
        resolver = StoreResolver()
        resolver.register(objects)
        began = time.perf_counter()
        states, touched = build(objects, p)
        built_s = time.perf_counter() - began
        stored = sum(f.stat().st_size for f in (scratch / "storage").rglob("*") if f.is_file())
        wanted = {
            s.bucket: {_key(a, g) for g in touched[s.bucket] for a in ("count", "payload")}
            for s in states
        }
        for round_ in range(p.rounds):
            order = MODES if round_ % 2 == 0 else MODES[::-1]
            selected: dict[int, dict[bytes, bytes]] = {}
            local = scratch / f"local-{round_}"
            store = LmdbStore(local, map_size=1 << 34)
            try:
                for mode in order:
                    if mode == "restore":
                        _, wall, cpu = _timed(partial(restore_buckets, store, states, resolver))
                    else:
                        selected, wall, cpu = _timed(partial(select_keys, states, wanted, resolver))
                    runs[mode].append({"wall_s": round(wall, 4), "cpu_s": round(cpu, 4)})
                    print(f"round {round_} {mode}: {wall:.3f} s wall, {cpu:.3f} s cpu", flush=True)
                for s in states:  # the selection is what the restore holds for the keys
                    for k in wanted[s.bucket]:
                        if selected[s.bucket].get(k) != store.get(s.bucket, k):
                            raise AssertionError(f"bucket {s.bucket}: key {k!r} differs")
            finally:
                store.close()
                shutil.rmtree(local, ignore_errors=True)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    summary = {
        m: {measure: _spread([r[measure] for r in runs[m]]) for measure in ("wall_s", "cpu_s")}
        for m in MODES
    }
    per_bucket_ms = {
        m: {k: round(v["median"] * 1000 / p.buckets, 1) for k, v in summary[m].items()}
        for m in MODES
    }
    ratios = {
        measure: round(
            summary["select"][measure]["median"] / summary["restore"][measure]["median"], 4
        )
        for measure in ("wall_s", "cpu_s")
    }
    return {
        "params": dataclasses.asdict(p),
        "stored_bytes": stored,
        "entries_per_bucket": 2 * p.keys,
        "build_s": round(built_s, 1),
        "summary": summary,
        "per_bucket_ms": per_bucket_ms,
        "select_vs_restore": ratios,
        "runs": runs,
        "definitions": {
            "restore": "restore_buckets into LMDB on an empty local directory (every entry "
            "of every bucket, the tail folded into the snapshot's entries)",
            "select": "select_keys of the batch's keys (both aggregates of batch_keys group "
            "keys per bucket) from the same files; nothing written",
            "wall_s": "wall time of the path over every bucket",
            "cpu_s": "user + system CPU time of the process over the same span (the fetch "
            "threads included)",
            "summary": f"median, min and max over {p.rounds} interleaved rounds",
            "storage": "a local directory through the page cache: no request latency or "
            "bandwidth limit, the same bytes read by both paths",
        },
    }


def plot(result: dict[str, Any]) -> Path:
    """Per bucket, median wall and CPU time of each path with min-max whiskers."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    p = result["params"]
    fig, ax = plt.subplots(figsize=(6.5, 4))
    measures = ("wall_s", "cpu_s")
    for i, mode in enumerate(MODES):
        stats = result["summary"][mode]
        scale = 1000 / p["buckets"]
        med = [stats[m]["median"] * scale for m in measures]
        low = [med[j] - stats[m]["min"] * scale for j, m in enumerate(measures)]
        high = [stats[m]["max"] * scale - med[j] for j, m in enumerate(measures)]
        ax.bar([j + i * 0.4 for j in range(2)], med, 0.4, yerr=[low, high], capsize=4, label=mode)
    ax.set_xticks([0.2, 1.2])
    ax.set_xticklabels(["wall", "CPU"])
    ax.set_ylabel("ms per bucket")
    ratio = result["select_vs_restore"]
    ax.set_title(
        f"{p['batch_keys']} of {p['keys']} group keys a bucket, {p['value_bytes']}-byte payloads, "
        f"{p['tail_batches']}-batch tail\nselect / restore: wall {ratio['wall_s']:.2f}x, "
        f"CPU {ratio['cpu_s']:.2f}x (median of {p['rounds']}, min-max)",
        fontsize=9,
    )
    ax.legend()
    return save_figure(fig, RESULTS / f"{NAME}.png")


def main() -> None:
    p = QUICK if quick_mode() else Params()
    result = run(p)
    path = write_result(NAME, result)
    png = plot(result)
    print(f"{NAME}: select / restore {result['select_vs_restore']} -> {path}, {png}")


if __name__ == "__main__":
    main()
