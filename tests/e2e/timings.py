"""Operator latencies measured the way a user sees them, on any :class:`Cluster`.

* :func:`measure_savepoint`: ``kubectl annotate gicjob/NAME gic.io/savepoint=<nonce>``
  until the Savepoint ``<name>-sp-<nonce>`` is ``Completed`` (operator reaction, control
  request, the driver's next batch boundary, the copy, the status update);
* :func:`measure_recovery`: the driver killed until a new driver pod is ``Running`` in
  the GICJob's status, and until that driver completed a checkpoint beyond the newest one
  in storage right after the kill (the job is back to doing work).

Both return the numbers (and the end state) so a benchmark can reuse them; the e2e
tests print them. Clocks: ``time.monotonic`` in the test process, so the numbers include
kubectl's own latency (a few tens of milliseconds per poll).

Thread-safety: functions of the test thread.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Protocol

from gic_runtime.checkpoint.catalog import list_checkpoints
from gic_runtime.storage.uri import StoreResolver


class _Defaults(Protocol):
    @property
    def storage(self) -> str: ...


class _Cluster(Protocol):
    @property
    def storage(self) -> StoreResolver: ...

    @property
    def defaults(self) -> _Defaults: ...

    def kubectl(self, *args: str, stdin: str | None = None, timeout: float = 60.0) -> str: ...

    def get(self, resource: str, name: str) -> dict[str, Any] | None: ...

    def status(self, resource: str, name: str) -> dict[str, Any]: ...

    def wait(self, resource: str, condition: str, timeout: float = 60.0) -> None: ...

    def wait_until(self, condition: Any, timeout: float = 60.0, what: str = "") -> Any: ...

    def kill_driver(self, pod: str) -> None: ...


@dataclass(frozen=True)
class SavepointTiming:
    """Seconds from the annotation to ``Completed``, and the Savepoint's final status."""

    name: str
    seconds: float
    status: dict[str, Any]


@dataclass(frozen=True)
class RecoveryTiming:
    """Seconds from the kill to a new driver ``Running`` (``running_s``) and to its first
    checkpoint beyond the last one before the kill (``checkpoint_s``); the pods."""

    old_pod: str
    new_pod: str
    running_s: float
    checkpoint_s: float
    last_checkpoint_before: int


def savepoint_name(job: str, nonce: str) -> str:
    """The Savepoint the operator makes for annotation ``gic.io/savepoint=<nonce>``
    (for nonces that are already DNS-safe)."""
    return f"{job}-sp-{nonce}"


def measure_savepoint(
    cluster: _Cluster, job: str, nonce: str, timeout: float = 120.0
) -> SavepointTiming:
    """Annotate ``job`` with ``nonce`` and wait for its Savepoint to complete."""
    name = savepoint_name(job, nonce)
    started = time.monotonic()
    cluster.kubectl("annotate", "--overwrite", f"gicjob/{job}", f"gic.io/savepoint={nonce}")
    cluster.wait(f"savepoint/{name}", "jsonpath={.status.state}=Completed", timeout)
    seconds = time.monotonic() - started
    return SavepointTiming(name, seconds, cluster.status("savepoint", name))


def _checkpoint_id(status: dict[str, Any]) -> int:
    return int((status.get("lastCheckpoint") or {}).get("id", -1))


def newest_checkpoint(cluster: _Cluster, job_id: str) -> int:
    """Id of the newest checkpoint manifest of ``job_id`` in storage (-1: none)."""
    refs = list_checkpoints(cluster.storage, cluster.defaults.storage, job_id)
    return refs[-1].checkpoint_id if refs else -1


def measure_recovery(cluster: _Cluster, job: str, timeout: float = 180.0) -> RecoveryTiming:
    """Kill ``job``'s driver and wait until a new one runs and checkpoints."""
    before = cluster.status("gicjob", job)
    old_pod = str(before["driverPod"])
    started = time.monotonic()
    cluster.kill_driver(old_pod)
    last_id = newest_checkpoint(cluster, str(before["jobId"]))

    def new_driver_running() -> str | None:
        status = cluster.status("gicjob", job)
        pod = status.get("driverPod")
        running = status.get("phase") == "Running" and pod not in (None, old_pod)
        return str(pod) if running else None

    new_pod = cluster.wait_until(new_driver_running, timeout, f"a new driver of {job} Running")
    running_s = time.monotonic() - started
    cluster.wait_until(
        lambda: _checkpoint_id(cluster.status("gicjob", job)) > last_id,
        timeout,
        f"a checkpoint of {job} after {last_id}",
    )
    checkpoint_s = time.monotonic() - started
    return RecoveryTiming(old_pod, str(new_pod), running_s, checkpoint_s, last_id)
