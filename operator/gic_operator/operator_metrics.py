"""The operator's Prometheus metrics, on a registry of its own.

Metrics (all prefixed ``gic_operator_``):

* ``reconciles_total{resource}``, ``reconcile_errors_total{resource}`` -- counters
  (a reconcile error: the reconcile raised, e.g. the API was unreachable);
* ``errors_total{resource,reason}`` -- counter: errors reconciles met and recorded in
  the resource's status, one per pass that met one (``InternalError`` is a bug);
* ``reconcile_seconds{resource}`` -- histogram of reconcile durations;
* ``savepoints{state}`` -- gauge: Savepoint resources per state (a state missing from
  the latest count reads 0);
* ``checkpoint_age_seconds{namespace,job}`` -- gauge: seconds since the job's latest
  checkpoint (removed when the job goes away);
* ``job_phase{namespace,job,phase}`` -- gauge: 1 for the job's current phase, 0 for the
  others (removed when the job goes away).

The registry is private (not prometheus_client's global one), so tests and several
instances never collide; :func:`default_metrics` is the one the running operator uses.

Thread-safety: every method may be called from any thread (prometheus_client metrics
are thread-safe; the bookkeeping of label sets is guarded by a lock).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from gic_operator.models.gicjob_status import JobPhase

__all__ = ["CONTENT_TYPE_LATEST", "OperatorMetrics", "default_metrics"]

_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)


class OperatorMetrics:
    """The operator's metrics (see the module docstring). Thread-safe."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self._lock = threading.Lock()
        self._savepoint_states: set[str] = set()
        self._jobs: dict[tuple[str, str], set[str]] = {}
        self._ages: set[tuple[str, str]] = set()
        self.reconciles = Counter(
            "gic_operator_reconciles",
            "Reconciles run, by resource kind.",
            ["resource"],
            registry=self.registry,
        )
        self.reconcile_errors = Counter(
            "gic_operator_reconcile_errors",
            "Reconciles that ended in an error, by resource kind.",
            ["resource"],
            registry=self.registry,
        )
        self.errors = Counter(
            "gic_operator_errors",
            "Errors reconciles met and recorded in the status, by resource kind and reason.",
            ["resource", "reason"],
            registry=self.registry,
        )
        self.reconcile_seconds = Histogram(
            "gic_operator_reconcile_seconds",
            "Duration of reconciles in seconds, by resource kind.",
            ["resource"],
            buckets=_BUCKETS,
            registry=self.registry,
        )
        self.savepoints = Gauge(
            "gic_operator_savepoints",
            "Savepoint resources by state.",
            ["state"],
            registry=self.registry,
        )
        self.checkpoint_age = Gauge(
            "gic_operator_checkpoint_age_seconds",
            "Seconds since the job's latest completed checkpoint.",
            ["namespace", "job"],
            registry=self.registry,
        )
        self.job_phase = Gauge(
            "gic_operator_job_phase",
            "1 for the job's current phase, 0 for the other phases.",
            ["namespace", "job", "phase"],
            registry=self.registry,
        )

    def observe_reconcile(self, resource: str, seconds: float, error: bool) -> None:
        """Count one reconcile of ``resource`` that took ``seconds``."""
        self.reconciles.labels(resource).inc()
        self.reconcile_seconds.labels(resource).observe(seconds)
        if error:
            self.reconcile_errors.labels(resource).inc()

    def count_error(self, resource: str, reason: str) -> None:
        """Count one error of ``reason`` a reconcile of ``resource`` met."""
        self.errors.labels(resource, reason).inc()

    @contextmanager
    def time_reconcile(self, resource: str) -> Iterator[None]:
        """Observe the enclosed block as one reconcile (an exception counts as error)."""
        start = time.perf_counter()
        error = True
        try:
            yield
            error = False
        finally:
            self.observe_reconcile(resource, time.perf_counter() - start, error)

    def set_checkpoint_age(self, namespace: str, job: str, seconds: float | None) -> None:
        """Set the job's checkpoint age; ``None`` removes the job's series."""
        key = (namespace, job)
        with self._lock:
            if seconds is not None:
                self.checkpoint_age.labels(namespace, job).set(seconds)
                self._ages.add(key)
            elif key in self._ages:
                self._ages.discard(key)
                self.checkpoint_age.remove(namespace, job)

    def set_savepoint_counts(self, counts: Mapping[str, int]) -> None:
        """Set the number of Savepoints per state (states not given read 0)."""
        with self._lock:
            self._savepoint_states |= set(counts)
            for state in self._savepoint_states:
                self.savepoints.labels(state).set(counts.get(state, 0))

    def set_job_phase(self, namespace: str, job: str, phase: str | None) -> None:
        """Mark ``phase`` as the job's phase; ``None`` removes the job's series."""
        key = (namespace, job)
        with self._lock:
            known = self._jobs.pop(key, set())
            if phase is None:
                for name in known:
                    self.job_phase.remove(namespace, job, name)
                return
            names = known | {p.value for p in JobPhase} | {phase}
            for name in names:
                self.job_phase.labels(namespace, job, name).set(1 if name == phase else 0)
            self._jobs[key] = names

    def render(self) -> bytes:
        """The metrics in the Prometheus text format."""
        return generate_latest(self.registry)


_DEFAULT = OperatorMetrics()


def default_metrics() -> OperatorMetrics:
    """The process-wide metrics of the running operator."""
    return _DEFAULT
