"""Authenticated control requests: who may ask a job's driver for a savepoint or a stop.

Anyone who can write to a job's storage can write a file into its control directory;
in a shared bucket (one key for every tenant) or on a shared volume that is every
other job. A request is therefore honoured only when it is *authenticated for that
job*: it carries ``mac``, the HMAC-SHA256 with the job's **control key** over
:func:`canonical_bytes` -- a domain tag, the job id and every field of the request but
``mac`` itself (request id, type, kind, format, target, creation time, requester). A
request copied from another job, or changed in any field, does not verify.

The key model:

* a job's control key is a text of at least :data:`MIN_KEY_CHARS` characters; the
  operator derives one per GICJob (namespace, name, uid) from its own key, keeps it in
  the job's ``<job>-gic-control`` Secret (key ``key``) and gives it to the driver only,
  as ``GIC_CONTROL_KEY`` through ``valueFrom.secretKeyRef``;
* the driver reads ``GIC_CONTROL_KEY`` (:meth:`ControlKey.from_env`); the ``gic`` CLI
  reads the same variable or ``--control-key-file``;
* a driver **with** a key honours only requests that verify (:class:`RequestGuard`); a
  driver without one (a local run, ``make run``, tests) accepts unauthenticated
  requests as before. Whatever the key, a savepoint target must lie inside the job's
  storage root and outside its ``jobs/`` directory.

Invariants: the key never appears in a ``repr``, a log line or a record; comparisons
use :func:`hmac.compare_digest`; a refusal names the request id (a validated id, the
file's name) and the reason, never the request's bytes.

Thread-safety: :class:`ControlKey` is immutable; a :class:`RequestGuard` belongs to one
driver and is used under its lock.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from gic_runtime import codec
from gic_runtime.control.model import ControlRequest, SavepointRequest
from gic_runtime.errors import ConfigurationError
from gic_runtime.layout import validate_id
from gic_runtime.storage.uri import StorageURI, join

CONTROL_KEY_ENV = "GIC_CONTROL_KEY"
"""The variable holding a job's control key (the driver's and the CLI's)."""
MIN_KEY_CHARS = 32
MAX_KEY_CHARS = 4096
MAC_FIELD = "mac"
_DOMAIN = b"gic control request v2\n"
MAX_REQUEST_AGE_S = 24 * 3600.0
"""A keyed driver refuses an authenticated request created longer ago than this (a
request copied back after its outcome was removed is not served again a day later)."""
MAX_CLOCK_SKEW_S = 300.0
"""... or created further than this in its future."""


@dataclass(frozen=True, slots=True)
class ControlKey:
    """A job's control key (never shown by ``repr``)."""

    secret: bytes = field(repr=False)

    @classmethod
    def from_text(cls, text: str, *, source: str = CONTROL_KEY_ENV) -> ControlKey:
        """The key ``text`` (surrounding whitespace dropped); ``source`` names where it
        came from in the error raised when it is too short or too long (the key itself
        is never quoted)."""
        value = text.strip()
        if not MIN_KEY_CHARS <= len(value) <= MAX_KEY_CHARS:
            raise ConfigurationError(
                f"the control key in {source} has {len(value)} characters; it needs "
                f"{MIN_KEY_CHARS} to {MAX_KEY_CHARS}: use the job's key (the operator keeps "
                "it in the job's <job>-gic-control Secret, key 'key')"
            )
        return cls(value.encode("utf-8"))

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> ControlKey | None:
        """The key in ``GIC_CONTROL_KEY`` (``None`` when unset or empty)."""
        text = (os.environ if environ is None else environ).get(CONTROL_KEY_ENV, "")
        return cls.from_text(text) if text.strip() else None

    @classmethod
    def from_file(cls, path: str) -> ControlKey:
        """The key stored in file ``path`` (e.g. a mounted Secret)."""
        try:
            with open(path, encoding="utf-8") as f:
                text = f.read(MAX_KEY_CHARS + 2)
        except (OSError, UnicodeDecodeError) as exc:
            raise ConfigurationError(
                f"cannot read the control key file {path}: {exc.__class__.__name__}; "
                "give a readable file holding the job's control key"
            ) from None
        return cls.from_text(text, source=path)

    def mac(self, job_id: str, request: ControlRequest) -> str:
        """The hex HMAC-SHA256 of ``request`` for job ``job_id``."""
        return hmac.new(self.secret, canonical_bytes(job_id, request), hashlib.sha256).hexdigest()

    def verifies(self, job_id: str, request: ControlRequest) -> bool:
        """Whether ``request`` carries this key's MAC for job ``job_id``."""
        given = request.mac
        if not given:
            return False
        expected = self.mac(job_id, request).encode("ascii")
        return hmac.compare_digest(given.encode("ascii", "replace"), expected)


def canonical_bytes(job_id: str, request: ControlRequest) -> bytes:
    """What a request's MAC covers: the domain tag, the job id, then the request's
    fields but ``mac`` as compact JSON with sorted keys and ASCII escapes (the same
    bytes for a request as written and as read back)."""
    body = {k: v for k, v in codec.to_json(request).items() if k != MAC_FIELD}
    text = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return _DOMAIN + validate_id("job id", job_id).encode("ascii") + b"\n" + text.encode("ascii")


def _normalized(uri: str) -> str | None:
    try:
        parsed = StorageURI.parse(uri.strip())
    except ConfigurationError:
        return None
    text = str(parsed).rstrip("/")
    if any(part in (".", "..") for part in text.split("://", 1)[-1].split("/")):
        return None
    return text


def _inside(uri: str, directory: str) -> bool:
    return uri.startswith(directory.rstrip("/") + "/")


class RequestGuard:
    """What a driver honours (see the module docstring): :meth:`refusal` says why a
    request is refused (``None``: honour it); :meth:`honoured` records a served id, so
    the same id is never served twice by this driver."""

    def __init__(
        self,
        root: str,
        job_id: str,
        key: ControlKey | None,
        *,
        wall: Callable[[], float],
        max_age_s: float = MAX_REQUEST_AGE_S,
    ) -> None:
        self.job_id = validate_id("job id", job_id)
        self.root = _normalized(root) or root.rstrip("/")
        self.key = key
        self._wall = wall
        self._max_age_s = max_age_s
        self._honoured: set[str] = set()

    def refusal(self, request: ControlRequest) -> str | None:
        """Why ``request`` is not honoured, or ``None`` (see the class docstring)."""
        rid = request.request_id
        if rid in self._honoured:
            return f"request id {rid} was already honoured by this driver (a replay)"
        if self.key is not None:
            if not self.key.verifies(self.job_id, request):
                return (
                    f"the request is not authenticated for job {self.job_id} (no valid MAC "
                    "with the job's control key): only the operator and holders of the "
                    f"job's key ({CONTROL_KEY_ENV}) may send requests"
                )
            age = self._wall() - request.requested_at
            if age > self._max_age_s:
                return (
                    f"the request was created {age:.0f} s ago, more than the "
                    f"{self._max_age_s:.0f} s a request stays valid; send a new one"
                )
            if age < -MAX_CLOCK_SKEW_S:
                return "the request's creation time is in the future; check the requester's clock"
        if isinstance(request, SavepointRequest):
            where = _normalized(request.target)
            jobs = join(self.root, "jobs")
            if (
                where is None
                or not _inside(where, self.root)
                or where == jobs
                or _inside(where, jobs)
            ):
                return (
                    f"the savepoint target is outside job {self.job_id}'s storage "
                    f"({self.root}, not under its jobs/ directory); choose a target there, "
                    f"e.g. {self.root}/savepoints/<name>"
                )
        return None

    def honoured(self, request_id: str) -> None:
        self._honoured.add(request_id)
