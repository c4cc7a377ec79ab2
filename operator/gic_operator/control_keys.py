"""Each GICJob's control key: derived by the operator, kept in the job's Secret, given
to the job's driver only.

A driver honours a control request (savepoint, stop) only when it is authenticated with
its job's control key (:mod:`gic_runtime.control.auth`). The operator derives that key
from its own **operator key** and the GICJob's identity::

    key(job) = base64url(HMAC-SHA256(operator key,
                                     "gic job control key v1" | namespace | name | uid))

so it never stores or reads one back: it recomputes a job's key in memory whenever it
writes a request for the job (:meth:`ControlKeys.for_job`), and at each launch it
creates the job's ``<job>-gic-control`` Secret holding it (:func:`control_secret`,
immutable, owned by the GICJob), which the driver receives as ``GIC_CONTROL_KEY``
through ``valueFrom.secretKeyRef``. Executors and other jobs get no reference to it.
A GICJob recreated under the same name has another uid, hence another key.

The operator key comes from ``GIC_OPERATOR_CONTROL_KEY`` (the chart fills it from a
Secret it generates once and keeps across upgrades). Without it, the process uses a
random key of its own (:meth:`ControlKeys.process_default`, one per process, logged as
a warning at start-up): requests then verify only for jobs launched since the operator
started (a job launched before gets its Secret's old key, which the operator no longer
derives) -- fine for tests and ``make run``, not for a cluster.

Invariants: keys never appear in a ``repr``, a log line, a status or an Event; every
reconciler of the process derives from the same operator key.

Thread-safety: immutable values; :meth:`ControlKeys.process_default` is created once
under a lock.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

from gic_runtime.control.auth import MIN_KEY_CHARS, ControlKey
from gic_runtime.errors import ConfigurationError

#: The operator's variable holding its operator key.
ENV_CONTROL_KEY = "GIC_OPERATOR_CONTROL_KEY"
#: The key in a job's ``<job>-gic-control`` Secret that holds its control key.
CONTROL_SECRET_KEY = "key"
_DOMAIN = b"gic job control key v1"


@dataclass(frozen=True)
class ControlKeys:
    """Derives each GICJob's control key from the operator key (see the module
    docstring). ``configured``: whether the key came from the environment."""

    operator_key: bytes = field(repr=False)
    configured: bool = True
    _default: ClassVar[ControlKeys | None] = None
    _lock: ClassVar[threading.Lock] = threading.Lock()

    @classmethod
    def from_env(cls, environ: Mapping[str, str]) -> ControlKeys:
        """The keys ``GIC_OPERATOR_CONTROL_KEY`` configures, else
        :meth:`process_default`. Raises :class:`ConfigurationError` for a key shorter
        than the runtime accepts (the key itself is never quoted)."""
        text = environ.get(ENV_CONTROL_KEY, "").strip()
        if not text:
            return cls.process_default()
        if len(text) < MIN_KEY_CHARS:
            raise ConfigurationError(
                f"{ENV_CONTROL_KEY} has {len(text)} characters, fewer than {MIN_KEY_CHARS}: "
                "use a long random value (the chart generates one)"
            )
        return cls(text.encode("utf-8"))

    @classmethod
    def process_default(cls) -> ControlKeys:
        """This process's random operator key, the same for every caller."""
        with cls._lock:
            if cls._default is None:
                cls._default = cls(secrets.token_bytes(32), configured=False)
            return cls._default

    def for_job(self, namespace: str, name: str, uid: str) -> ControlKey:
        """The control key of GICJob ``namespace/name`` with ``uid``."""
        message = b"\0".join(part.encode("utf-8") for part in (namespace, name, uid))
        digest = hmac.new(self.operator_key, _DOMAIN + b"\0" + message, hashlib.sha256)
        return ControlKey(base64.urlsafe_b64encode(digest.digest()).rstrip(b"="))


def control_secret(metadata: Mapping[str, Any], key: ControlKey) -> dict[str, Any]:
    """The job's immutable ``<job>-gic-control`` Secret holding ``key`` under
    :data:`CONTROL_SECRET_KEY`; ``metadata`` is the job object's (name, labels, owner)."""
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": dict(metadata),
        "type": "Opaque",
        "immutable": True,
        "data": {CONTROL_SECRET_KEY: base64.b64encode(key.secret).decode("ascii")},
    }
