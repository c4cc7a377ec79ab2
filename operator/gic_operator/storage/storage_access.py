"""The one place where the operator's storage credentials meet a location.

The operator reads, writes and deletes checkpoint storage with its **own** credentials
(:meth:`gic_runtime.storage.S3Settings.from_env`). Every storage it opens for a job or a
Savepoint -- reconcile, recovery sweep, restore-source release, savepoint observation,
disposal and retention (which disposes through the same path) -- is opened here, by
:func:`open_storage` or :func:`admit`, never with :meth:`JobStorage.open
<gic_operator.storage.job_storage.JobStorage.open>` directly. Invariants:

* **Endpoint first.** An S3 endpoint the allowlist refuses for the namespace raises
  :class:`~gic_operator.operator_errors.StorageNotAllowedError` before a client for it
  exists, so no request signed with the operator's key ever reaches it (a job naming no
  endpoint uses the operator's own, which needs no entry).
* **Every object access is checked.** The storage's resolver is a
  :class:`GuardedResolver`: every URI any code resolves through it (the runtime's
  manifest, status, epoch and sweep functions included) must lie under a storage root
  the allowlist admits for the namespace, else
  :class:`~gic_operator.operator_errors.StorageNotAllowedError` is raised and no store
  is touched. So a location read from a file a tenant wrote (a manifest's restore
  source, a savepoint's recorded path) cannot take the operator's credentials anywhere
  the administrator did not allow, even where a caller forgot to compare it.

Thread-safety: the functions are pure; :class:`GuardedResolver` is as thread-safe as
the resolver it wraps (immutable besides).
"""

from __future__ import annotations

from gic_operator.operator_errors import StorageNotAllowedError
from gic_operator.operator_settings import StorageAllowlist
from gic_operator.storage.job_storage import JobStorage
from gic_runtime.storage.object_store import ObjectStore
from gic_runtime.storage.uri import StoreResolver

__all__ = ["GuardedResolver", "admit", "open_storage"]


class GuardedResolver(StoreResolver):
    """A resolver that resolves only URIs the allowlist admits in ``namespace``
    (module docstring); everything else is delegated to ``inner``."""

    def __init__(self, inner: StoreResolver, allowlist: StorageAllowlist, namespace: str) -> None:
        super().__init__(None)
        self.inner = inner
        self.allowlist = allowlist
        self.namespace = namespace

    def register(self, store: ObjectStore) -> None:
        """Registering is checked like resolving: only a store at an allowed root."""
        self.check(store.root_uri)
        self.inner.register(store)

    def resolve(self, uri: str) -> tuple[ObjectStore, str]:
        """The store holding ``uri`` and its key; raises
        :class:`~gic_operator.operator_errors.StorageNotAllowedError` (nothing touched)
        when ``uri`` lies outside every root allowed in the namespace."""
        self.check(uri)
        return self.inner.resolve(uri)

    def check(self, uri: str) -> None:
        """Raise :class:`~gic_operator.operator_errors.StorageNotAllowedError` unless
        ``uri`` lies under a storage root allowed in the namespace."""
        if not self.allowlist.storage_allowed(self.namespace, uri):
            raise StorageNotAllowedError(
                f"the operator does not use its credentials on {uri}: it is not under a "
                f"storage root allowed in namespace {self.namespace} "
                f"({_choices(self.allowlist, self.namespace)}); an administrator adds "
                "roots with GIC_ALLOWED_STORAGE (Helm value storageAllowlist.storage)"
            )


def _choices(allowlist: StorageAllowlist, namespace: str) -> str:
    roots = allowlist.storage_choices(namespace)
    if roots is None:
        return "any"
    return "allowed: " + (", ".join(roots) if roots else "none")


def _check_endpoint(allowlist: StorageAllowlist, namespace: str, endpoint: str | None) -> None:
    if endpoint and not allowlist.endpoint_allowed(namespace, endpoint):
        allowed = allowlist.endpoint_choices(namespace)
        listed = "any" if allowed is None else (", ".join(allowed) or "none")
        raise StorageNotAllowedError(
            f"the operator does not send requests to S3 endpoint {endpoint}: it is not "
            f"allowed in namespace {namespace} (allowed: {listed}); an administrator adds "
            "endpoints with GIC_ALLOWED_S3_ENDPOINTS (Helm value storageAllowlist.s3Endpoints)"
        )


def admit(
    allowlist: StorageAllowlist, namespace: str, storage: JobStorage, endpoint: str | None
) -> JobStorage:
    """``storage`` (reached through ``endpoint``, ``None``: the operator's own) with
    every access checked against the allowlist for ``namespace``; raises
    :class:`~gic_operator.operator_errors.StorageNotAllowedError` when the endpoint or
    the storage's root is refused. ``storage`` must not have been used yet."""
    _check_endpoint(allowlist, namespace, endpoint)
    guarded = GuardedResolver(storage.resolver, allowlist, namespace)
    guarded.check(storage.root)
    return JobStorage(guarded, storage.root, storage.job_id, limits=storage.limits)


def open_storage(
    allowlist: StorageAllowlist, namespace: str, root: str, job_id: str, endpoint: str | None
) -> JobStorage:
    """The storage of ``job_id`` under ``root`` through ``endpoint``, admitted as by
    :func:`admit`; the endpoint is checked before any client for it is made."""
    _check_endpoint(allowlist, namespace, endpoint)
    storage = JobStorage.open(root, job_id, endpoint_url=endpoint)
    return admit(allowlist, namespace, storage, endpoint)
