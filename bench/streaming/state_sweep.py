"""State-size sweep: the same keyed job at state sizes from 10 MB to 4 GB, every system
checkpointing to S3 (SeaweedFS) behind a proxy holding each request 20 ms.

The job (:data:`~bench.streaming.workloads.KEYED_PAYLOAD`): per key a count plus a
payload of ``value_bytes`` characters (``max(payload)``), derived from the row. Sizes
(:data:`SIZES`, ``GIC_BENCH_SWEEP_SIZES`` picks some, e.g. ``10MB,100MB``) set the key
count and the value bytes: ``keys = state_bytes / (8 + 8 + value_bytes)``. Every run
first loads the state (the first ``ceil(keys / rows_per_batch)`` batches write every
key once), then runs :data:`WARMUP_AFTER_LOAD` warm-up and :data:`MEASURED` measured
batches of :data:`ROWS_PER_BATCH` rows each (updates of keys spread by hash). Every
system runs at its own defaults for checkpointing: GIC's materialization settings are
the runtime's (interval 120 s, growth limits), Spark's RocksDB store its own.

Systems, on one SeaweedFS behind :class:`~bench.streaming.latency_proxy.LatencyProxy`
(:func:`bench.streaming.w1_s3.shared_s3` / :func:`~bench.streaming.w1_s3.with_latency`):
``gic_s3`` (GIC, ``s3://``) against ``spark_rocksdb_changelog_s3a`` (Spark's RocksDB
store with changelog checkpointing, through S3A and the rename-free checkpoint file
manager), plus ``spark_hdfs_s3a`` where its state fits in the heap (:func:`hdfs_fits`), and
``spark_no_state`` (:data:`FLOOR`): the query without state or checkpoint storage, whose
rows/s bound any system's on this machine.
Per size: the interleaved rounds of :func:`bench.streaming.repeats.run_mode`, then a
restart of each system from its last round's checkpoint in a fresh process with empty
local directories (:func:`restart_figures`). Each run records the memory of its process
tree (:mod:`bench.streaming.memory_sampling`, from a process of its own), the machine's
paging over the run (:mod:`bench.streaming.machine_counters`: major faults, bytes read
and written; notes ``paging``) and the bytes stored under its prefix at the end.

Goals (:func:`size_goals`, :func:`rss_goal`) are computed from the measurements and
apply at 1 GB and 4 GB (some at 4 GB only); every size reports them with ``applies``.
Writes ``state_sweep.json`` (sizes not run again are kept from the previous file) and
one ``state_sweep_<measure>.png`` per measure against state size, log scale.

Not thread-safe: one run per process.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import shutil
import statistics
import sys
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bench import common
from bench.streaming import harness, modes, repeats, runner, s3a, spark_stores, systems, w1_s3
from bench.streaming.machine_counters import DEFINITION as PAGING_DEFINITION
from bench.streaming.machine_counters import PagingCounters
from bench.streaming.memory_sampling import (
    PROCESS_KINDS,
    RSS_DEFINITION,
    MemorySampler,
    memory_summary,
)
from bench.streaming.records import BenchmarkError, BenchParams, RunResult
from bench.streaming.repeats import Comparison
from bench.streaming.runner import SystemFn
from bench.streaming.workloads import KEYED_PAYLOAD, WorkloadSpec

if TYPE_CHECKING:
    from tests.support.testing_s3server import TestingS3Server

NAME = "state_sweep"
TARGET = "bench.streaming.state_sweep:run_with_rss"
GIC = "gic_s3"
ROCKSDB = "spark_rocksdb_changelog_s3a"
HDFS = "spark_hdfs_s3a"
FLOOR = spark_stores.NO_STATE
"""The query without state (:data:`bench.streaming.spark_stores.NO_STATE`): the same
source, shuffle and aggregation, each batch alone, its offset and commit logs on local
disk. That is the query's own work, which every system pays; writing Spark's logs through
S3A behind the proxy (about 0.6 s a batch at 20 ms) is part of Spark's checkpointing, and
GIC keeps its query's offsets in its own manifest instead, so the floor leaves them out.
Its rows/s bound any system's on this machine; its ratio to the RocksDB baseline's
(``ceiling``) is the largest throughput ratio a system whose state and checkpoints cost
nothing would reach in the same round."""
SYSTEM_NAMES = (GIC, ROCKSDB, HDFS, FLOOR)
LATENCY_MS = 20
ROWS_PER_BATCH = 50_000
PARTITIONS = 4
"""Input and shuffle partitions, the same for every system (GIC's state tasks too);
``GIC_BENCH_SWEEP_PARTITIONS`` sets another number."""
PARTITIONS_ENV = "GIC_BENCH_SWEEP_PARTITIONS"
KEY_BYTES = 8
COUNT_BYTES = 8
MB = 1_000_000
WARMUP_AFTER_LOAD = 3
MEASURED = 64
"""Measured batches: at least one whole materialization cycle at the runtime's defaults,
so the rows/s carry the background snapshots' cost at the rate it comes, whichever batch
a wave falls on. A bucket is snapshotted again once its changelog since its snapshot
reaches the snapshot's size (``changelog_ratio`` 1.0) or ``max_sections`` handles, and
with uniformly updated keys every bucket gets there in the same batch. At 1 GB the
changelog of a batch falls as the running maxima settle (12.6 MB in the fourth measured
batch, 6.5 MB sixty batches later): the first wave after the load fell on batches 47-49
and none followed in the 35 batches after it. A window of 32 batches (3-35 after the
load) held that wave and counted it at about twice its rate: GIC alone ran 28,272 rows/s
over 32 batches and 33,656 over 64 with the same single wave (architecture §12). At
4 GB a task's changelog of a batch spans two preemptive uploads, every bucket gains two
sections a batch, and the section limit brings the wave every ``max_sections`` / 2
batches."""
RESTART_BATCHES = 8
RESTARTS = 3
"""Restarts of each system after its last round (``GIC_BENCH_RESTARTS``; quick: 1), the
systems alternated; each starts from the checkpoint the one before left."""
RESTART_MEASURES = (
    "to_first_batch_ms",
    "before_first_batch_ms",
    "first_batch_ms",
    "back_to_steady_ms",
    "rss_peak_bytes",
)
"""The figures of a restart that :func:`combine_restarts` reports as median and spread."""
STEADY_FACTOR = 1.25
"""A batch is back at its steady duration when it takes at most this times the steady
batch (the median measured batch of the run that was restarted)."""
HDFS_COPIES = 3
"""State versions the HDFS store holds in the heap at once (Spark keeps the last two
versions' maps loaded, plus the one being written)."""
HDFS_HEAP_FRACTION = 0.5
SIZES_ENV = "GIC_BENCH_SWEEP_SIZES"
OUTPUT_UP_TO = 100 * MB
"""Sizes up to this write their output to Parquet and fingerprint it; larger ones use
the ``noop`` / ``discard`` sinks (reading back gigabytes of output would dominate)."""

GOALS = {
    "throughput_vs_rocksdb_changelog_at_least": 2.0,
    "throughput_aim": 3.0,
    "commit_p99_vs_rocksdb_changelog_at_most": 0.5,
    "bytes_vs_changelog_plus_spread_at_most": 1.2,
    "rocksdb_bytes_over_gic_at_least": 10.0,
    "restart_first_batch_vs_spark_at_most": 0.25,
    "restart_back_to_steady_vs_spark_at_most": 1.0,
    "rss_vs_100mb_at_most": 1.2,
}
GOAL_SIZES = ("1GB", "4GB")
LARGEST_ONLY = "4GB"


@dataclass(frozen=True)
class StateSize:
    """One size of the sweep: total state bytes and each key's payload."""

    label: str
    state_bytes: int
    value_bytes: int
    reference: bool = False
    """Not a point of the sweep but a base of comparison (:data:`REFERENCE_SIZES`): run
    for GIC alone, without a restart, and left out of the plots against state size."""

    @property
    def bytes_per_key(self) -> int:
        return KEY_BYTES + COUNT_BYTES + self.value_bytes

    @property
    def keys(self) -> int:
        return max(1, self.state_bytes // self.bytes_per_key)

    def describe(self) -> dict[str, Any]:
        return {
            "label": self.label,
            "state_bytes": self.state_bytes,
            "value_bytes": self.value_bytes,
            "keys": self.keys,
            "bytes_per_key": self.bytes_per_key,
            **({"reference": True} if self.reference else {}),
        }


SIZES = (
    StateSize("10MB", 10 * MB, 200),
    StateSize("100MB", 100 * MB, 500),
    StateSize("1GB", 1000 * MB, 1000),
    StateSize("4GB", 4000 * MB, 2000),
)
RSS_REFERENCE = StateSize("100MB-2KB", 100 * MB, 2000, reference=True)
"""100 MB of state with the 4 GB size's payload (2,000 bytes): the base of the memory goal
at the same row size, run as 4 GB is (output discarded). The sweep's sizes grow the
payload with the state (500 bytes at 100 MB, 2,000 at 4 GB), so each batch's rows are 4x
larger at 4 GB, and a task's memory for its batch (the rows, the values read and
written) grows with them whatever the state's size; against this size only the state
differs."""
REFERENCE_SIZES = (RSS_REFERENCE,)
ALL_SIZES = (*SIZES, *REFERENCE_SIZES)
QUICK_DIVISOR = 100


def sizes_from_env(environ: Mapping[str, str] = os.environ) -> list[StateSize]:
    """The sizes named in ``GIC_BENCH_SWEEP_SIZES`` (default all, the reference sizes
    last), in sweep order."""
    raw = environ.get(SIZES_ENV, "")
    names = [n.strip().upper() for n in raw.split(",") if n.strip()]
    if not names:
        return list(ALL_SIZES)
    known = {s.label.upper(): s for s in ALL_SIZES}
    unknown = [n for n in names if n not in known]
    if unknown:
        raise BenchmarkError(
            f"{SIZES_ENV}={raw!r}: unknown sizes {unknown}; choose from "
            f"{', '.join(s.label for s in ALL_SIZES)}"
        )
    return [s for s in ALL_SIZES if s.label.upper() in names]


def partitions_from_env(environ: Mapping[str, str] = os.environ) -> int:
    """Input and shuffle partitions of every system's query (GIC's state tasks):
    ``GIC_BENCH_SWEEP_PARTITIONS``, default :data:`PARTITIONS`."""
    raw = environ.get(PARTITIONS_ENV, "").strip()
    if not raw:
        return PARTITIONS
    if not raw.isdigit() or int(raw) < 1:
        raise BenchmarkError(f"{PARTITIONS_ENV}={raw!r}: need a whole number of at least 1")
    return int(raw)


def workload(
    size: StateSize, quick: bool = False, environ: Mapping[str, str] = os.environ
) -> WorkloadSpec:
    """The job at ``size`` (quick: a hundredth of the keys and of the rows per batch)."""
    keys, rows = size.keys, ROWS_PER_BATCH
    if quick:
        keys, rows = max(1, keys // QUICK_DIVISOR), ROWS_PER_BATCH // QUICK_DIVISOR
    return WorkloadSpec(
        f"{NAME}_{size.label.lower()}",
        KEYED_PAYLOAD,
        keys,
        rows,
        partitions_from_env(environ),
        value_bytes=size.value_bytes,
    )


def writes_output(size: StateSize) -> bool:
    """Whether the runs at ``size`` write and fingerprint their output: sizes up to
    :data:`OUTPUT_UP_TO`, but not a reference size, which runs as the size it is a base
    for does (4 GB discards its output)."""
    return size.state_bytes <= OUTPUT_UP_TO and not size.reference


def memory_bytes(text: str) -> int:
    """A JVM memory setting (``6g``, ``3072m``, ``512k``, bytes) in bytes."""
    match = re.fullmatch(r"\s*(\d+)\s*([kmgt]?)b?\s*", text.lower())
    if match is None:
        raise BenchmarkError(f"not a memory size: {text!r}")
    scale = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}[match.group(2)]
    return int(match.group(1)) * scale


def hdfs_fits(size: StateSize, heap_bytes: int) -> bool:
    """Whether Spark's HDFS store (state in the JVM heap) runs at ``size``: its
    :data:`HDFS_COPIES` versions within :data:`HDFS_HEAP_FRACTION` of the heap."""
    return HDFS_COPIES * size.state_bytes <= HDFS_HEAP_FRACTION * heap_bytes


def systems_for(
    size: StateSize, heap_bytes: int, environ: Mapping[str, str] = os.environ
) -> list[str]:
    """The systems run at ``size``: GIC, the RocksDB baseline, where it fits the HDFS
    store, and the query without state (:data:`FLOOR`); at a reference size GIC alone;
    ``GIC_BENCH_SYSTEMS`` (names of :data:`SYSTEM_NAMES`) keeps a subset."""
    names = [GIC, ROCKSDB, *([HDFS] if hdfs_fits(size, heap_bytes) else []), FLOOR]
    if size.reference:
        names = [GIC]
    raw = environ.get("GIC_BENCH_SYSTEMS", "")
    wanted = [n.strip() for n in raw.split(",") if n.strip()]
    unknown = [n for n in wanted if n not in SYSTEM_NAMES]
    if unknown:
        raise BenchmarkError(
            f"GIC_BENCH_SYSTEMS names {unknown}; the sweep's systems are {list(SYSTEM_NAMES)}"
        )
    return [n for n in names if n in wanted] if wanted else names


def restarts_from_env(environ: Mapping[str, str] = os.environ) -> int:
    """Restarts per system (``GIC_BENCH_RESTARTS``, default :data:`RESTARTS`, 1 when
    quick)."""
    raw = environ.get("GIC_BENCH_RESTARTS", "").strip()
    if not raw:
        return 1 if common.quick_mode(environ) else RESTARTS
    try:
        n = int(raw)
    except ValueError:
        n = 0
    if n < 1:
        raise BenchmarkError(f"GIC_BENCH_RESTARTS={raw!r}: need a whole number of at least 1")
    return n


def batches(spec: WorkloadSpec, environ: Mapping[str, str] = os.environ) -> tuple[int, int]:
    """Warm-up (load phase included) and measured batches of a round's runs;
    ``GIC_BENCH_WARMUP`` sets the warm-up after the load, ``GIC_BENCH_MEASURED`` the
    measured ones."""
    quick = common.quick_mode(environ)
    after = int(environ.get("GIC_BENCH_WARMUP") or (1 if quick else WARMUP_AFTER_LOAD))
    measured = int(environ.get("GIC_BENCH_MEASURED") or (3 if quick else MEASURED))
    if after < 0 or measured < 1:
        raise BenchmarkError(f"need warm-up >= 0 and measured >= 1, got {after} and {measured}")
    return spec.load_batches + after, measured


_INNER: dict[str, str] = {"gic": systems.GIC_TARGET, "spark": systems.SPARK_STORE_TARGET}


def run_with_rss(
    variant: str,
    spec: WorkloadSpec,
    params: BenchParams,
    scratch: Path,
    *,
    inner: str,
    **options: Any,
) -> RunResult:
    """A :data:`~bench.streaming.runner.ChildFn`: the ``inner`` system's run (``gic`` or
    ``spark``), its notes completed with the RSS of this process's tree."""
    import importlib

    module, _, function = _INNER[inner].partition(":")
    fn = getattr(importlib.import_module(module), function)
    with MemorySampler(os.getpid()) as sampler, PagingCounters() as paging:
        result: RunResult = fn(variant, spec, params, scratch, **options)
    notes = {
        **result.notes,
        **memory_summary(sampler.samples),
        "rss_definition": RSS_DEFINITION,
        "paging": paging.deltas,
        "paging_definition": PAGING_DEFINITION,
    }
    return dataclasses.replace(result, notes=notes)


# --- the runs of one size ---------------------------------------------------------------------


def storage_prefix(name: str, spec: WorkloadSpec, scratch: Path) -> str:
    """Where a run of ``name`` with ``scratch`` checkpoints in the shared bucket."""
    if name.startswith("gic"):
        return f"gic/{spec.name}/{scratch.name}"
    return f"spark/{spec.name}/{name}/{scratch.name}"


def _stored_bytes(prefix: str) -> int:
    return sum(e.size for e in s3a.entries(s3a.bucket(), prefix))


def _delete_prefix(prefix: str) -> None:
    from gic_runtime.storage.s3 import create_s3_client
    from gic_runtime.storage.s3_settings import S3Settings

    client = create_s3_client(S3Settings.from_env())
    try:
        pages = client.get_paginator("list_objects_v2").paginate(
            Bucket=s3a.bucket(), Prefix=prefix.rstrip("/") + "/"
        )
        for page in pages:
            contents = page.get("Contents", [])
            if contents:
                client.delete_objects(
                    Bucket=s3a.bucket(),
                    Delete={"Objects": [{"Key": item["Key"]} for item in contents]},
                )
    finally:
        client.close()


LOCAL_COPIES = ("local", "spark-local")
"""A run's local working copies under its scratch directory: GIC's local state directory
and Spark's local directory (the RocksDB store's working copy). Each holds about the
state's size again (8 GB at 4 GB)."""


def drop_local_copies(scratch: Path) -> None:
    """Delete a finished run's local working copies: its checkpoint stays in storage,
    which is all a restart on empty local directories reads, and at 4 GB the copies of
    two systems' last runs would take 16 GB of disk through the following runs."""
    for name in LOCAL_COPIES:
        shutil.rmtree(scratch / name, ignore_errors=True)


@dataclass
class SizeRuns:
    """The runs of one size: each system's runs keep their scratch directory and S3
    prefix until the next run of the same system, so the last can be restarted."""

    spec: WorkloadSpec
    output: bool
    reclaim: Callable[[], None] = field(default=lambda: None)
    """Called after a run's prefix is deleted: the S3 server frees the space now
    (:meth:`~tests.support.testing_s3server.TestingS3Server.reclaim_deleted`). A RocksDB
    run at 4 GB stores about 35 GB; without it the deleted rounds' bytes stayed counted
    against SeaweedFS's volume limit until its own vacuum, and a later run's uploads were
    refused (``InternalError``, no writable volumes)."""
    run_id: str = field(default_factory=lambda: uuid.uuid4().hex[:8])
    last: dict[str, Path] = field(default_factory=dict)
    count: int = 0

    def options(self, name: str) -> dict[str, Any]:
        if name.startswith("gic"):  # the runtime's own materialization settings
            return {"inner": "gic", "output": self.output, "default_materialization": True}
        return {"inner": "spark", "output": self.output and name != FLOOR}

    def restart_options(self, name: str) -> dict[str, Any]:
        """The options of a restart of ``name``: no output (the rounds compared it; the
        restarted run would fingerprint every batch its checkpoint's run wrote too, over a
        GB of rows at 100 MB, more than Spark's driver takes), GIC on an empty local
        directory, Spark at its default retention (no byte accounting)."""
        options = {**self.options(name), "output": False}
        if name.startswith("gic"):
            options["local_dir"] = "local-restart"  # empty: every bucket from storage
        else:
            options["spark_retention"] = True
        return options

    def _forget(self, name: str) -> None:
        old = self.last.pop(name, None)
        if old is not None:
            _delete_prefix(storage_prefix(name, self.spec, old))
            self.reclaim()
            shutil.rmtree(old, ignore_errors=True)

    def system(self, name: str) -> SystemFn:
        def run(spec: WorkloadSpec, params: BenchParams) -> RunResult:
            self._forget(name)
            self.count += 1
            scratch = common.SCRATCH / f"{NAME}-{self.run_id}-{name}-{self.count}"
            self.last[name] = scratch
            result = runner.run_in_subprocess(
                TARGET,
                name,
                spec,
                params,
                scratch=scratch,
                options=self.options(name),
            )
            stored = _stored_bytes(storage_prefix(name, spec, scratch))
            drop_local_copies(scratch)
            return dataclasses.replace(result, notes={**result.notes, "stored_bytes": stored})

        run.__name__ = f"run_{name}"
        return run

    def restart(self, name: str, params: BenchParams) -> RunResult:
        """The last run of ``name`` started again in a fresh process from its checkpoint,
        with empty local directories, for :data:`RESTART_BATCHES` batches."""
        scratch = self.last[name]
        options = self.restart_options(name)
        if "local_dir" in options:  # empty again: a restart before this one filled it
            shutil.rmtree(scratch / options["local_dir"], ignore_errors=True)
        after = dataclasses.replace(params, warmup=0, measured=RESTART_BATCHES)
        return runner.run_in_subprocess(
            TARGET,
            name,
            self.spec,
            after,
            scratch=scratch,
            options=options,
            tag="restart",
        )

    def clean(self) -> None:
        for name in list(self.last):
            self._forget(name)


def back_to_steady_ms(
    to_first_batch_ms: float, batch_ms: Sequence[float], steady_ms: float
) -> float | None:
    """From the query's start to the end of the first batch after a restart that takes
    at most :data:`STEADY_FACTOR` x ``steady_ms`` (the first batch included; batch
    durations summed after the first); None if no batch of the run got there."""
    elapsed = to_first_batch_ms
    for i, ms in enumerate(batch_ms):
        if i > 0:
            elapsed += ms
        if ms <= STEADY_FACTOR * steady_ms:
            return round(elapsed, 1)
    return None


def restart_figures(restarted: RunResult, steady_ms: float) -> dict[str, Any]:
    """What a restart measured, against the steady batch of the run it restarted."""
    durations = [r.batch_ms for r in restarted.measured]
    first = float(restarted.notes["to_first_batch_ms"])
    parts = restarted.measured[0].parts
    return {
        "steady_batch_ms": round(steady_ms, 1),
        "to_first_batch_ms": first,
        "before_first_batch_ms": restarted.notes.get("before_first_batch_ms"),
        "first_batch_ms": durations[0],
        "back_to_steady_ms": back_to_steady_ms(first, durations, steady_ms),
        "batch_ms": durations,
        "restored_buckets": parts.get("restored"),
        "selected_buckets": parts.get("selected"),
        "local_hits": parts.get("local_hits"),
        "rss_peak_bytes": restarted.notes.get("rss_peak_bytes"),
        "first_batch_parts": dict(parts),
    }


def combine_restarts(runs: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The restarts of one system as one figure: the median of each of
    :data:`RESTART_MEASURES` over the restarts that ran (``spread``: median, min, max, n
    of each), the median restart's other figures (its batches, its first batch's parts),
    and every restart's figures under ``runs``. Only failures: the first one's error."""
    ran = [r for r in runs if "error" not in r]
    if not ran:
        return {"error": runs[0]["error"] if runs else "no restart ran", "runs": list(runs)}
    spread = {}
    for measure in RESTART_MEASURES:
        values = [float(r[measure]) for r in ran if r.get(measure) is not None]
        if values:
            spread[measure] = repeats.spread(values)
    by_first = sorted(ran, key=lambda r: float(r["to_first_batch_ms"]))
    middle = by_first[(len(by_first) - 1) // 2]
    combined = {k: v for k, v in middle.items() if k not in RESTART_MEASURES}
    for measure in RESTART_MEASURES:
        combined[measure] = spread[measure]["median"] if measure in spread else None
    return {**combined, "restarts": len(ran), "spread": spread, "runs": list(runs)}


# --- measures and goals (pure) ----------------------------------------------------------------


def _median(values: Sequence[float | None]) -> float | None:
    present = [float(v) for v in values if v is not None]
    return round(statistics.median(present), 4) if present else None


def run_measures(run: Mapping[str, Any]) -> dict[str, float | None]:
    """The sweep's figures of one run (a round's summary of :func:`repeats.summarize_run`)."""
    notes = run.get("notes") or {}
    measured = run.get("measured_batches") or []
    out: dict[str, float | None] = {
        "rows_per_s": run.get("rows_per_s"),
        "commit_p50_ms": run.get("commit_with_logs_ms_p50"),
        "commit_p99_ms": run.get("commit_with_logs_ms_p99"),
        "batch_ms_p50": run.get("batch_ms_p50"),
        "bytes_per_checkpoint": run.get("bytes_uploaded_per_checkpoint"),
        "stored_bytes": notes.get("stored_bytes"),
        "rss_peak_bytes": notes.get("rss_peak_bytes"),
        "rss_steady_bytes": notes.get("rss_steady_bytes"),
        "pss_anon_steady_bytes": notes.get("pss_anon_steady_bytes"),
        "pss_file_steady_bytes": notes.get("pss_file_steady_bytes"),
        **{
            f"pss_anon_steady_bytes_{kind}": notes.get(f"pss_anon_steady_bytes_{kind}")
            for kind in PROCESS_KINDS
        },
    }
    if notes.get("kind") == "gic" and measured:
        changelog = statistics.fmean(float(b["parts"].get("changelog_bytes", 0)) for b in measured)
        batch_ms = statistics.fmean(float(b["batch_ms"]) for b in measured)
        snapshot = float(measured[-1]["parts"].get("state_snapshot_bytes", 0))
        settings = notes.get("gic_settings") or {}
        interval = float(settings.get("materialization_interval_s", 0))
        ratio = float(settings.get("materialization_changelog_ratio") or changelog_ratio())
        by_interval = snapshot * batch_ms / (interval * 1000) if interval > 0 else 0.0
        out["changelog_bytes_per_checkpoint"] = round(changelog, 1)
        out["interval_spread_bytes"] = round(by_interval, 1)
        out["materialization_spread_bytes"] = round(max(by_interval, changelog / ratio), 1)
    return out


def changelog_ratio() -> float:
    """The runtime's default ``materialization_changelog_ratio`` (the benchmark keeps it)."""
    from gic_runtime.config import GICSettings

    return float(GICSettings.model_fields["materialization_changelog_ratio"].default)


MEASURES = (
    "rows_per_s",
    "commit_p50_ms",
    "commit_p99_ms",
    "batch_ms_p50",
    "bytes_per_checkpoint",
    "stored_bytes",
    "rss_peak_bytes",
    "rss_steady_bytes",
    "pss_anon_steady_bytes",
    "pss_file_steady_bytes",
    *(f"pss_anon_steady_bytes_{kind}" for kind in PROCESS_KINDS),
    "changelog_bytes_per_checkpoint",
    "interval_spread_bytes",
    "materialization_spread_bytes",
)


def system_measures(runs: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Per measure, the spread (median, min, max) over a system's runs."""
    per = [run_measures(r) for r in runs]
    out: dict[str, Any] = {}
    for m in MEASURES:
        values = [float(v) for p in per if (v := p.get(m)) is not None]
        if values:
            out[m] = repeats.spread(values)
    return out


def _value(measures: Mapping[str, Any], system: str, measure: str) -> float | None:
    entry = measures.get(system, {}).get(measure)
    return None if entry is None else entry.get("median")


def size_goals(
    label: str,
    measures: Mapping[str, Any],
    ratio_median: float | None,
    restart: Mapping[str, Any],
    ceiling_median: float | None = None,
) -> dict[str, Any]:
    """The goals of one size from its measures (:func:`system_measures` per system), the
    median of GIC's per-round throughput ratios, the restarts and the median
    :func:`ceiling` (``None``: the query without state did not run); ``applies`` says
    whether the size is one the goal is set for, and the throughput goal says whether a
    store whose state cost nothing could meet it (``reachable``)."""
    g = GOALS
    gic_p99, rocks_p99 = (
        _value(measures, GIC, "commit_p99_ms"),
        _value(measures, ROCKSDB, "commit_p99_ms"),
    )
    gic_bytes = _value(measures, GIC, "bytes_per_checkpoint")
    changelog = _value(measures, GIC, "changelog_bytes_per_checkpoint")
    spread = _value(measures, GIC, "materialization_spread_bytes")
    allowance = None if changelog is None or spread is None else changelog + spread
    by_interval = _value(measures, GIC, "interval_spread_bytes")
    interval_only = None if changelog is None or by_interval is None else changelog + by_interval
    rocks_bytes = _value(measures, ROCKSDB, "bytes_per_checkpoint")
    gic_restart, spark_restart = restart.get(GIC) or {}, restart.get(ROCKSDB) or {}
    out: dict[str, Any] = {
        "throughput": {
            "applies": label in GOAL_SIZES,
            **common.goal(
                "ratio_vs_rocksdb_changelog",
                ratio_median,
                at_least=g["throughput_vs_rocksdb_changelog_at_least"],
                met="met",
            ),
            "aim": g["throughput_aim"],
            "aim_met": None if ratio_median is None else ratio_median >= g["throughput_aim"],
            "ceiling_ratio": ceiling_median,
            "reachable": (
                None
                if ceiling_median is None
                else ceiling_median >= g["throughput_vs_rocksdb_changelog_at_least"]
            ),
        },
        "commit_p99": {
            "applies": label in GOAL_SIZES,
            **common.goal(
                "ratio_vs_rocksdb_changelog",
                common.ratio(gic_p99, rocks_p99),
                at_most=g["commit_p99_vs_rocksdb_changelog_at_most"],
                met="met",
            ),
        },
        "bytes_vs_changelog_plus_spread": {
            "applies": label in GOAL_SIZES,
            "allowance_bytes": allowance,
            "ratio_to_changelog_plus_interval_spread_only": common.ratio(gic_bytes, interval_only),
            **common.goal(
                "ratio",
                common.ratio(gic_bytes, allowance),
                at_most=g["bytes_vs_changelog_plus_spread_at_most"],
                met="met",
            ),
        },
        "bytes_vs_rocksdb": {
            "applies": label == LARGEST_ONLY,
            **common.goal(
                "rocksdb_over_gic",
                common.ratio(rocks_bytes, gic_bytes),
                at_least=g["rocksdb_bytes_over_gic_at_least"],
                met="met",
            ),
        },
        "restart_first_batch": _restart_goal(
            label,
            gic_restart,
            spark_restart,
            "to_first_batch_ms",
            g["restart_first_batch_vs_spark_at_most"],
        ),
        "restart_back_to_steady": _restart_goal(
            label,
            gic_restart,
            spark_restart,
            "back_to_steady_ms",
            g["restart_back_to_steady_vs_spark_at_most"],
        ),
    }
    return out


def _restart_goal(
    label: str,
    gic_restart: Mapping[str, Any],
    spark_restart: Mapping[str, Any],
    measure: str,
    at_most: float,
) -> dict[str, Any]:
    """GIC's restart ``measure`` over Spark's, against ``at_most`` (set for 4 GB only)."""
    return {
        "applies": label == LARGEST_ONLY,
        **common.goal(
            "ratio_vs_spark",
            common.ratio(gic_restart.get(measure), spark_restart.get(measure)),
            at_most=at_most,
            met="met",
        ),
    }


def rss_goal(sizes: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """GIC's steady RSS at 4 GB against its steady RSS at 100 MB (None: one is missing),
    and beside it the same ratio of its anonymous memory (``anonymous``), the part its
    settings bound: VmRSS also counts the pages of the LMDB files the workers map, page
    cache that grows with the state and that the kernel takes back under pressure.
    ``same_value_bytes`` compares the same three against :data:`RSS_REFERENCE` (100 MB
    with 4 GB's payload), where only the state's size differs."""
    base = _memory_ratios(sizes, "100MB")
    return {
        **base,
        "same_value_bytes": {
            **_memory_ratios(sizes, RSS_REFERENCE.label),
            "note": (
                f"against {RSS_REFERENCE.label}: 100 MB of state with the 4GB size's "
                f"{RSS_REFERENCE.value_bytes}-byte payload, so a batch's rows are the same "
                "size; the sweep's 100MB size has 500-byte payloads"
            ),
        },
    }


def _memory_ratios(sizes: Mapping[str, Mapping[str, Any]], base: str) -> dict[str, Any]:
    """GIC's steady memory at 4 GB over that at ``base``: VmRSS (the goal's measure), the
    tree's anonymous memory and the workers' (None: a size is missing)."""
    measures = {label: sizes.get(label, {}).get("measures", {}) for label in (LARGEST_ONLY, base)}
    tag = base.lower().replace("-", "_")

    def ratio(field: str) -> float | None:
        big = _value(measures[LARGEST_ONLY], GIC, field)
        return common.ratio(big, _value(measures[base], GIC, field))

    at_most = GOALS["rss_vs_100mb_at_most"]
    return {
        **common.goal(
            f"gic_rss_4gb_vs_{tag}", ratio("rss_steady_bytes"), at_most=at_most, met="met"
        ),
        "how": f"median over rounds of gic_s3's rss_steady_bytes at 4GB / at {base}",
        "anonymous": {
            **common.goal(
                f"gic_pss_anon_4gb_vs_{tag}",
                ratio("pss_anon_steady_bytes"),
                at_most=at_most,
                met="met",
            ),
            "how": "the same with pss_anon_steady_bytes (anonymous memory of the process tree)",
        },
        "workers_anonymous": {
            **common.goal(
                f"gic_pss_anon_workers_4gb_vs_{tag}",
                ratio("pss_anon_steady_bytes_workers"),
                at_most=at_most,
                met="met",
            ),
            "how": "the same with pss_anon_steady_bytes_workers: the Python workers alone, "
            "where GIC's state tasks, stores and caches live (the JVM runs Spark's part)",
        },
    }


def goals_summary(sizes: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """Per size, each goal that applies there: met (True / False / None: not measured)."""
    out: dict[str, Any] = {
        label: {name: g["met"] for name, g in data.get("goals", {}).items() if g.get("applies")}
        for label, data in sizes.items()
    }
    out["rss_4gb_vs_100mb"] = rss_goal(sizes)["met"]
    return out


def ceiling(rounds: Sequence[Mapping[str, Any]]) -> dict[str, Any] | None:
    """:func:`bench.streaming.repeats.ceiling` of the sweep: :data:`FLOOR` over the RocksDB
    baseline per round, and GIC over the floor (``None``: the floor did not run)."""
    return repeats.ceiling(rounds, (ROCKSDB,), FLOOR, (GIC,))


def _ceiling_median(bound: Mapping[str, Any] | None) -> float | None:
    return None if bound is None else bound["floor_over_best_baseline"]["median"]


def shape_size(
    size: StateSize,
    spec: WorkloadSpec,
    section: Mapping[str, Any],
    restart: Mapping[str, Any],
    run_s: float,
) -> dict[str, Any]:
    """The result of one size: measures per system, goals, the rounds (without their
    warm-up batches) and the restarts."""
    names = list(section["systems"])
    per_system = {n: system_measures([r[n] for r in section["rounds"] if n in r]) for n in names}
    ratio = section["ratios"]["ratios"].get(GIC, {})
    bound = ceiling(section["rounds"])
    rounds = [
        {n: {k: v for k, v in run.items() if k != "warmup_batches"} for n, run in r.items()}
        for r in section["rounds"]
    ]
    return {
        "size": size.describe(),
        "workload": spec.describe(),
        "systems_run": names,
        "measures": per_system,
        "throughput_ratio_vs_rocksdb_changelog": ratio,
        "restart": dict(restart),
        "goals": size_goals(
            size.label,
            per_system,
            ratio.get("median"),
            restart,
            _ceiling_median(bound),
        ),
        **({"ceiling": bound} if bound is not None else {}),
        "outputs": section.get("outputs"),
        "conditions": section.get("conditions"),
        "contention": section.get("contention"),
        "failed": section.get("failed"),
        "rounds": rounds,
        "run_s": round(run_s, 1),
        "recorded_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }


def kept_sizes(path: Path, ran: Sequence[str]) -> dict[str, Any]:
    """The sizes of the previous result at ``path`` that this run did not measure."""
    try:
        old = json.loads(path.read_text())
        sizes = old["sizes"]
    except (OSError, ValueError, KeyError, TypeError):
        return {}
    if not isinstance(sizes, dict):
        return {}
    return {k: v for k, v in sizes.items() if k not in ran and isinstance(v, dict)}


def ordered_sizes(sizes: Mapping[str, Any]) -> dict[str, Any]:
    order = [s.label for s in ALL_SIZES]
    return {k: sizes[k] for k in sorted(sizes, key=lambda k: order.index(k) if k in order else 99)}


# --- plots ------------------------------------------------------------------------------------

PLOTTED = {
    "rows_per_s": ("rows/s", "measures"),
    "commit_p50_ms": ("commit p50 (ms, with logs)", "measures"),
    "commit_p99_ms": ("commit p99 (ms, with logs)", "measures"),
    "bytes_per_checkpoint": ("bytes uploaded per checkpoint", "measures"),
    "stored_bytes": ("bytes stored at the end of the run", "measures"),
    "rss_steady_bytes": ("RSS of the process tree (steady, bytes)", "measures"),
    "pss_anon_steady_bytes": ("anonymous PSS of the process tree (steady, bytes)", "measures"),
    "to_first_batch_ms": ("restart: start to first batch (ms)", "restart"),
    "back_to_steady_ms": ("restart: start to a steady batch (ms)", "restart"),
}


def plot_series(
    sizes: Mapping[str, Mapping[str, Any]], measure: str
) -> dict[str, list[tuple[float, float, float, float]]]:
    """Per system, (state bytes, median, min, max) of ``measure`` at every size where it
    is positive (the plots are log scale: the query without state stores nothing)."""
    _, where = PLOTTED[measure]
    series: dict[str, list[tuple[float, float, float, float]]] = {}
    for data in sizes.values():
        if data["size"].get("reference"):
            continue
        x = float(data["size"]["state_bytes"])
        for system, values in (data.get(where) or {}).items():
            if where == "measures":
                entry = values.get(measure)
                if entry is None or entry.get("median") is None or entry["median"] <= 0:
                    continue
                point = (x, entry["median"], max(entry["min"], 0.0), entry["max"])
            else:
                v = values.get(measure)
                if v is None or v <= 0:
                    continue
                spread = (values.get("spread") or {}).get(measure) or {}
                low, high = spread.get("min", v), spread.get("max", v)
                point = (x, float(v), max(float(low), 0.0), float(high))
            series.setdefault(system, []).append(point)
    return series


def plot(out_dir: Path, sizes: Mapping[str, Mapping[str, Any]]) -> list[Path]:
    """One PNG per measure of :data:`PLOTTED` against state size, both axes log scale."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    written = []
    for measure, (label, _) in PLOTTED.items():
        series = plot_series(sizes, measure)
        if not series:
            continue
        fig, ax = plt.subplots(figsize=(7, 4.5))
        for i, (system, points) in enumerate(sorted(series.items())):
            points.sort()
            xs = [p[0] for p in points]
            med = [p[1] for p in points]
            err = [[p[1] - p[2] for p in points], [p[3] - p[1] for p in points]]
            ax.errorbar(xs, med, yerr=err, marker="o", capsize=4, label=system, color=f"C{i}")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("state size (bytes)")
        ax.set_ylabel(label)
        over = "restarts" if PLOTTED[measure][1] == "restart" else "rounds"
        ax.set_title(f"{NAME}: {label} (median, min-max over {over})", fontsize=9)
        ax.legend(fontsize=8)
        ax.grid(True, which="both", alpha=0.3)
        written.append(common.save_figure(fig, out_dir / f"{NAME}_{measure}.png"))
    return written


# --- main -------------------------------------------------------------------------------------


def _run_size(
    size: StateSize,
    base: BenchParams,
    mode: modes.Mode,
    server: TestingS3Server,
    rounds: int,
    *,
    restarts: int,
) -> dict[str, Any]:
    started = time.monotonic()
    load_at_start = os.getloadavg()
    spec = workload(size, base.quick)
    warmup, measured = batches(spec)
    base = dataclasses.replace(base, warmup=warmup, measured=measured)
    runs = SizeRuns(spec, output=writes_output(size), reclaim=server.reclaim_deleted)
    restart: dict[str, Any] = {}
    try:
        with modes.params_for(mode, base) as params:
            names = systems_for(size, memory_bytes(params.driver_memory))
            comparison = Comparison(
                name=NAME,
                workload=lambda _quick: spec,
                systems={n: runs.system(n) for n in names},
                baselines=(ROCKSDB,),
                contenders=(GIC,),
                goal=GOALS["throughput_vs_rocksdb_changelog_at_least"],
                aim=GOALS["throughput_aim"],
            )
            with w1_s3.with_latency(server.endpoint_url, LATENCY_MS) as conditions:
                section = repeats.run_mode(comparison, spec, params, names, rounds)
                steady = {
                    n: statistics.median(
                        [float(r[n]["batch_ms_p50"]) for r in section["rounds"] if n in r]
                    )
                    for n in names
                    if any(n in r for r in section["rounds"])
                }
                restartable = [
                    n
                    for n in names
                    if not size.reference and n != FLOOR and n in runs.last and n in steady
                ]
                figures: dict[str, list[dict[str, Any]]] = {n: [] for n in restartable}
                for i in range(restarts):
                    for n in repeats.order(restartable, i):
                        print(f"-- {NAME} {size.label}: restart {i + 1}/{restarts} {n}", flush=True)
                        try:
                            figures[n].append(restart_figures(runs.restart(n, params), steady[n]))
                        except BenchmarkError as exc:
                            figures[n].append({"error": str(exc)})
                restart = {n: combine_restarts(f) for n, f in figures.items()}
            section["conditions"] = dict(conditions)
            section["contention"] = modes.contention(mode)
    finally:
        runs.clean()
    data = shape_size(size, spec, section, restart, time.monotonic() - started)
    data["batches"] = {
        "load": spec.load_batches,
        "warmup_including_load": warmup,
        "measured": measured,
        "restart": RESTART_BATCHES,
        "restarts": restarts,
    }
    data["hdfs_rule"] = {
        "fits": hdfs_fits(size, memory_bytes(params.driver_memory)),
        "runs": HDFS in names,
        "rule": (
            f"spark_hdfs_s3a runs where {HDFS_COPIES} x state bytes <= {HDFS_HEAP_FRACTION} x "
            f"the driver heap ({params.driver_memory})"
        ),
    }
    data["output_checked"] = runs.output
    data["load_average"] = {
        "start": [round(v, 2) for v in load_at_start],
        "end": [round(v, 2) for v in os.getloadavg()],
        "note": "1, 5 and 15 minute load averages of the machine (2 cores, shared)",
    }
    return data


DEFINITIONS: dict[str, Any] = {
    **repeats.DEFINITIONS,
    "rss": RSS_DEFINITION,
    "stored_bytes": "bytes under the run's prefix in the bucket when the run ended",
    "bytes_per_checkpoint": (
        "mean over measured batches of the bytes the batch added to storage "
        "(each system's notes.bytes_definition)"
    ),
    "changelog_bytes_per_checkpoint": "GIC: mean BatchReport.changelog_bytes",
    "interval_spread_bytes": (
        "GIC: the state's snapshot bytes at the end x mean batch_ms / "
        "materialization_interval_s: the snapshot bytes per batch of materializing the "
        "whole state once per interval"
    ),
    "materialization_spread_bytes": (
        "GIC: the snapshot bytes per batch the runtime's materialization policy implies: a "
        "bucket is snapshotted again when its changelog since the last snapshot reaches "
        "materialization_changelog_ratio x that snapshot, or after the interval, whichever "
        "comes first: max(changelog_bytes_per_checkpoint / ratio, interval_spread_bytes). "
        "The goal bytes_vs_changelog_plus_spread divides bytes_per_checkpoint by "
        "changelog_bytes_per_checkpoint + this; "
        "ratio_to_changelog_plus_interval_spread_only uses interval_spread_bytes instead"
    ),
    "to_first_batch_ms": (
        "restart of the last round's run in a fresh process (GIC: empty local "
        "directory; Spark: a new JVM, its state store's local files new): query start "
        "to the end of its first batch. Each system restarts GIC_BENCH_RESTARTS times "
        f"(default {RESTARTS}), the systems alternated, each restart from the checkpoint "
        "the one before left; restart.<system> holds the medians, spread their median, "
        "min, max and n, runs every restart's figures"
    ),
    "back_to_steady_ms": (
        f"to_first_batch_ms + the durations of the next batches until one takes at "
        f"most {STEADY_FACTOR} x the steady batch (median batch_ms_p50 of the "
        "system's rounds); null: none did within the restart's batches"
    ),
    "goals": GOALS,
}


def reshape(data: Mapping[str, Any]) -> dict[str, Any]:
    """``data`` (a written result) with every size's measures and goals, and the goal
    summary, computed again from its rounds and restarts (after a change of a measure's
    or goal's definition; the measurements are unchanged)."""
    sizes: dict[str, Any] = {}
    for label, size in data["sizes"].items():
        names = list(size["measures"])
        measures = {n: system_measures([r[n] for r in size["rounds"] if n in r]) for n in names}
        ratio = size["throughput_ratio_vs_rocksdb_changelog"].get("median")
        bound = ceiling(size["rounds"])
        goals = size_goals(
            label, measures, ratio, size.get("restart") or {}, _ceiling_median(bound)
        )
        sizes[label] = {
            **size,
            "measures": measures,
            "goals": goals,
            **({"ceiling": bound} if bound is not None else {}),
        }
    return {
        **data,
        "definitions": {**data.get("definitions", {}), **DEFINITIONS},
        "sizes": sizes,
        "goals": goals_summary(sizes),
        "rss_goal": rss_goal(sizes),
    }


def main() -> None:
    if sys.argv[1:] == ["--reshape"]:
        path = common.RESULTS / f"{NAME}.json"
        data = reshape(json.loads(path.read_text()))
        path.write_text(json.dumps(data, indent=2) + "\n")
        plot(path.parent, data["sizes"])
        print(f"rewrote {path}; goals: {json.dumps(data['goals'])}", flush=True)
        return
    base = harness.params_from_env()
    chosen = sizes_from_env()
    rounds = repeats.rounds_from_env(quick=base.quick)
    restarts = restarts_from_env()
    mode = modes.mode_from_env(os.environ, "GIC_BENCH_SWEEP_MODE")
    out_dir = harness.QUICK_RESULTS if base.quick else common.RESULTS
    started = time.monotonic()
    measured: dict[str, Any] = {}
    with w1_s3.shared_s3() as server:
        for size in chosen:
            print(f"== {NAME} {size.label}: {size.describe()}", flush=True)
            measured[size.label] = _run_size(size, base, mode, server, rounds, restarts=restarts)
            print(
                f"== {NAME} {size.label} done in {measured[size.label]['run_s']} s; goals "
                f"{json.dumps({k: v['met'] for k, v in measured[size.label]['goals'].items()})}",
                flush=True,
            )
    sizes = ordered_sizes({**kept_sizes(out_dir / f"{NAME}.json", list(measured)), **measured})
    data = {
        "setup": {
            "sizes": [s.describe() for s in ALL_SIZES],
            "sizes_run": list(measured),
            "sizes_kept_from_previous_file": sorted(set(sizes) - set(measured)),
            "rounds": rounds,
            "restarts": restarts,
            "mode": mode.describe(),
            "latency_ms_per_request": LATENCY_MS,
            "rows_per_batch": workload(SIZES[0], base.quick).rows_per_batch,
            "systems": {
                GIC: "GIC, storage s3:// (boto3), through the latency proxy",
                ROCKSDB: "Spark's RocksDB store, changelog checkpointing, s3a:// (the baseline)",
                HDFS: "Spark's HDFS-backed store on s3a://, where it fits (hdfs_rule per size)",
                FLOOR: (
                    "the query without state: each batch's aggregation alone, offset and "
                    "commit logs on local disk; the floor under every system (ceiling per "
                    "size: its rows/s over the baseline's, the ratio a system whose state "
                    "and checkpoints cost nothing would reach)"
                ),
            },
            "storage": "one SeaweedFS S3 server on loopback behind LatencyProxy for every system",
            "quick": base.quick,
        },
        "definitions": DEFINITIONS,
        "sizes": sizes,
        "goals": goals_summary(sizes),
        "rss_goal": rss_goal(sizes),
        "run_s": round(time.monotonic() - started, 1),
    }
    path = harness.write(NAME, data, harness.QUICK_RESULTS if base.quick else None)
    print(f"wrote {path}", flush=True)
    for png in plot(path.parent, sizes):
        print(f"wrote {png}", flush=True)
    print(f"goals: {json.dumps(data['goals'])}", flush=True)
    failed = {k: v["failed"] for k, v in measured.items() if v.get("failed")}
    if failed:
        raise BenchmarkError(f"{NAME}: runs failed: {failed}")


if __name__ == "__main__":
    main()
