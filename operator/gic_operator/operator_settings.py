"""Process-wide settings of the operator: its command line and the storage allowlist.

The allowlist says which checkpoint storage and which S3 endpoints a GICJob may name
(``spec.checkpointing.storage``, ``spec.restore.path``, ``spec.checkpointing.s3EndpointUrl``):
the operator reads, writes and deletes there with its **own** credentials, so only an
administrator decides where. It comes from two environment variables, each a
comma-separated list of entries:

* ``GIC_ALLOWED_STORAGE``: storage root prefixes, ``s3://bucket[/prefix]`` or
  ``file:///path``; a storage URI is allowed when it equals an entry or lies below it
  (at a ``/`` boundary);
* ``GIC_ALLOWED_S3_ENDPOINTS``: S3 endpoint URLs (``http[s]://host[:port][/path]``),
  compared exactly (scheme and host in lower case, no trailing ``/``).

An entry ``NAMESPACE=VALUE`` applies to that namespace only, a bare ``VALUE`` to every
namespace; ``*`` (or ``NAMESPACE=*``) allows anything, and only an explicit ``*`` does.
Whatever the lists do not name is refused (a job naming no endpoint uses the operator's
own and needs no entry); with neither variable set **nothing** is allowed: every GICJob
is ``Invalid`` (``StorageNotAllowed``) until an administrator names a root, and the
operator logs a warning at start-up saying how. Every storage access of the operator
goes through :mod:`gic_operator.storage.storage_access`, which applies this list.

Values are immutable (frozen dataclasses), so handlers may share one instance across
threads.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from gic_operator.control_keys import ControlKeys
from gic_runtime.checkpoint.manifest_limits import OPERATOR_LIMITS, ManifestLimits
from gic_runtime.errors import ConfigurationError
from gic_runtime.storage.uri import StorageURI

ENV_ALLOWED_STORAGE = "GIC_ALLOWED_STORAGE"
ENV_ALLOWED_S3_ENDPOINTS = "GIC_ALLOWED_S3_ENDPOINTS"
ANY = "*"

_NAMESPACE_ENTRY = re.compile(r"^([a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?)=(.*)$")


@dataclass(frozen=True)
class AllowEntry:
    """One allowlist entry: ``value`` (normalized, or ``*``) for ``namespace`` (``None``:
    every namespace)."""

    namespace: str | None
    value: str


def _dot_segments(path: str) -> bool:
    return any(part in (".", "..") for part in path.split("/"))


def normalize_storage(uri: str) -> StorageURI:
    """``uri`` parsed as a storage root; refuses what could escape a prefix check
    (``.``/``..`` segments, a relative path)."""
    text = uri.strip()
    if "://" not in text:
        raise ConfigurationError(f"{uri!r} is not a storage URI (s3://bucket/prefix, file:///path)")
    parsed = StorageURI.parse(text)
    if _dot_segments(parsed.path):
        raise ConfigurationError(f"{uri!r} has '.' or '..' path segments")
    path = parsed.path.rstrip("/") if parsed.scheme == "s3" else (parsed.path.rstrip("/") or "/")
    return StorageURI(parsed.scheme, parsed.bucket, path)


def normalize_endpoint(url: str) -> str:
    """``url`` as an S3 endpoint: ``http[s]://host[:port][/path]``, scheme and host in
    lower case, no trailing ``/``; anything else (credentials, a query) is refused."""
    try:
        parts = urlsplit(url.strip())
        port = parts.port
    except ValueError as exc:
        raise ConfigurationError(f"{url!r} is not an endpoint URL: {exc}") from None
    if parts.scheme.lower() not in ("http", "https") or not parts.hostname:
        raise ConfigurationError(f"{url!r} is not an http(s) endpoint URL")
    if parts.username or parts.password or parts.query or parts.fragment:
        raise ConfigurationError(f"{url!r} must not carry credentials, a query or a fragment")
    host = parts.hostname.lower()
    if ":" in host:
        host = f"[{host}]"
    netloc = host if port is None else f"{host}:{port}"
    return f"{parts.scheme.lower()}://{netloc}{parts.path.rstrip('/')}"


def _storage_below(uri: StorageURI, prefix: StorageURI) -> bool:
    if (uri.scheme, uri.bucket) != (prefix.scheme, prefix.bucket):
        return False
    base = prefix.path.rstrip("/")
    return not base or uri.path == base or uri.path.startswith(base + "/")


def _parse_entries(variable: str, text: str, kind: str) -> tuple[AllowEntry, ...]:
    entries = []
    for raw in text.split(","):
        item = raw.strip()
        if not item:
            continue
        match = _NAMESPACE_ENTRY.match(item)
        namespace, value = (match.group(1), match.group(3).strip()) if match else (None, item)
        try:
            if value != ANY and kind == "storage":
                value = str(normalize_storage(value))
            elif value != ANY:
                value = normalize_endpoint(value)
        except ConfigurationError as exc:
            raise ConfigurationError(f"{variable}: entry {item!r}: {exc}") from None
        entries.append(AllowEntry(namespace, value))
    return tuple(entries)


@dataclass(frozen=True)
class StorageAllowlist:
    """Where GICJobs may keep checkpoints and which S3 endpoints they may name (module
    docstring). The default allows nothing; ``None`` for both (:meth:`unrestricted`)
    allows everything, which only tests and an explicit ``*`` entry ask for."""

    storage: tuple[AllowEntry, ...] | None = ()
    endpoints: tuple[AllowEntry, ...] | None = ()

    @classmethod
    def from_env(cls, environ: Mapping[str, str]) -> StorageAllowlist:
        """The allowlist the environment configures (nothing set: nothing allowed);
        raises :class:`~gic_runtime.errors.ConfigurationError` naming a malformed entry."""
        storage = environ.get(ENV_ALLOWED_STORAGE, "").strip()
        endpoints = environ.get(ENV_ALLOWED_S3_ENDPOINTS, "").strip()
        return cls(
            storage=_parse_entries(ENV_ALLOWED_STORAGE, storage, "storage"),
            endpoints=_parse_entries(ENV_ALLOWED_S3_ENDPOINTS, endpoints, "endpoint"),
        )

    @classmethod
    def unrestricted(cls) -> StorageAllowlist:
        """An allowlist that allows any storage and endpoint (in-process tests)."""
        return cls(storage=None, endpoints=None)

    @property
    def configured(self) -> bool:
        """Whether any storage root is allowed at all (else every GICJob is refused)."""
        return self.storage is None or bool(self.storage)

    @staticmethod
    def _for(entries: tuple[AllowEntry, ...] | None, namespace: str) -> list[str] | None:
        if entries is None:
            return None
        values = [e.value for e in entries if e.namespace in (None, namespace)]
        return None if ANY in values else values

    def storage_choices(self, namespace: str) -> list[str] | None:
        """Storage prefixes allowed in ``namespace`` (``None``: any)."""
        return self._for(self.storage, namespace)

    def endpoint_choices(self, namespace: str) -> list[str] | None:
        """S3 endpoints allowed in ``namespace`` (``None``: any)."""
        return self._for(self.endpoints, namespace)

    def storage_allowed(self, namespace: str, uri: str) -> bool:
        """Whether a job in ``namespace`` may use storage (or restore source) ``uri``."""
        choices = self.storage_choices(namespace)
        if choices is None:
            return True
        try:
            target = normalize_storage(uri)
        except ConfigurationError:
            return False
        return any(_storage_below(target, StorageURI.parse(prefix)) for prefix in choices)

    def endpoint_allowed(self, namespace: str, url: str) -> bool:
        """Whether a job in ``namespace`` may name S3 endpoint ``url``."""
        choices = self.endpoint_choices(namespace)
        if choices is None:
            return True
        try:
            return normalize_endpoint(url) in choices
        except ConfigurationError:
            return False


@dataclass(frozen=True)
class OperatorSettings:
    """How the operator runs: the period of its reconcile timers, its kopf peering
    (``None``: standalone), which namespaces it watches, the storage allowlist,
    whether it warns GICJobs outside its namespaces (:mod:`gic_operator.jobs.unwatched`),
    and how much of a manifest a driver wrote it decodes (``manifest_limits``, far below
    what a driver may write: :mod:`gic_runtime.checkpoint.manifest_limits`)."""

    reconcile_interval_s: float = 5.0
    peering: str | None = "gic-operator"
    namespaces: tuple[str, ...] = ()
    all_namespaces: bool = False
    allowlist: StorageAllowlist = field(default_factory=StorageAllowlist)
    warn_unwatched: bool = False
    #: Derives each job's control key (``GIC_OPERATOR_CONTROL_KEY``).
    control_keys: ControlKeys = field(default_factory=ControlKeys.process_default)
    manifest_limits: ManifestLimits = OPERATOR_LIMITS
