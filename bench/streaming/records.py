"""Values exchanged between the harness and one system run.

A system run (in its own process) turns a :class:`~bench.streaming.workloads.WorkloadSpec`
and :class:`BenchParams` into a :class:`RunResult`: one :class:`BatchRecord` per
micro-batch, warm-up and measured apart, plus notes saying how the numbers were taken.
Everything here round-trips through JSON (``to_json`` / ``from_json``) because the run
happens in a subprocess.

Invariants: ``BatchRecord`` values are non-negative; ``RunResult.measured`` holds exactly
``BenchParams.measured`` records with consecutive batch ids after the warm-up ones.
All classes are immutable values, safe to share between threads.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from gic_runtime.errors import GICError


class BenchmarkError(GICError):
    """A benchmark system failed to run or produced unusable measurements."""


@dataclass(frozen=True)
class BenchParams:
    """How a system is run (the same for every system of one benchmark run)."""

    warmup: int = 5
    """Micro-batches run first and not measured (JIT, code generation, caches)."""
    measured: int = 25
    """Micro-batches measured after the warm-up ones."""
    master: str = "local[2]"
    """Spark master; two task slots, as on the benchmark machine."""
    driver_memory: str = "6g"
    """Heap of the local Spark JVM; the event-log state is a few hundred MB per version."""
    timeout_s: float = 3600.0
    """Deadline of one system run, from session start to the last measured batch."""
    quick: bool = False
    """Small sizes for smoke tests and development loops (not for figures)."""
    mode: str = "local2"
    """Name of the cluster mode (:mod:`bench.streaming.modes`); part of log file names."""
    executors: int = 0
    """Executor processes (one core each); 0 in local mode, where the driver runs tasks."""
    executor_memory_mib: int = 0
    """Heap of each executor JVM; 0 in local mode."""

    def __post_init__(self) -> None:
        if self.warmup < 0 or self.measured < 1:
            raise BenchmarkError(
                f"need warmup >= 0 and measured >= 1 micro-batches, got warmup={self.warmup} "
                f"measured={self.measured}; fix GIC_BENCH_WARMUP / GIC_BENCH_MEASURED"
            )
        if (self.executors > 0) != (self.executor_memory_mib > 0):
            raise BenchmarkError(
                f"executors={self.executors} and executor_memory_mib="
                f"{self.executor_memory_mib} must both be set (cluster) or both be 0 (local)"
            )

    @property
    def cluster(self) -> bool:
        """True when tasks run in executor processes, not in the driver's JVM."""
        return self.executors > 0

    @property
    def total_batches(self) -> int:
        return self.warmup + self.measured

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> BenchParams:
        return cls(**data)


@dataclass(frozen=True)
class BatchRecord:
    """Measurements of one micro-batch of one system.

    ``batch_ms`` is the wall time of the whole micro-batch, ``commit_ms`` the part of it
    (or, for Spark's state stores, the metric) that makes the batch durable, as the
    system's ``notes["commit_ms_definition"]`` says; ``bytes`` is what the batch added to
    checkpoint storage. ``parts`` carries system-specific components (ms, counts, bytes).
    """

    batch_id: int
    rows: int
    batch_ms: float
    commit_ms: float
    bytes: int
    parts: Mapping[str, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if min(self.rows, self.batch_ms, self.commit_ms, self.bytes) < 0:
            raise BenchmarkError(f"negative measurement in batch record {self}")

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "parts": dict(self.parts)}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> BatchRecord:
        return cls(
            batch_id=int(data["batch_id"]),
            rows=int(data["rows"]),
            batch_ms=float(data["batch_ms"]),
            commit_ms=float(data["commit_ms"]),
            bytes=int(data["bytes"]),
            parts={str(k): float(v) for k, v in data.get("parts", {}).items()},
        )


@dataclass(frozen=True)
class RunResult:
    """Everything one system run returns.

    ``notes`` must hold ``commit_ms_definition`` and ``bytes_definition`` (how the system
    measured them) and may hold configuration, versions and caveats; it ends up verbatim
    in the result JSON.
    """

    system: str
    warmup: tuple[BatchRecord, ...]
    measured: tuple[BatchRecord, ...]
    notes: Mapping[str, Any] = field(default_factory=dict)

    def check(self, params: BenchParams) -> None:
        """Raise :class:`BenchmarkError` unless the batch counts and ids match ``params``."""
        ids = [r.batch_id for r in (*self.warmup, *self.measured)]
        if len(self.warmup) != params.warmup or len(self.measured) != params.measured:
            raise BenchmarkError(
                f"system {self.system!r} returned {len(self.warmup)} warm-up and "
                f"{len(self.measured)} measured batches, expected {params.warmup} and "
                f"{params.measured}; its runner must stop after exactly that many"
            )
        if ids != list(range(ids[0], ids[0] + len(ids))):
            raise BenchmarkError(
                f"system {self.system!r} returned non-consecutive batch ids {ids}; every "
                "micro-batch of the run must be reported once, in order"
            )

    def to_json(self) -> dict[str, Any]:
        return {
            "system": self.system,
            "warmup": [r.to_json() for r in self.warmup],
            "measured": [r.to_json() for r in self.measured],
            "notes": dict(self.notes),
        }

    @classmethod
    def of_batches(
        cls,
        system: str,
        records: Sequence[BatchRecord],
        params: BenchParams,
        notes: Mapping[str, Any],
    ) -> RunResult:
        """The run of ``records`` in order: the first ``params.warmup`` are the warm-up."""
        return cls(
            system=system,
            warmup=tuple(records[: params.warmup]),
            measured=tuple(records[params.warmup :]),
            notes=notes,
        )

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> RunResult:
        return cls(
            system=str(data["system"]),
            warmup=tuple(BatchRecord.from_json(r) for r in data["warmup"]),
            measured=tuple(BatchRecord.from_json(r) for r in data["measured"]),
            notes=dict(data.get("notes", {})),
        )
