"""What one reconcile of a Savepoint observes: its spec, its GICJob, the job's storage and
the outcome of its control request.

:class:`SavepointObserver` reads; :class:`SavepointView` is what it read, frozen, with no
decision in it (the reconciler, :mod:`gic_operator.savepoints.savepoint_reconciler`,
decides from it).

Trust: the request id and the directory are derived from the Savepoint's name and uid
and its job (:class:`SavepointRequest`), never read back from the status or the
outcome; the job's storage is opened only once the allowlist admits it (else
:class:`~gic_operator.operator_errors.StorageNotAllowedError`, nothing read or written).

Thread-safety: used by one reconcile at a time (the savepoint's lock).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from pydantic import ValidationError

from gic_operator.kube.bodies import Body
from gic_operator.kube.kube_api import KubeApi
from gic_operator.kube.naming import job_id, savepoint_dir, savepoint_request_id
from gic_operator.models import GICJobSpec, GICJobStatus, SavepointSpec, SavepointState
from gic_operator.operator_errors import StorageNotAllowedError
from gic_operator.operator_settings import StorageAllowlist
from gic_operator.reconcile.status_pass import SavepointPass
from gic_operator.storage.job_storage import JobStorage, StorageFactory
from gic_operator.storage.storage_access import admit
from gic_operator.validation import describe_validation_error
from gic_runtime.control.model import Outcome
from gic_runtime.errors import FormatError

#: The plural of the Savepoint's job.
JOBS = "gicjobs"


@dataclass(frozen=True)
class SavepointRequest:
    """The control request of one Savepoint: its job's storage, its id and its derived
    directory."""

    storage: JobStorage
    rid: str
    target: str


@dataclass(frozen=True)
class SavepointView:
    """What one pass observed of a Savepoint. The first of ``spec_error``,
    ``job_missing``, ``job_invalid`` that is set ends what was read; otherwise the job,
    its status and the request are there (and, for an ``InProgress`` Savepoint, the
    outcome or why it is unreadable)."""

    spec: SavepointSpec | None = None
    #: The Savepoint's spec does not validate (described).
    spec_error: str | None = None
    #: The GICJob is missing or being deleted.
    job_missing: bool = False
    #: The GICJob's spec does not validate: how many errors.
    job_invalid: int | None = None
    job: Body | None = None
    job_spec: GICJobSpec | None = None
    job_status: GICJobStatus | None = None
    request: SavepointRequest | None = None
    outcome: Outcome | None = None
    #: The outcome exists but cannot be read (outcomes are write-once: it stays so).
    outcome_unreadable: str | None = None


class SavepointObserver:
    """Reads a Savepoint's job and storage into a :class:`SavepointView`."""

    def __init__(
        self, kube: KubeApi, storage_for: StorageFactory, allowlist: StorageAllowlist
    ) -> None:
        self.kube = kube
        self.storage_for = storage_for
        self.allowlist = allowlist

    def observe(self, p: SavepointPass, state: SavepointState) -> SavepointView:
        try:
            spec = SavepointSpec.model_validate(p.resource.spec)
        except ValidationError as exc:
            return SavepointView(spec_error=describe_validation_error(exc, "spec"))
        raw = self.kube.get_object(JOBS, p.namespace, spec.job)
        if raw is None or Body(raw).deleting:
            return SavepointView(spec=spec, job_missing=True)
        job = Body(raw)
        try:
            job_spec = GICJobSpec.model_validate(job.spec)
        except ValidationError as exc:
            return SavepointView(spec=spec, job=job, job_invalid=exc.error_count())
        storage = self._storage(p, spec.job, job, job_spec)
        rid = savepoint_request_id(p.name, p.uid)
        request = SavepointRequest(
            storage, rid, savepoint_dir(storage.root, p.namespace, spec.job, rid)
        )
        view = SavepointView(
            spec=spec,
            job=job,
            job_spec=job_spec,
            job_status=GICJobStatus.read(job.status),
            request=request,
        )
        if state is SavepointState.TRIGGER_PENDING:
            return view
        try:
            outcome = storage.outcome(rid)
        except FormatError as exc:
            return replace(view, outcome_unreadable=str(exc))
        return replace(view, outcome=outcome)

    def _storage(self, p: SavepointPass, job: str, body: Body, spec: GICJobSpec) -> JobStorage:
        """The storage of the Savepoint's job, once the allowlist admits it."""
        cp = spec.checkpointing
        endpoint = cp.s3_endpoint_url
        if not self.allowlist.storage_allowed(p.namespace, cp.storage) or (
            endpoint and not self.allowlist.endpoint_allowed(p.namespace, endpoint)
        ):
            raise StorageNotAllowedError(
                f"GICJob {job} names storage or an S3 endpoint the operator may not use in "
                f"namespace {p.namespace} (see the GICJob's status); nothing was read or written"
            )
        lineage = GICJobStatus.read(body.status).lineage
        opened = self.storage_for(spec, job_id(p.namespace, job, lineage))
        return admit(self.allowlist, p.namespace, opened, endpoint)
