"""Prometheus metrics of a job's driver.

Every :class:`DriverMetrics` owns its own ``CollectorRegistry`` (never the process-wide
default), so several drivers, or tests, in one process never share or clash on series.
Every series carries the ``job_id`` label; labelled families (materialization events,
savepoint states) are created at zero for every known label value so dashboards and
alerts see them before the first event.

Series (``*_total`` are counters):

* ``gic_checkpoint_duration_seconds`` (histogram): time from batch start to manifest
  written;
* ``gic_checkpoint_bytes_uploaded_total``, ``gic_changelog_bytes_total``,
  ``gic_snapshot_bytes_total``: bytes uploaded for checkpoints, in total and by kind;
* ``gic_local_hit_ratio``: share of buckets served from the executor-local copy in the
  last checkpoint;
* ``gic_manifest_bytes``: size of the last checkpoint's manifest (the job's metadata;
  flat over time when the growth limits hold);
* ``gic_materializations_total{event=started|adopted}``;
* ``gic_last_checkpoint_id``, ``gic_last_checkpoint_timestamp_seconds``;
* ``gic_batches_total``; ``gic_epoch`` (the driver's fencing epoch);
* ``gic_restore_source_released`` (0/1);
* ``gic_restore_pending_buckets``, ``gic_restore_bytes_total``: buckets still being
  restored in the background after the last batch, stored bytes restored that way;
* ``gic_orphans_deleted_total``, ``gic_orphan_bytes_deleted_total``;
* ``gic_savepoints_total{state=completed|failed}``;
* ``gic_control_requests_refused_total``: control requests the driver refused
  (not authenticated, replayed, expired, or a savepoint target outside the job's
  storage; :mod:`gic_runtime.control.auth`).

Thread-safety: every method may be called from any thread (prometheus-client metrics are
thread-safe).
"""

from __future__ import annotations

import math
import threading
import time
from dataclasses import dataclass
from wsgiref.simple_server import WSGIServer

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
    start_http_server,
)

from gic_runtime.errors import ConfigurationError
from gic_runtime.listen import host_port, listen_addresses

#: Checkpoint durations span tens of milliseconds (small batches, local disk) to minutes
#: (a forced full snapshot to a slow store); buckets cover that range roughly evenly on a
#: log scale.
DURATION_BUCKETS = (0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0)
MATERIALIZATION_EVENTS = ("started", "adopted")
SAVEPOINT_STATES = ("completed", "failed")


@dataclass(frozen=True, slots=True)
class MetricsServer:
    """A running metrics HTTP endpoint on one port of one or two addresses (see
    :func:`gic_runtime.listen.listen_addresses`); :meth:`close` stops it (idempotent)."""

    servers: tuple[tuple[WSGIServer, threading.Thread], ...]

    @property
    def port(self) -> int:
        """The port served (useful when 0 asked for any free port)."""
        return int(self.servers[0][0].server_port)

    @property
    def addresses(self) -> tuple[str, ...]:
        """The addresses served on, the requested one first."""
        return tuple(str(server.server_address[0]) for server, _ in self.servers)

    def close(self) -> None:
        for server, thread in self.servers:
            server.shutdown()
            server.server_close()
            thread.join(timeout=5)

    def __enter__(self) -> MetricsServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _non_negative(name: str, value: float) -> float:
    if not math.isfinite(value) or value < 0:
        raise ConfigurationError(f"metric {name} needs a finite, non-negative value, got {value}")
    return value


class DriverMetrics:
    """The metrics of the driver of job ``job_id`` (see the module docstring)."""

    def __init__(self, job_id: str) -> None:
        self.job_id = job_id
        self.registry = CollectorRegistry()
        reg = self.registry
        job = ("job_id",)
        self._duration = Histogram(
            "gic_checkpoint_duration_seconds",
            "Duration of a batch's checkpoint, from batch start to manifest written.",
            job,
            registry=reg,
            buckets=DURATION_BUCKETS,
        ).labels(job_id)
        self._uploaded = Counter(
            "gic_checkpoint_bytes_uploaded",
            "Bytes uploaded for checkpoints (changelog and snapshots).",
            job,
            registry=reg,
        ).labels(job_id)
        self._changelog = Counter(
            "gic_changelog_bytes", "Changelog bytes uploaded.", job, registry=reg
        ).labels(job_id)
        self._snapshot = Counter(
            "gic_snapshot_bytes", "Snapshot (materialization) bytes uploaded.", job, registry=reg
        ).labels(job_id)
        self._hit_ratio = Gauge(
            "gic_local_hit_ratio",
            "Share of buckets served from the executor-local state copy in the last checkpoint.",
            job,
            registry=reg,
        ).labels(job_id)
        self._manifest_bytes = Gauge(
            "gic_manifest_bytes",
            "Bytes of the last checkpoint's manifest.",
            job,
            registry=reg,
        ).labels(job_id)
        self._executors = Gauge(
            "gic_executors",
            "Live executors before the last batch (0 in local mode: one executor).",
            job,
            registry=reg,
        ).labels(job_id)
        self._moves = Counter(
            "gic_state_task_moves",
            "State tasks that ran on another executor than in the batch before.",
            job,
            registry=reg,
        ).labels(job_id)
        materializations = Counter(
            "gic_materializations",
            "Bucket materializations by event (started, adopted by a completed checkpoint).",
            (*job, "event"),
            registry=reg,
        )
        self._materializations = {
            e: materializations.labels(job_id, e) for e in MATERIALIZATION_EVENTS
        }
        self._last_id = Gauge(
            "gic_last_checkpoint_id", "Id of the last completed checkpoint.", job, registry=reg
        ).labels(job_id)
        self._last_ts = Gauge(
            "gic_last_checkpoint_timestamp_seconds",
            "Unix time the last checkpoint completed.",
            job,
            registry=reg,
        ).labels(job_id)
        self._batches = Counter(
            "gic_batches", "Micro-batches completed by this driver.", job, registry=reg
        ).labels(job_id)
        self._epoch = Gauge(
            "gic_epoch", "Fencing epoch of this driver launch.", job, registry=reg
        ).labels(job_id)
        self._released = Gauge(
            "gic_restore_source_released",
            "1 once the restore source is no longer referenced (no-claim: may be deleted).",
            job,
            registry=reg,
        ).labels(job_id)
        self._orphans = Counter(
            "gic_orphans_deleted", "Orphaned objects deleted by sweeps.", job, registry=reg
        ).labels(job_id)
        self._orphan_bytes = Counter(
            "gic_orphan_bytes_deleted", "Bytes of orphaned objects deleted.", job, registry=reg
        ).labels(job_id)
        self._watermark = Gauge(
            "gic_watermark_seconds",
            "Event-time watermark the last checkpoint records (Unix time; jobs with event time).",
            job,
            registry=reg,
        ).labels(job_id)
        self._late = Counter(
            "gic_late_rows", "Input rows older than their batch's watermark.", job, registry=reg
        ).labels(job_id)
        self._timers = Counter(
            "gic_timers_fired", "Timers fired (event and processing time).", job, registry=reg
        ).labels(job_id)
        self._expired = Counter(
            "gic_state_expired",
            "State entries removed because their time to live passed.",
            job,
            registry=reg,
        ).labels(job_id)
        self._restore_pending = Gauge(
            "gic_restore_pending_buckets",
            "Buckets still being restored from storage in the background after the last batch.",
            job,
            registry=reg,
        ).labels(job_id)
        self._restore_bytes = Counter(
            "gic_restore_bytes",
            "Stored bytes of buckets restored from storage in the background.",
            job,
            registry=reg,
        ).labels(job_id)
        savepoints = Counter(
            "gic_savepoints", "Savepoints finished, by state.", (*job, "state"), registry=reg
        )
        self._savepoints = {s: savepoints.labels(job_id, s) for s in SAVEPOINT_STATES}
        self._refused = Counter(
            "gic_control_requests_refused",
            "Control requests refused (not authenticated, replayed, expired, or a target "
            "outside the job's storage).",
            job,
            registry=reg,
        ).labels(job_id)

    def observe_checkpoint(
        self,
        checkpoint_id: int,
        duration_s: float,
        *,
        bytes_uploaded: int = 0,
        changelog_bytes: int = 0,
        snapshot_bytes: int = 0,
        local_hit_ratio: float | None = None,
        manifest_bytes: int | None = None,
        completed_at: float | None = None,
    ) -> None:
        """Record a completed checkpoint (``completed_at`` defaults to now;
        ``manifest_bytes`` None leaves the manifest gauge as it was)."""
        self._duration.observe(_non_negative("gic_checkpoint_duration_seconds", duration_s))
        self._uploaded.inc(_non_negative("bytes_uploaded", bytes_uploaded))
        self._changelog.inc(_non_negative("changelog_bytes", changelog_bytes))
        self._snapshot.inc(_non_negative("snapshot_bytes", snapshot_bytes))
        if local_hit_ratio is not None:
            self._hit_ratio.set(_non_negative("gic_local_hit_ratio", local_hit_ratio))
        if manifest_bytes is not None:
            self._manifest_bytes.set(_non_negative("gic_manifest_bytes", manifest_bytes))
        self._last_id.set(_non_negative("gic_last_checkpoint_id", checkpoint_id))
        self._last_ts.set(time.time() if completed_at is None else completed_at)

    def observe_restore(self, *, pending: int, restored_bytes: int) -> None:
        """Record the background restore after a batch (see ``BatchReport``)."""
        self._restore_pending.set(_non_negative("gic_restore_pending_buckets", pending))
        self._restore_bytes.inc(_non_negative("gic_restore_bytes_total", restored_bytes))

    def observe_placement(self, *, executors: int, moved: int) -> None:
        """Record where the last batch's state tasks ran (see ``BatchReport``)."""
        self._executors.set(_non_negative("gic_executors", executors))
        self._moves.inc(_non_negative("gic_state_task_moves_total", moved))

    def observe_event_time(
        self,
        *,
        watermark_us: int | None,
        late_rows: int = 0,
        timers_fired: int = 0,
        expired: int = 0,
    ) -> None:
        """Record the watermark after a batch (``None``: no event time, left unset), its
        late rows, the timers it fired and the state entries that expired in it."""
        if watermark_us is not None:
            self._watermark.set(watermark_us / 1_000_000)
        self._late.inc(_non_negative("gic_late_rows_total", late_rows))
        self._timers.inc(_non_negative("gic_timers_fired_total", timers_fired))
        self._expired.inc(_non_negative("gic_state_expired_total", expired))

    def observe_batch(self, count: int = 1) -> None:
        """Count completed micro-batches."""
        self._batches.inc(_non_negative("gic_batches_total", count))

    def observe_materializations(self, *, started: int = 0, adopted: int = 0) -> None:
        """Count materializations started and adopted by a completed checkpoint."""
        self._materializations["started"].inc(_non_negative("started", started))
        self._materializations["adopted"].inc(_non_negative("adopted", adopted))

    def observe_sweep(self, deleted: int, deleted_bytes: int = 0) -> None:
        """Count orphans deleted by a sweep."""
        self._orphans.inc(_non_negative("gic_orphans_deleted_total", deleted))
        self._orphan_bytes.inc(_non_negative("gic_orphan_bytes_deleted_total", deleted_bytes))

    def observe_savepoint(self, state: str) -> None:
        """Count a finished savepoint (``completed`` or ``failed``)."""
        counter = self._savepoints.get(str(state))
        if counter is None:
            raise ConfigurationError(
                f"unknown savepoint state {state!r}; use one of {list(SAVEPOINT_STATES)}"
            )
        counter.inc()

    def observe_refused_request(self) -> None:
        """Count a control request the driver refused."""
        self._refused.inc()

    def set_restore_source_released(self, released: bool) -> None:
        self._released.set(1 if released else 0)

    def set_epoch(self, epoch: int) -> None:
        self._epoch.set(_non_negative("gic_epoch", epoch))

    def render(self) -> bytes:
        """The registry in the Prometheus text format."""
        return generate_latest(self.registry)

    def serve(self, port: int, addr: str | None = None) -> MetricsServer:
        """Serve ``/metrics`` over HTTP on ``port`` (0: any free port) in daemon threads:
        on ``addr`` (the pod's IP; None: every interface) and, when that is not a
        loopback address, on the loopback address too (:func:`listen_addresses`, the
        same port); close the returned handle to stop it."""
        started: list[tuple[WSGIServer, threading.Thread]] = []
        for address in listen_addresses(addr):
            chosen = started[0][0].server_port if started else port
            try:
                started.append(start_http_server(chosen, addr=address, registry=self.registry))
            except OSError as exc:
                MetricsServer(tuple(started)).close()
                raise ConfigurationError(
                    f"cannot serve metrics on {host_port(address, chosen)}: "
                    f"{exc.strerror or exc}. Another process listens there: set metrics_port "
                    "(GIC_METRICS_PORT) to a free port, 0 for any free port, or unset it to "
                    "turn metrics off; metrics_host (GIC_METRICS_HOST) binds one address "
                    "instead of every interface. (The GIC operator runs a GICJob's driver "
                    "with port 9090 on its pod's IP; there another process of the pod, such "
                    "as the job's own code, has taken that port: move that one.)"
                ) from exc
        return MetricsServer(tuple(started))
