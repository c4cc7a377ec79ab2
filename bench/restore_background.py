"""Restart on an empty local directory: eager restore against background restore.

State: ``keys`` keys of ``value_bytes`` random bytes each (one value state), in
``buckets`` buckets owned by one task (the task core of Spark's executors,
:class:`~gic_runtime.executor.state_task.StateTask`, over LMDB as on an executor),
checkpointed to a local directory under ``bench/scratch/``: one self-contained
checkpoint (a snapshot of every bucket), then ``tail_batches`` batches of updates (the
changelog tail a restore replays). Reads of that storage go through a throttle that
adds ``latency_ms`` per request and spends ``1 / bandwidth_mib_s`` per MiB, as an object
store far from the executor does (local disk alone would make any restore look free).

Then, in ``rounds`` interleaved rounds (each round runs every case, and alternates
which mode goes first, so drift of the shared machine hits both modes alike), a new
task starts on an EMPTY local directory from the last checkpoint and runs
``after_batches`` batches of ``batch_keys`` updates each, drawn from the keys of the
first fraction of the buckets, for every fraction of ``fractions`` (1.0: every bucket,
W1's uniform case; smaller: a job whose first batches touch part of the state). Each
batch names the buckets it touches in input order (as the Spark stage does from its
bucket column), so a background restore restores those first. Every metric is reported
per run and as the median with its spread (min, max) over the rounds:

``to_first_batch_s``
    from the new task's start to the end of its first batch (which includes whatever
    restore it waits for);
``back_to_steady_s``
    from the start to the end of the first batch at which every bucket is restored and
    the batch took at most ``1.25`` times the steady batch (the median batch of the same
    size before the restart);
``restore_finished_s``
    from the start to the end of the first batch after which no bucket was still
    restoring (eager: the first batch).

Exactly once: after the run every key's value is compared with the reference; a
mismatch raises.

Run: ``.venv/bin/python -m bench.restore_background [--keys N --value-bytes N ...]``
(``--help``). Writes ``bench/results/restore_background.json`` and ``.png``. The 4 GB
case is ``--keys 4000000 --value-bytes 1000 --buckets 256 --batch-keys
200000`` (``estimate_4gb_s`` in the JSON scales the recorded run's time to it; the
reference values are held in memory, about twice the state, so it needs about 10 GB of
RAM and as much scratch disk); the recorded run is smaller, sized for a shared machine.
"""

from __future__ import annotations

import argparse
import random
import shutil
import statistics
import threading
import time
import uuid
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from bench.common import RESULTS, SCRATCH, save_figure, write_result
from gic_runtime.coordination.task_settings import TaskSettings
from gic_runtime.executor.core import TaskContext
from gic_runtime.executor.state_task import StateTask
from gic_runtime.handles import BucketState
from gic_runtime.materialization.scheduler import MaterializationSettings
from gic_runtime.state.background_restore import BackgroundRestoreSettings
from gic_runtime.state.keys import bucket_for
from gic_runtime.state.lmdb_store import LmdbStore
from gic_runtime.storage.local import LocalObjectStore
from gic_runtime.storage.uri import StoreResolver

NAME = "restore_background"
STATE = "v"
STEADY_FACTOR = 1.25


@dataclass(frozen=True)
class Params:
    keys: int = 200_000
    value_bytes: int = 100
    buckets: int = 32
    tail_batches: int = 8
    batch_keys: int = 20_000
    after_batches: int = 8
    fractions: str = "1.0,0.25"
    rounds: int = 3
    latency_ms: float = 20.0
    bandwidth_mib_s: float = 100.0
    parallel: int = 2
    seed: int = 7

    @property
    def fraction_list(self) -> list[float]:
        return [float(f) for f in self.fractions.split(",") if f.strip()]

    @property
    def state_bytes(self) -> int:
        return self.keys * self.value_bytes


class ThrottledStore(LocalObjectStore):
    """A local object store whose reads cost ``latency_s`` each plus their share of one
    link of ``bytes_per_s`` (requests in parallel share the bandwidth, as on a NIC;
    sleeping, so other threads run meanwhile)."""

    latency_s = 0.0
    bytes_per_s = 0.0
    _link = threading.Lock()
    _free_at = 0.0

    def get(self, key: str, *, start: int = 0, length: int | None = None) -> bytes:
        data = super().get(key, start=start, length=length)
        if not (self.latency_s or self.bytes_per_s):
            return data
        done = time.monotonic() + self.latency_s
        if self.bytes_per_s:
            with ThrottledStore._link:
                begin = max(time.monotonic(), ThrottledStore._free_at)
                ThrottledStore._free_at = begin + len(data) / self.bytes_per_s
            done = max(done, ThrottledStore._free_at + self.latency_s / 2)
        time.sleep(max(0.0, done - time.monotonic()))
        return data


def _settings(background: bool, parallel: int) -> TaskSettings:
    return TaskSettings(
        # no background snapshots during the run: the restored lineage stays the same
        materialization=MaterializationSettings(interval_s=1e9, max_sections=10_000),
        restore=BackgroundRestoreSettings(background=background, parallel=parallel),
    )


def _task(
    objects: ThrottledStore, directory: Path, p: Params, *, background: bool = True
) -> StateTask:
    resolver = StoreResolver()
    resolver.register(objects)
    return StateTask(
        root=objects.uri_for(""),
        job_id="restore-bench",
        epoch=1,
        num_buckets=p.buckets,
        store=LmdbStore(directory / "state", map_size=1 << 34),
        resolver=resolver,
        local_dir=directory,
        settings=_settings(background, p.parallel),
    )


def _touched(keys: Sequence[int], buckets: int) -> list[int]:
    """The buckets of ``keys`` in the order of their first key (the stage's order)."""
    return list(dict.fromkeys(bucket_for(k, buckets) for k in keys))


def _batch(keys: Sequence[int], values: dict[int, bytes], rng: random.Random, size: int) -> Any:
    def run(ctx: TaskContext) -> None:
        state = ctx.backend.value_state(STATE)
        old = state.get_many(keys, b"")
        for k, v in zip(keys, old, strict=True):
            if v != values.get(k, b""):
                raise AssertionError(f"key {k}: read {v[:8]!r}, expected the reference value")
        new = [rng.randbytes(size) for _ in keys]
        state.set_many(zip(keys, new, strict=True))
        values.update(zip(keys, new, strict=True))

    return run


def _build(
    objects: ThrottledStore, scratch: Path, p: Params
) -> tuple[dict[int, BucketState], dict[int, bytes], float]:
    """The state before the restart: its bucket states, the reference values and the
    median steady batch (seconds)."""
    rng = random.Random(p.seed)
    values: dict[int, bytes] = {}
    task = _task(objects, scratch / "local-build", p, background=False)
    try:
        step = 100_000
        for lo in range(0, p.keys, step):
            keys = list(range(lo, min(p.keys, lo + step)))
            ack = task.checkpoint(
                _batch(keys, values, rng, p.value_bytes),
                self_contained=lo + step >= p.keys,
            )
            task.notify_checkpoint_complete(ack.states)
        times = []
        hot = _hot_keys(p, 1.0)
        for _ in range(p.tail_batches):
            keys = sorted(rng.sample(hot, min(p.batch_keys, len(hot))))
            began = time.perf_counter()
            ack = task.checkpoint(_batch(keys, values, rng, p.value_bytes))
            times.append(time.perf_counter() - began)
            task.notify_checkpoint_complete(ack.states)
        return dict(ack.states), values, statistics.median(times)
    finally:
        task.close()


def _hot_keys(p: Params, fraction: float) -> list[int]:
    """Keys of the first ``fraction`` of the buckets."""
    limit = max(1, round(p.buckets * fraction))
    return [k for k in range(p.keys) if bucket_for(k, p.buckets) < limit]


def _restart(
    objects: ThrottledStore,
    scratch: Path,
    p: Params,
    *,
    states: dict[int, BucketState],
    values: dict[int, bytes],
    steady_s: float,
    background: bool,
    fraction: float,
) -> dict[str, Any]:
    rng = random.Random(p.seed + 1)
    values = dict(values)
    # a fresh directory per run: nothing of an earlier run's local copy can be reused
    local = scratch / f"local-{'background' if background else 'eager'}-{uuid.uuid4().hex[:8]}"
    shutil.rmtree(local, ignore_errors=True)
    hot = _hot_keys(p, fraction)
    objects.latency_s = p.latency_ms / 1000
    objects.bytes_per_s = p.bandwidth_mib_s * 1024 * 1024
    started = time.perf_counter()
    task = _task(objects, local, p, background=background)
    batches: list[dict[str, Any]] = []
    first = steady_at = finished_at = None
    try:
        task.notify_checkpoint_complete(states)
        for _ in range(p.after_batches):
            keys = sorted(rng.sample(hot, min(p.batch_keys, len(hot))))
            began = time.perf_counter()
            ack = task.checkpoint(
                _batch(keys, values, rng, p.value_bytes), touched=_touched(keys, p.buckets)
            )
            end = time.perf_counter()
            task.notify_checkpoint_complete(ack.states)
            s = ack.stats
            pending = s.restore_pending
            if not batches and s.restored != len(states):
                raise AssertionError(
                    f"the first batch after the restart rebuilt {s.restored} of "
                    f"{len(states)} buckets: the local directory was not empty"
                )
            if first is None:
                first = end - started
            if pending == 0 and finished_at is None:
                finished_at = end - started
            if steady_at is None and pending == 0 and end - began <= STEADY_FACTOR * steady_s:
                steady_at = end - started
            batches.append(
                {
                    "batch_s": round(end - began, 4),
                    "restored": s.restored,
                    "restore_pending": pending,
                    "restore_bytes": s.restore_bytes,
                }
            )
        restorer = task.backend.restorer
        if restorer is not None:
            restorer.wait()
            if finished_at is None:
                finished_at = time.perf_counter() - started
        # every key, restored or not yet touched, equals the reference
        task.checkpoint(_check_all(values, p))
    finally:
        objects.latency_s = objects.bytes_per_s = 0.0
        task.close()
        shutil.rmtree(local, ignore_errors=True)
    return {
        "to_first_batch_s": round(first or 0.0, 4),
        "back_to_steady_s": None if steady_at is None else round(steady_at, 4),
        "restore_finished_s": None if finished_at is None else round(finished_at, 4),
        "batches": batches,
    }


def _check_all(values: dict[int, bytes], p: Params) -> Any:
    def run(ctx: TaskContext) -> None:
        keys = list(range(p.keys))
        got = ctx.backend.value_state(STATE).get_many(keys, b"")
        bad = [k for k, v in zip(keys, got, strict=True) if v != values.get(k, b"")]
        if bad:
            raise AssertionError(f"{len(bad)} keys differ from the reference, e.g. {bad[:5]}")

    return run


METRICS = ("to_first_batch_s", "back_to_steady_s", "restore_finished_s")


def _spread(values: Sequence[float | None]) -> dict[str, float | None]:
    known = [v for v in values if v is not None]
    if not known:
        return {"median": None, "min": None, "max": None, "missing": len(values)}
    return {
        "median": round(statistics.median(known), 4),
        "min": round(min(known), 4),
        "max": round(max(known), 4),
        "missing": len(values) - len(known),
    }


def run(p: Params) -> dict[str, Any]:
    scratch = SCRATCH / f"{NAME}-{uuid.uuid4().hex[:8]}"
    runs: dict[str, dict[str, list[dict[str, Any]]]] = {
        f"{f:g}": {"eager": [], "background": []} for f in p.fraction_list
    }
    began = time.perf_counter()
    try:
        objects = ThrottledStore(scratch / "storage")
        states, values, steady_s = _build(objects, scratch, p)
        built = time.perf_counter()
        stored = sum(f.stat().st_size for f in (scratch / "storage").rglob("*") if f.is_file())
        for round_ in range(p.rounds):
            order = (("eager", False), ("background", True))
            if round_ % 2:
                order = order[::-1]
            for fraction in p.fraction_list:
                for name, bg in order:
                    result = _restart(
                        objects,
                        scratch,
                        p,
                        states=states,
                        values=values,
                        steady_s=steady_s,
                        background=bg,
                        fraction=fraction,
                    )
                    runs[f"{fraction:g}"][name].append(result)
                    print(
                        f"round {round_} fraction {fraction:g} {name}: "
                        + ", ".join(f"{m} {result[m]}" for m in METRICS),
                        flush=True,
                    )
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    ended = time.perf_counter()
    cases: dict[str, Any] = {}
    for case, modes in runs.items():
        summary = {
            mode: {m: _spread([r[m] for r in results]) for m in METRICS}
            for mode, results in modes.items()
        }
        eager, later = summary["eager"], summary["background"]
        cases[case] = {
            "summary": summary,
            "background_vs_eager": {
                m: _ratio(later[m]["median"], eager[m]["median"]) for m in METRICS
            },
            "runs": modes,
        }
    return {
        "params": {**asdict(p), "state_bytes": p.state_bytes},
        "stored_bytes": stored,
        "steady_batch_s": round(steady_s, 4),
        "elapsed_s": {
            "build": round(built - began, 1),
            "rounds": round(ended - built, 1),
        },
        # a 4 GB run, scaled linearly by stored bytes from this one (the
        # build by state bytes), same rounds and cases: a rough guide, not a measurement
        "estimate_4gb_s": round(
            (built - began) * 4e9 / p.state_bytes + (ended - built) * 4e9 / p.state_bytes
        ),
        "cases": cases,
        "definitions": {
            "to_first_batch_s": "new task on an empty local dir to the end of its first batch",
            "back_to_steady_s": f"start to the end of the first batch with every bucket "
            f"restored and at most {STEADY_FACTOR}x the steady batch",
            "restore_finished_s": "start to the end of the first batch after which no "
            "bucket was still restoring (batch granularity)",
            "case": "fraction of the buckets the batches after the restart touch",
            "summary": "median, min and max over the interleaved rounds",
        },
    }


def _ratio(value: float | None, reference: float | None) -> float | None:
    if value is None or not reference:
        return None
    return round(value / reference, 4)


def plot(result: dict[str, Any]) -> Path:
    """Medians with min-max whiskers, per case and metric, eager against background."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cases = result["cases"]
    fig, axes = plt.subplots(1, len(cases), figsize=(5.5 * len(cases), 4), squeeze=False)
    for ax, (fraction, case) in zip(axes[0], cases.items(), strict=True):
        for i, mode in enumerate(("eager", "background")):
            stats = case["summary"][mode]
            xs = [m + i * 0.4 for m in range(len(METRICS))]
            med = [stats[m]["median"] or 0.0 for m in METRICS]
            low = [med[j] - (stats[m]["min"] or 0.0) for j, m in enumerate(METRICS)]
            high = [(stats[m]["max"] or 0.0) - med[j] for j, m in enumerate(METRICS)]
            ax.bar(xs, med, 0.4, yerr=[low, high], capsize=4, label=mode)
        ax.set_xticks([m + 0.2 for m in range(len(METRICS))])
        ax.set_xticklabels(["first batch", "back to steady", "restore done"])
        ax.set_ylabel("seconds since the restart")
        ax.set_title(f"batches touch {float(fraction):.0%} of the buckets")
        ax.legend()
    p = result["params"]
    fig.suptitle(
        f"restart on an empty local dir: {p['state_bytes'] / 1e6:.0f} MB state, "
        f"{p['buckets']} buckets, {p['latency_ms']:g} ms + {p['bandwidth_mib_s']:g} MiB/s; "
        f"median of {p['rounds']} (min-max)"
    )
    return save_figure(fig, RESULTS / f"{NAME}.png")


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.restore_background")
    for f in Params.__dataclass_fields__.values():
        default = f.default
        parser.add_argument(
            "--" + f.name.replace("_", "-"), type=type(default), default=default, dest=f.name
        )
    args = parser.parse_args(argv)
    p = Params(**{k: getattr(args, k) for k in Params.__dataclass_fields__})
    result = run(p)
    path = write_result(NAME, result)
    png = plot(result)
    for fraction, case in result["cases"].items():
        print(f"fraction {fraction}: background/eager medians {case['background_vs_eager']}")
    print(f"{NAME}: steady batch {result['steady_batch_s']} s -> {path}, {png}")


if __name__ == "__main__":
    main()
