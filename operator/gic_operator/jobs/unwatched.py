"""Warnings on GICJobs the operator does not handle: those outside its watched namespaces.

The reconcilers see only the namespaces the operator watches, so a GICJob elsewhere gets
no driver, no status and no Event from them: it just sits there. With
``--warn-unwatched`` (the Helm chart's ``warnUnwatchedJobs``) a namespaced operator lists
GICJobs in every namespace every ``interval_s`` seconds and posts a Warning Event
:data:`NOT_WATCHED` on each one outside its watched namespaces, naming the namespaces it
watches and how to add this one. That takes a cluster-wide ``list`` of GICJobs and
``create``/``patch`` of Events (:data:`gic_operator.kube.permissions.UNWATCHED_CALLS`), which
the chart grants only when the value is on.

Invariants: a GICJob is never written, only given an Event; a job in a watched namespace
never gets one; repeats of the same Event within ten minutes raise its count
(:mod:`gic_operator.kube.kube_events`) instead of adding Events; a failed scan is logged and the
next one tries again. Every replica scans (peering pauses kopf's handlers, not this), so
with two replicas a job may show two such Events.

Thread-safety: :func:`report_unwatched` is as thread-safe as the ``KubeApi`` given;
:class:`UnwatchedJobsReporter` runs it on a daemon thread of its own, started and stopped
from one controlling thread.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable
from typing import Any

from gic_operator.kube.bodies import Body
from gic_operator.kube.kube_api import KubeApi
from gic_operator.operator_errors import KubeError

_log = logging.getLogger(__name__)

#: Reason of the Warning Event on a GICJob outside the watched namespaces.
NOT_WATCHED = "NotWatched"
#: Seconds between scans.
DEFAULT_INTERVAL_S = 60.0


def not_watched_message(namespace: str, watched: Iterable[str]) -> str:
    """What the Event says to a job in ``namespace`` (not one of ``watched``)."""
    names = sorted(set(watched))
    wanted = ",".join([*names, namespace])
    return (
        f"namespace {namespace} is not watched by the GIC operator (it watches "
        f"{', '.join(names)}), so this GICJob is not run. Add the namespace to the Helm "
        f"chart's watchNamespaces: helm upgrade RELEASE charts/gic-operator -n "
        f"RELEASE_NAMESPACE --reuse-values --set 'watchNamespaces={{{wanted}}}'; or create "
        "the job in a watched namespace"
    )


def unwatched_jobs(kube: KubeApi, watched: Iterable[str]) -> list[dict[str, Any]]:
    """Every GICJob outside ``watched``, not being deleted, by namespace and name."""
    inside = set(watched)
    found = [
        job
        for job in kube.list_objects_everywhere("gicjobs")
        if Body(job).namespace not in inside and not Body(job).deleting
    ]
    return sorted(found, key=lambda j: (Body(j).namespace, Body(j).name))


def report_unwatched(kube: KubeApi, watched: Iterable[str]) -> list[tuple[str, str]]:
    """Post :data:`NOT_WATCHED` on every GICJob outside ``watched``; their
    ``(namespace, name)``. KubeError when GICJobs cannot be listed."""
    names = tuple(watched)
    reported = []
    for job in unwatched_jobs(kube, names):
        namespace, name = Body(job).namespace, Body(job).name
        kube.event(job, "Warning", NOT_WATCHED, not_watched_message(namespace, names))
        reported.append((namespace, name))
    return reported


class UnwatchedJobsReporter:
    """Runs :func:`report_unwatched` every ``interval_s`` seconds on a daemon thread,
    first right after :meth:`start`."""

    def __init__(self, watched: Iterable[str], interval_s: float = DEFAULT_INTERVAL_S) -> None:
        self.watched = tuple(watched)
        self.interval_s = interval_s
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._warned: set[tuple[str, str]] = set()

    def start(self, kube: KubeApi) -> None:
        """Start scanning with ``kube`` (idempotent)."""
        if self._thread is not None:
            return
        self._stop.clear()
        self._thread = threading.Thread(
            target=self._loop, args=(kube,), name="gic-unwatched-jobs", daemon=True
        )
        self._thread.start()

    def stop(self) -> None:
        """Stop scanning and wait for the thread (idempotent)."""
        self._stop.set()
        thread, self._thread = self._thread, None
        if thread is not None:
            thread.join(timeout=30)

    def _loop(self, kube: KubeApi) -> None:
        while True:
            try:
                reported = set(report_unwatched(kube, self.watched))
            except KubeError as exc:
                _log.warning("could not look for GICJobs outside the watched namespaces: %s", exc)
            else:
                for namespace, name in sorted(reported - self._warned):
                    _log.warning(
                        "GICJob %s/%s is in a namespace this operator does not watch",
                        namespace,
                        name,
                    )
                self._warned = reported
            if self._stop.wait(self.interval_s):
                return
