"""The ``GICJob`` custom resource (``gic.io/v1alpha1``, short name ``gj``).

A GICJob is one stateful PySpark streaming job whose state is checkpointed by GIC. The spec
says what to run (``application``), whether it should run (``state``), where its
checkpoints live (``checkpointing``), where it starts from (``restore``), how a spec change
is rolled out (``upgradeMode``), its savepoint policy and its restart policy. The status is
written only by the operator.

Invariants checked at validation (an invalid spec gets a ``Ready=False`` condition with the
message and nothing is launched):

* ``restore`` names exactly one of a Savepoint resource or a path;
* ``checkpointing.storage`` is an ``s3://bucket[/prefix]`` or ``file:///absolute`` URI;
* numbers are in range: every count, size, interval and timeout has a lower and an upper
  bound (buckets 1..32768, intervals up to a week, timeouts up to a day ...), so no value
  overflows what the operator computes from it (restart delays, deadlines);
* ``application.sparkConf`` names only allowed Spark settings
  (:mod:`gic_operator.validation`), and ``application.env`` takes each variable either
  from a value or from a Secret key, a ConfigMap key or a field of the pod
  (:mod:`gic_operator.models.env`);
* ``application.driver.podTemplate`` and ``application.executor.podTemplate`` never
  weaken pod security nor take over the operator's labels, volumes and mounts
  (:mod:`gic_operator.models.pod_template`).
"""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated

from pydantic import AfterValidator, ConfigDict, Field, field_validator, model_validator
from pydantic.alias_generators import to_camel

from gic_operator.models.base import CONDITIONS_LIST, Condition, KubeModel, StatusPart
from gic_operator.models.env import EnvVar
from gic_operator.models.pod_template import PodTemplate
from gic_operator.validation import SPARK_CONF_VALUE_MAX, check_spark_conf

#: Service account of every driver pod (the Helm chart creates it in each Spark namespace
#: with exactly the rights ``spark-submit`` needs to manage executor pods). A GICJob cannot
#: choose another one: the author of a job runs code of their choice in the driver, so a
#: free choice would hand them any service account of the namespace.
SPARK_SERVICE_ACCOUNT = "gic-spark"

#: Upper bounds of numbers in the spec (the lower ones are at each field).
MAX_CORES = 256
MAX_EXECUTORS = 1000
MAX_SECONDS_DAY = 86_400
MAX_SECONDS_WEEK = 7 * MAX_SECONDS_DAY
MAX_SECONDS_YEAR = 366 * MAX_SECONDS_DAY
MAX_SECONDS_10_YEARS = 10 * MAX_SECONDS_YEAR
#: Spark memory sizes: a number of at most 9 digits and an optional unit.
MEMORY_PATTERN = r"^[0-9]{1,9}[kmgtKMGT]?$"


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
    """Who owns a restore source's files after the restore."""

    CLAIM = "Claim"
    NO_CLAIM = "NoClaim"


class SavepointFormat(StrEnum):
    """Savepoint file format."""

    NATIVE = "native"
    CANONICAL = "canonical"


class ImagePullPolicy(StrEnum):
    """Kubernetes image pull policy."""

    ALWAYS = "Always"
    IF_NOT_PRESENT = "IfNotPresent"
    NEVER = "Never"


class DriverSpec(KubeModel):
    """Resources of the Spark driver pod."""

    cores: int = Field(1, ge=1, le=MAX_CORES, description="CPU cores requested for the driver.")
    memory: str = Field(
        "1g",
        pattern=MEMORY_PATTERN,
        description="Driver JVM memory (Spark syntax: 512m, 2g).",
    )
    memory_overhead: str = Field(
        "512m",
        pattern=MEMORY_PATTERN,
        description="Memory added to the pod's limit for Python workers and native memory.",
    )
    pod_template: PodTemplate | None = Field(
        None,
        description="Labels, annotations, scheduling, volumes and resources added to the "
        "driver pod, under the operator's own fields (security settings are refused).",
    )


class ExecutorSpec(KubeModel):
    """Spark executors (pods Spark itself creates on Kubernetes)."""

    instances: int = Field(1, ge=1, le=MAX_EXECUTORS, description="Executor pods.")
    cores: int = Field(1, ge=1, le=MAX_CORES, description="CPU cores per executor.")
    memory: str = Field(
        "1g", pattern=MEMORY_PATTERN, description="Executor JVM memory (Spark syntax)."
    )
    pod_template: PodTemplate | None = Field(
        None,
        description="Labels, annotations, scheduling, volumes and resources added to every "
        "executor pod (through the executor pod template), under the operator's and "
        "Spark's own fields (security settings are refused).",
    )


class ApplicationSpec(KubeModel):
    """What to run: the driver's image, its main file and Spark's configuration."""

    image: str = Field(
        min_length=1,
        description="Container image with Spark and the GIC runtime (the Dockerfile's "
        "spark-runtime target), used for the driver and the executors.",
    )
    image_pull_policy: ImagePullPolicy = Field(
        ImagePullPolicy.IF_NOT_PRESENT, description="Pull policy for the image."
    )
    main_file: str = Field(
        min_length=1,
        description="The job's Python file inside the image (local:///opt/app/job.py or an "
        "absolute path); it uses gic_runtime.spark and reads its settings from GIC_* "
        "variables the operator sets.",
    )
    arguments: list[str] = Field(
        default_factory=list, max_length=256, description="Arguments for the main file."
    )
    spark_conf: Annotated[
        dict[str, Annotated[str, Field(max_length=SPARK_CONF_VALUE_MAX)]],
        AfterValidator(check_spark_conf),
    ] = Field(
        default_factory=dict,
        max_length=256,
        description="Extra Spark configuration, from an allowlist of settings (SQL and "
        "streaming tuning, memory, scheduling, serialization, executor CPU requests and node "
        "selectors ...; docs/operations.md lists it). Settings that would change the pods "
        "Spark creates (volumes, pod templates, service accounts, images, secrets) or its "
        "authentication are refused, as are those the operator sets itself. spark.master "
        "may be local[...] or the cluster's API server (the default).",
    )
    driver: DriverSpec = Field(
        default_factory=lambda: DriverSpec.model_validate({}), description="Driver resources."
    )
    executor: ExecutorSpec = Field(
        default_factory=lambda: ExecutorSpec.model_validate({}), description="Executors."
    )
    env: list[EnvVar] = Field(
        default_factory=list,
        max_length=128,
        description="Extra environment variables of the driver and the executors: a value, "
        "or valueFrom a Secret key, a ConfigMap key or a field of the pod.",
    )


class ChangelogSpec(KubeModel):
    """Changelog upload tuning (defaults suit most jobs)."""

    preemptive_upload_bytes: int = Field(
        4 * 1024 * 1024,
        ge=1,
        le=1024 * 1024 * 1024,
        description="Buffered changelog bytes that trigger an upload before the checkpoint.",
    )
    max_hedges: int = Field(
        1, ge=0, le=8, description="Extra upload attempts started when one is slow (0: off)."
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
        128,
        ge=1,
        le=32768,
        description="Key buckets (units of rescaling), fixed for the life of the state.",
    )
    retained_checkpoints: int = Field(3, ge=1, le=1000, description="Completed checkpoints kept.")
    materialization_interval_seconds: float = Field(
        120.0,
        gt=0,
        le=MAX_SECONDS_WEEK,
        allow_inf_nan=False,
        description="Seconds between materializations of one bucket; bounds restore replay.",
    )
    changelog: ChangelogSpec = Field(
        default_factory=lambda: ChangelogSpec.model_validate({}),
        description="Changelog upload tuning.",
    )

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
        600,
        ge=10,
        le=MAX_SECONDS_DAY,
        description="A triggered Savepoint resource not completed after this is marked "
        "Failed (upgrade and suspend savepoints allow 600 s).",
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


class JobPhase(StrEnum):
    """Lifecycle phase shown in ``kubectl get gj``."""

    PENDING = "Pending"
    DEPLOYING = "Deploying"
    RUNNING = "Running"
    UPGRADING = "Upgrading"
    RECOVERING = "Recovering"
    SUSPENDING = "Suspending"
    SUSPENDED = "Suspended"
    FINISHED = "Finished"
    FAILED = "Failed"
    INVALID = "Invalid"


class CheckpointInfo(StatusPart):
    """The job's latest completed checkpoint."""

    id: int = Field(description="Checkpoint (micro-batch) id.")
    time: str | None = Field(None, description="RFC 3339 completion time.")
    duration_ms: float | None = Field(None, description="Critical-path duration.")
    bytes: int | None = Field(None, description="Bytes uploaded for it.")


class SavepointRef(StatusPart):
    """The job's latest completed savepoint."""

    path: str = Field(description="Savepoint directory URI.")
    time: str | None = Field(None, description="RFC 3339 completion time.")


class RestoredFrom(StatusPart):
    """Where the current lineage started."""

    path: str = Field(description="Source URI.")
    savepoint: str | None = Field(None, description="Savepoint resource, if one was named.")
    mode: RestoreMode = Field(description="Claim or NoClaim.")
    released: bool = Field(
        False, description="NoClaim: no retained checkpoint references the source any more."
    )


class SweepInfo(StatusPart):
    """The last orphan sweep of the job's storage."""

    time: str = Field(description="RFC 3339 time of the sweep.")
    files: int = Field(description="Orphaned objects deleted.")
    bytes: int = Field(description="Bytes deleted.")
    epoch: int | None = Field(None, description="Fencing epoch claimed before the sweep.")


class PendingAction(StatusPart):
    """A durable intent of the operator (survives operator restarts)."""

    kind: str = Field(description="upgrade, suspend or recover.")
    request_id: str | None = Field(None, description="Control request id sent to the driver.")
    started: str = Field(description="RFC 3339 time the action began.")
    target_generation: int | None = Field(None, description="Spec generation it rolls out.")
    requested: bool | None = Field(
        None, description="The stop-with-savepoint request was written to storage."
    )
    due: str | None = Field(None, description="RFC 3339 time the next step may run (backoff).")
    mode: str | None = Field(None, description="Upgrade mode the upgrade runs with.")
    reason: str | None = Field(None, description="Why the action began.")


class GICJobStatus(KubeModel):
    """Observed state, written by the operator."""

    model_config = ConfigDict(
        alias_generator=to_camel, populate_by_name=True, extra="ignore", frozen=True
    )

    phase: JobPhase = Field(JobPhase.PENDING, description="Lifecycle phase.")
    observed_generation: int | None = Field(
        None, description="metadata.generation the operator last acted on."
    )
    job_id: str | None = Field(None, description="Job id in storage (<namespace>.<name>).")
    epoch: int | None = Field(None, description="Fencing epoch of the current driver.")
    driver_pod: str | None = Field(None, description="Name of the current driver pod.")
    deployed_generation: int | None = Field(
        None, description="Spec generation the current driver runs."
    )
    lineage: int = Field(
        0, description="State lineage; a stateless upgrade starts a new one (new job id)."
    )
    restarts: int = Field(0, description="Restarts since the count was last reset.")
    last_restart_time: str | None = Field(None, description="RFC 3339 time of the last restart.")
    next_restart_time: str | None = Field(
        None, description="RFC 3339 time the pending restart is due (backoff)."
    )
    running_since: str | None = Field(None, description="RFC 3339 time the driver was Running.")
    last_checkpoint: CheckpointInfo | None = Field(None, description="Latest checkpoint.")
    last_savepoint: SavepointRef | None = Field(None, description="Latest completed savepoint.")
    restored_from: RestoredFrom | None = Field(None, description="Restore source of the lineage.")
    last_sweep: SweepInfo | None = Field(None, description="Last orphan sweep.")
    pending: PendingAction | None = Field(None, description="Operator action in progress.")
    processed_savepoint_nonce: str | None = Field(
        None, description="Last gic.io/savepoint annotation value turned into a Savepoint."
    )
    last_periodic_savepoint: str | None = Field(
        None, description="RFC 3339 time of the last periodic savepoint trigger."
    )
    upgrade_failed_generation: int | None = Field(
        None, description="Generation whose upgrade failed; not retried until the spec changes."
    )
    suspend_failed_generation: int | None = Field(
        None, description="Generation whose suspend savepoint failed; not retried until then."
    )
    message: str | None = Field(None, description="Human-readable summary of the phase.")
    conditions: list[Condition] = Field(
        default_factory=list,
        description="Conditions, at most one of each type.",
        json_schema_extra=CONDITIONS_LIST,
    )
