"""The ``GICJob`` custom resource (``gic.io/v1alpha1``, short name ``gj``).

A GICJob is one stateful PySpark streaming job whose state is checkpointed by GIC. The spec
says what to run (``application``), whether it should run (``state``), where its
checkpoints live (``checkpointing``), where it starts from (``restore``), how a spec change
is rolled out (``upgradeMode``), its savepoint policy and its restart policy. The status
(:mod:`gic_operator.models.gicjob_status`) is written only by the operator.

The checkpoint tuning fields (``checkpointing.buckets``, ``retainedCheckpoints``,
``materializationIntervalSeconds``, ``changelog.*``) default to the runtime's own defaults
(:class:`gic_runtime.config.GICSettings`, read here, never restated): the CRD states them
as its defaults, so the API server stores them with each new job and a later runtime
with other defaults never changes the settings of an existing job (its bucket count
above all). The CRD's bounds are the operator's and may be tighter than the runtime's.

Invariants checked at validation (an invalid spec gets a ``Ready=False`` condition with the
message and nothing is launched):

* ``restore`` names exactly one of a Savepoint resource or a path;
* ``checkpointing.storage`` is an ``s3://bucket[/prefix]`` or ``file:///absolute`` URI;
* numbers are in range: every count, size, interval and timeout has a lower and an upper
  bound (buckets 1..32768, intervals up to a week, timeouts up to a day ...), so no value
  overflows what the operator computes from it (restart delays, deadlines);
* what to run (``application``: image, main file, Spark configuration, environment, the
  driver's and executors' resources and pod templates) is checked where it is defined,
  :mod:`gic_operator.models.application`.
"""

from __future__ import annotations

from enum import StrEnum

from pydantic import Field, field_validator, model_validator

from gic_operator.models.application import ApplicationSpec
from gic_operator.models.base import KubeModel
from gic_operator.models.output import OutputSpec
from gic_operator.secret_references import check_secret_reference
from gic_runtime.checkpoint.manifest import RestoreMode as RuntimeRestoreMode
from gic_runtime.checkpoint.manifest import SavepointFormat
from gic_runtime.config import GICSettings

#: Service account of every driver pod (the Helm chart creates it in each Spark namespace
#: with exactly the rights ``spark-submit`` needs to manage executor pods). A GICJob cannot
#: choose another one: the author of a job runs code of their choice in the driver, so a
#: free choice would hand them any service account of the namespace.
SPARK_SERVICE_ACCOUNT = "gic-spark"

#: Upper bounds of numbers in the spec (the lower ones are at each field; the
#: application's in :mod:`gic_operator.models.application`).
MAX_SECONDS_DAY = 86_400
MAX_SECONDS_WEEK = 7 * MAX_SECONDS_DAY
MAX_SECONDS_YEAR = 366 * MAX_SECONDS_DAY
MAX_SECONDS_10_YEARS = 10 * MAX_SECONDS_YEAR
#: Seconds a savepoint may take: the default of ``spec.savepoints.timeoutSeconds``, and
#: what upgrade and suspend savepoints always allow.
SAVEPOINT_TIMEOUT_S = 600


def runtime_default(setting: str) -> int | float:
    """The runtime's default of its numeric setting ``setting``
    (:class:`gic_runtime.config.GICSettings`), the default of the CRD field tuning it."""
    default = GICSettings.model_fields[setting].default
    if isinstance(default, bool) or not isinstance(default, int | float):
        raise TypeError(f"the runtime's setting {setting} has no numeric default")
    return default


def _runtime_int(setting: str) -> int:
    default = runtime_default(setting)
    if not isinstance(default, int):
        raise TypeError(f"the runtime's setting {setting} is not an integer")
    return default


class JobState(StrEnum):
    """Desired state of the job."""

    RUNNING = "running"
    SUSPENDED = "suspended"


class UpgradeMode(StrEnum):
    """How a spec change is rolled out to a running job."""

    SAVEPOINT = "savepoint"
    LAST_STATE = "last-state"
    STATELESS = "stateless"


class RestoreMode(StrEnum):
    """Who owns a restore source's files after the restore (the CRD's spelling;
    :meth:`to_runtime` gives the runtime's)."""

    CLAIM = "Claim"
    NO_CLAIM = "NoClaim"

    def to_runtime(self) -> RuntimeRestoreMode:
        """The runtime's mode (``claim`` / ``no-claim``: ``GIC_RESTORE_MODE``)."""
        if self is RestoreMode.CLAIM:
            return RuntimeRestoreMode.CLAIM
        return RuntimeRestoreMode.NO_CLAIM


class ChangelogSpec(KubeModel):
    """Changelog upload tuning (defaults suit most jobs)."""

    preemptive_upload_bytes: int = Field(
        _runtime_int("changelog_preemptive_upload_bytes"),
        ge=1,
        le=1024 * 1024 * 1024,
        description="Buffered changelog bytes that trigger an upload before the checkpoint. "
        "Default: the runtime's (changelog_preemptive_upload_bytes).",
    )
    max_hedges: int = Field(
        _runtime_int("max_hedges"),
        ge=0,
        le=8,
        description="Extra upload attempts started when one is slow (0: off). Default: the "
        "runtime's (max_hedges).",
    )


class CheckpointingSpec(KubeModel):
    """Where and how the job's state is checkpointed."""

    storage: str = Field(
        min_length=1,
        description="Root URI of checkpoint storage: s3://bucket/prefix or file:///path. The "
        "job's files live under <storage>/jobs/<namespace>.<name>/; the operator never deletes "
        "outside it.",
    )
    credentials_secret: str | None = Field(
        None,
        description="Secret with AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (optionally "
        "AWS_SESSION_TOKEN for temporary credentials, AWS_REGION, AWS_DEFAULT_REGION, "
        "AWS_ENDPOINT_URL) for S3; passed to pods only by secretKeyRef.",
    )
    s3_endpoint_url: str | None = Field(
        None, description="S3 endpoint for S3-compatible servers (MinIO, SeaweedFS)."
    )
    buckets: int = Field(
        _runtime_int("num_buckets"),
        ge=1,
        le=32768,
        description="Key buckets (units of rescaling), fixed for the life of the state. "
        "Default: the runtime's (num_buckets).",
    )
    retained_checkpoints: int = Field(
        _runtime_int("retained_checkpoints"),
        ge=1,
        le=1000,
        description="Completed checkpoints kept. Default: the runtime's (retained_checkpoints).",
    )
    materialization_interval_seconds: float = Field(
        float(runtime_default("materialization_interval_s")),
        gt=0,
        le=MAX_SECONDS_WEEK,
        allow_inf_nan=False,
        description="Seconds between materializations of one bucket; bounds restore replay. "
        "Default: the runtime's (materialization_interval_s).",
    )
    changelog: ChangelogSpec = Field(
        default_factory=lambda: ChangelogSpec.model_validate({}),
        description="Changelog upload tuning.",
    )

    @field_validator("credentials_secret")
    @classmethod
    def _not_rpc_secret(cls, value: str | None) -> str | None:
        return None if value is None else check_secret_reference(value)

    @field_validator("storage")
    @classmethod
    def _storage_uri(cls, value: str) -> str:
        if value.startswith("s3://") and len(value) > len("s3://"):
            return value.rstrip("/")
        if value.startswith("file:///"):
            return value.rstrip("/") if value != "file:///" else value
        raise ValueError(
            f"storage {value!r} is not a storage URI: use s3://bucket/prefix or "
            "file:///absolute/path"
        )


class RestoreSpec(KubeModel):
    """Where a job with no checkpoint of its own starts from."""

    savepoint: str | None = Field(
        None, description="Name of a Savepoint resource in the job's namespace (Completed)."
    )
    path: str | None = Field(
        None, description="URI of a savepoint directory or a checkpoint manifest."
    )
    mode: RestoreMode = Field(
        RestoreMode.NO_CLAIM,
        description="NoClaim (default, safe): the job never deletes the source's files and "
        "stops referencing them after its first checkpoint. Claim: the job owns them from now "
        "on; a claimed Savepoint shows claimedBy and is never disposed of.",
    )

    @model_validator(mode="after")
    def _one_source(self) -> RestoreSpec:
        if (self.savepoint is None) == (self.path is None):
            raise ValueError("restore needs exactly one of savepoint (a Savepoint name) or path")
        return self


class RetentionSpec(KubeModel):
    """Retention of savepoints the policy created (never of ones a user or annotation made)."""

    max_count: int | None = Field(
        None,
        ge=1,
        le=10_000,
        description="Keep at most this many policy savepoints (newest first).",
    )
    max_age_seconds: int | None = Field(
        None, ge=1, le=MAX_SECONDS_10_YEARS, description="Delete policy savepoints older than this."
    )


class SavepointPolicySpec(KubeModel):
    """Savepoint defaults and the periodic savepoint policy."""

    format: SavepointFormat = Field(
        SavepointFormat.NATIVE,
        description="Format of savepoints the operator triggers (upgrades, suspend, periodic, "
        "annotation).",
    )
    interval_seconds: int | None = Field(
        None,
        ge=60,
        le=MAX_SECONDS_YEAR,
        description="Take an intermediate savepoint this often; unset: never.",
    )
    retention: RetentionSpec = Field(
        default_factory=lambda: RetentionSpec.model_validate({}),
        description="Retention of periodic savepoints.",
    )
    timeout_seconds: int = Field(
        SAVEPOINT_TIMEOUT_S,
        ge=10,
        le=MAX_SECONDS_DAY,
        description="A triggered Savepoint resource not completed after this is marked "
        f"Failed (upgrade and suspend savepoints allow {SAVEPOINT_TIMEOUT_S} s).",
    )


class RestartPolicySpec(KubeModel):
    """What happens when the driver fails."""

    max_restarts: int = Field(
        5,
        ge=0,
        le=1000,
        description="Restarts allowed before the job is Failed; the count resets after "
        "resetAfterSeconds of healthy running.",
    )
    backoff_seconds: float = Field(
        2.0,
        ge=0,
        le=3600,
        allow_inf_nan=False,
        description="The first restart is immediate; the second waits this long and each "
        "further one twice as long as the one before.",
    )
    max_backoff_seconds: float = Field(
        300.0,
        ge=0,
        le=MAX_SECONDS_DAY,
        allow_inf_nan=False,
        description="Cap on the restart delay.",
    )
    reset_after_seconds: float = Field(
        600.0,
        gt=0,
        le=MAX_SECONDS_WEEK,
        allow_inf_nan=False,
        description="Running this long without a failure resets the restart count.",
    )


class GICJobSpec(KubeModel):
    """Desired state of a GIC streaming job."""

    application: ApplicationSpec = Field(description="What to run.")
    state: JobState = Field(
        JobState.RUNNING,
        description="running or suspended (stop with a savepoint; back to running resumes "
        "from the checkpoint that savepoint copied).",
    )
    checkpointing: CheckpointingSpec = Field(description="Checkpoint storage and tuning.")
    restore: RestoreSpec | None = Field(
        None,
        description="Start from a savepoint or checkpoint when the job has no checkpoint of "
        "its own; ignored once it has.",
    )
    output: OutputSpec | None = Field(
        None, description="Ownership of the transactional output (takeover of another job's)."
    )
    upgrade_mode: UpgradeMode = Field(
        UpgradeMode.SAVEPOINT,
        description="How a spec change reaches a running job: savepoint (stop with a "
        "savepoint, then relaunch from the checkpoint it copied; the savepoint stays as a "
        "fallback), last-state (relaunch from the latest checkpoint) or stateless (relaunch "
        "with empty state under a new job id).",
    )
    savepoints: SavepointPolicySpec = Field(
        default_factory=lambda: SavepointPolicySpec.model_validate({}),
        description="Savepoint format, period, retention.",
    )
    restart_policy: RestartPolicySpec = Field(
        default_factory=lambda: RestartPolicySpec.model_validate({}),
        description="Restart budget and backoff.",
    )
