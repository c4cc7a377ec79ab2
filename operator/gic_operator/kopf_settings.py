"""How the operator configures kopf: what it logs, posts and stores on resources.

* **Logs.** kopf logs every successful handler call at INFO (``Timer 'gicjob-timer'
  succeeded.``, ``Handler 'savepoint-event' succeeded.``) through the ``kopf.objects``
  logger. Timers tick every second per resource, so at INFO that is a line per job per
  second, burying the operator's own messages. :func:`quiet_kopf_logs` raises that
  logger to WARNING unless the operator logs at DEBUG: kopf's warnings and errors (a
  handler that failed, a retry) still show, as do the operator's own INFO lines.
* **Events.** Only warnings and errors of kopf become Kubernetes Events
  (``settings.posting.level``); the operator posts its own Events
  (:mod:`gic_operator.kube.kube_events`).
* **Diff base.** kopf keeps the last handled spec of every resource that has
  create/update/delete handlers, by default in the annotation
  ``kopf.zalando.org/last-handled-configuration`` (a JSON copy of the spec, which
  ``kubectl describe gsp`` prints). The operator's handlers never look at diffs: they
  reconcile from the whole resource, and Savepoints' only such handler is on deletion,
  which kopf detects from the deletion timestamp. :class:`NoDiffBaseStorage` stores
  nothing, and removes the annotation an earlier configuration left on a resource the
  next time kopf handles it.

Thread-safety: the functions run once at start-up; the storage is stateless.
"""

from __future__ import annotations

import logging
from typing import Final

import kopf

#: kopf's logger of per-resource messages (handler outcomes, retries).
KOPF_OBJECTS_LOGGER: Final = "kopf.objects"
#: The annotation kopf's default diff-base storage writes.
LEGACY_DIFFBASE_ANNOTATION: Final = "kopf.zalando.org/last-handled-configuration"


class NoDiffBaseStorage(kopf.DiffBaseStorage):
    """A diff-base storage that keeps nothing (see the module docstring)."""

    def fetch(self, *, body: kopf.Body) -> kopf.BodyEssence | None:
        return None

    def store(self, *, body: kopf.Body, patch: kopf.Patch, essence: kopf.BodyEssence) -> None:
        if LEGACY_DIFFBASE_ANNOTATION in body.metadata.annotations:
            patch.metadata.annotations[LEGACY_DIFFBASE_ANNOTATION] = None


def apply_kopf_settings(
    settings: kopf.OperatorSettings, *, peering: str | None, finalizer: str
) -> None:
    """The operator's kopf settings (a startup handler calls this)."""
    if peering is not None:
        settings.peering.name = peering
    settings.posting.level = logging.WARNING
    settings.persistence.finalizer = finalizer
    settings.persistence.diffbase_storage = NoDiffBaseStorage()
    settings.watching.server_timeout = 60
    settings.networking.request_timeout = 30


def quiet_kopf_logs(level: str) -> None:
    """Keep kopf's per-handler INFO lines out of a log at ``level`` (DEBUG keeps them)."""
    objects = logging.getLogger(KOPF_OBJECTS_LOGGER)
    objects.setLevel(logging.NOTSET if level == "DEBUG" else logging.WARNING)
