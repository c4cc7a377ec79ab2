"""Job settings: one typed, validated object, loaded from arguments, environment and file.

Kept whole on purpose, although longer than the other modules: it is one pydantic
model, and its parts change together. A setting is a field declaration (type, bounds,
default, and a description of what it tunes and why that default), its line in
:data:`ACCEPTED` (the same bounds in words, for error messages), sometimes a validator,
and an entry of :meth:`GICSettings.task_settings` when executors use it; splitting the
fields, their validators, the table and the views into modules would scatter every new
setting over them. What does not depend on the fields already lives apart: the
sources and the error text in :mod:`gic_runtime.config_sources`, the settings of each
component in its own module (e.g. :class:`~gic_runtime.changelog.writer.WriterSettings`).

:class:`GICSettings` is the configuration boundary of a job (pydantic validates here, and
only here): the ``gic`` CLI, the Spark driver and the operator all build one, and pass it
to a driver process as environment variables (:meth:`GICSettings.to_env`, read back by
:meth:`GICSettings.from_env`).

Sources and precedence (:meth:`GICSettings.load`, layered by pydantic-settings): keyword
overrides > environment (``GIC_<FIELD>``, e.g. ``GIC_NUM_BUCKETS``) > settings file
(JSON, or YAML when pyyaml is installed; named by the argument or ``GIC_CONFIG_FILE``) >
caller defaults (``defaults=``; :meth:`GICJob.create <gic_runtime.spark.GICJob.create>`
passes its app name as the default job id) > the defaults below. Overrides that are
``None`` count as not given (a CLI passes its unset options that way). In the
environment an empty value of an optional setting means ``None``. Constructing
``GICSettings(...)`` directly reads arguments and defaults only, never the environment.

Invariants: an instance is frozen and always valid (unknown keys are refused, and each
setting's range matches what the component it tunes accepts, so
:meth:`GICSettings.task_settings` never fails). ``storage`` and ``restore_source`` are
normalized to full URIs (a plain path becomes an absolute ``file://`` URI, resolved
against the working directory at load time). ``model_fields_set`` holds exactly the
settings some source gave. Every validation failure is one
:class:`~gic_runtime.errors.ConfigurationError` with one line per bad setting, naming
where the value came from (argument, ``GIC_*`` variable, file key, caller default) and
what is accepted. S3 credentials never pass through here: they come from the environment
via :meth:`gic_runtime.storage.S3Settings.from_env`, so they are never logged with
settings.

Thread-safety: instances are immutable; the loaders are stateless (the sources of one
load live in a context variable for the duration of that load).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from contextvars import ContextVar
from pathlib import Path
from typing import Any, Final, Literal

from pydantic import Field, ValidationError, field_validator
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict

from gic_runtime.changelog.segment import Codec
from gic_runtime.changelog.upload_types import UploaderSettings
from gic_runtime.changelog.writer import WriterSettings
from gic_runtime.checkpoint.manifest import RestoreMode
from gic_runtime.checkpoint.registry import DEFAULT_RETAINED_CHECKPOINTS
from gic_runtime.config_sources import (
    CONFIG_FILE_ENV,
    ENV_PREFIX,
    LoadPlan,
    describe_errors,
    env_var,
)
from gic_runtime.coordination.settings import TaskSettings
from gic_runtime.errors import ConfigurationError
from gic_runtime.layout import validate_id
from gic_runtime.listen import listen_addresses
from gic_runtime.local_dirs import default_local_dir
from gic_runtime.materialization.scheduler import MaterializationSettings
from gic_runtime.storage.uri import StorageURI

__all__ = [
    "ACCEPTED",
    "CONFIG_FILE_ENV",
    "DRIVER_PID_FILE_ENV",
    "ENV_PREFIX",
    "GICSettings",
    "default_local_dir",
    "env_var",
]

_MiB = 1024 * 1024
DRIVER_PID_FILE_ENV = "GIC_DRIVER_PID_FILE"
"""File where a driver process announces its pid while SIGTERM stops it cleanly (set by
the driver pod's entry process, :mod:`gic_runtime.cli.driver_process`)."""
_LOAD: ContextVar[LoadPlan | None] = ContextVar("gic_settings_load", default=None)


def _default_storage() -> str:
    return Path("gic-data").absolute().as_uri()


def _normalize_uri(value: str) -> str:
    text = value.strip()
    if not text:
        raise ValueError("must not be empty")
    try:
        return str(StorageURI.parse(text)).rstrip("/")
    except ConfigurationError as exc:
        raise ValueError(str(exc)) from None


_MATERIALIZATION: Final = MaterializationSettings()
"""The materialization defaults are the scheduler's (one place)."""


class GICSettings(BaseSettings):
    """Settings of one GIC job (see the module docstring for sources and precedence)."""

    model_config = SettingsConfigDict(
        env_prefix=ENV_PREFIX,
        case_sensitive=False,
        frozen=True,
        extra="forbid",
        validate_default=True,
    )

    job_id: str = Field(
        "gic-job",
        description="Job id: names the job's directory <storage>/jobs/<job_id>/. Lowercase "
        "letters, digits, '.', '_', '-' (it becomes a path segment and a Kubernetes name).",
    )
    storage: str = Field(
        default_factory=_default_storage,
        description="Root URI of checkpoint storage: s3://bucket/prefix or file:///path (a "
        "plain path is made absolute). Default ./gic-data, so a local run needs no setup.",
    )
    num_buckets: int = Field(
        128,
        ge=1,
        le=32768,
        description="Key buckets (units of rescaling), fixed for the life of the state. 128 "
        "lets a job rescale up to 128 tasks while keeping per-bucket overhead small.",
    )
    num_tasks: int | None = Field(
        None,
        ge=1,
        description="State tasks (each owns a contiguous bucket range), at most num_buckets. "
        "None: the driver uses spark.sql.shuffle.partitions.",
    )
    retained_checkpoints: int = Field(
        DEFAULT_RETAINED_CHECKPOINTS,
        ge=1,
        le=1000,  # the CRD's bound; far below the checkpoint listing limit
        description="Completed checkpoints kept. 2 leaves one fallback if the newest is "
        "damaged; each one more keeps the previous snapshot of every bucket materialized "
        "since it and the changelog since (docs/architecture.md §7).",
    )
    materialization_interval_s: float = Field(
        _MATERIALIZATION.interval_s,
        gt=0,
        allow_inf_nan=False,
        description="Seconds between materializations of one bucket: bounds restore-time "
        "replay to about two minutes of changes at 30 full uploads per bucket per hour.",
    )
    materialization_jitter: float = Field(
        _MATERIALIZATION.jitter,
        ge=0,
        lt=1,
        allow_inf_nan=False,
        description="Relative jitter (0 <= j < 1) of the materialization interval so buckets "
        "drift apart and never materialize all at once.",
    )
    materialization_max_in_flight: int = Field(
        _MATERIALIZATION.max_in_flight,
        ge=1,
        description="Materializations running at once per task. 1 leaves upload bandwidth "
        "for changelog segments, which are on the checkpoint's critical path.",
    )
    materialization_max_sections: int = Field(
        _MATERIALIZATION.max_sections,
        ge=1,
        description="Changelog sections since its last snapshot that make a bucket due "
        "whatever the interval. Bounds restore requests (about one object read per section "
        "of the busiest bucket) and manifest size (every section is a row of every "
        "manifest), while snapshotting a bucket at most about once per 32 checkpoints.",
    )
    materialization_changelog_ratio: float = Field(
        _MATERIALIZATION.changelog_ratio,
        gt=0,
        allow_inf_nan=False,
        description="Changelog bytes since its last snapshot, as a multiple of that "
        "snapshot's size (at least 4 KiB), that make a bucket due whatever the interval. "
        "1.0: a restore replays at most a snapshot's worth of changes, and with 2 retained "
        "checkpoints the job keeps under 3x its state (docs/architecture.md §7).",
    )
    changelog_preemptive_upload_bytes: int = Field(
        4 * _MiB,
        ge=1,
        description="Bytes of buffered changelog that trigger an upload before the "
        "checkpoint. 4 MiB uploads in well under a second yet keeps objects few.",
    )
    changelog_codec: Literal["zstd", "none"] = Field(
        "zstd",
        description="Changelog section compression: zstd (default; used only where it saves "
        "space) or none.",
    )
    max_hedges: int = Field(
        1,
        ge=0,
        description="Extra upload attempts started when an attempt is slow (0 disables "
        "hedging). One removes nearly all of a rare-straggler tail.",
    )
    hedge_after_s: float | None = Field(
        None,
        gt=0,
        allow_inf_nan=False,
        description="Fixed hedge delay in seconds; None: adaptive (a high quantile of recent "
        "upload latencies).",
    )
    hedge_budget_ratio: float = Field(
        0.05,
        ge=0,
        le=1,
        allow_inf_nan=False,
        description="Most hedges as a fraction of uploads: a hard bound (5%) on the extra "
        "load hedging adds.",
    )
    full_snapshots: bool = Field(
        False,
        description="Make every checkpoint self-contained (each bucket materialized afresh). "
        "Off: checkpoints are incremental, which is the point of GIC; on for comparisons.",
    )
    checkpoint_timeout_s: float = Field(
        300.0,
        gt=0,
        allow_inf_nan=False,
        description="Seconds a checkpoint's uploads may take before the checkpoint fails; "
        "retries and hedges run well inside it.",
    )
    restore_source: str | None = Field(
        None,
        description="Checkpoint or savepoint to restore from (URI or path); None: resume "
        "from the job's latest checkpoint, or start empty.",
    )
    restore_mode: RestoreMode = Field(
        RestoreMode.NO_CLAIM,
        description="claim: the job owns the source's files from now on; no-claim "
        "(default, safe): never deletes them and stops referencing them after the first "
        "checkpoint.",
    )
    allow_query_change: bool = Field(
        False,
        description="Resume checkpoints written by a different query (another source, "
        "processing or output schema). Off: such a resume is refused before anything is "
        "written, so a job never reads another query's state by accident; on for a "
        "deliberate upgrade of the job's query.",
    )
    output_takeover: str | None = Field(
        None,
        min_length=1,
        max_length=128,
        description="Job id whose transactional output this job takes over on purpose. "
        "An output path belongs to one job's state: another job writing there is refused "
        "before its first batch; naming the current owner here lets this job write there "
        "from now on (the owner's committed batches stay readable, the owner can no "
        "longer write). None: never take another job's output.",
    )
    epoch: int | None = Field(
        None,
        ge=1,
        description="Fencing epoch of this launch (the operator assigns one); None: the "
        "driver claims the next.",
    )
    local_dir: str | None = Field(
        None,
        min_length=1,
        description="Directory for executor-local state copies (fast restarts of buckets on "
        "the same executor). None: in local mode <root>-local next to a file:// storage "
        "root, else <tmp>/gic-local-<user>, kept across restarts; on a "
        "cluster each executor's own scratch directory (the first of SPARK_LOCAL_DIRS, e.g. "
        "an executor pod's spark-local-dir volume). A relative path resolves against each "
        "executor's working directory.",
    )
    orphan_sweep_interval_s: float = Field(
        300.0,
        gt=0,
        allow_inf_nan=False,
        description="Seconds between live orphan sweeps: while the job runs, the driver "
        "deletes (between batches) what failed task attempts left in storage. Five minutes "
        "keeps the LIST requests rare while a lost executor's files live minutes, not weeks.",
    )
    max_batches: int | None = Field(
        None,
        ge=1,
        description="Stop after this many micro-batches (local runs and tests); None: run "
        "until stopped.",
    )
    metrics_port: int | None = Field(
        None,
        ge=0,
        le=65535,
        description="Port of the driver's Prometheus endpoint (0: any free port); None: off.",
    )
    metrics_host: str | None = Field(
        None,
        description="IP address the driver's Prometheus endpoint binds (the pod's IP, and "
        "the loopback address too when that is not one); None: every interface. The "
        "operator sets it to the driver pod's status.podIP.",
    )
    control_poll_s: float = Field(
        1.0,
        gt=0,
        allow_inf_nan=False,
        description="Seconds between the driver's looks at control requests (savepoint, "
        "stop); 1 s answers promptly at two LISTs per second.",
    )
    stop_timeout_s: float = Field(
        20.0,
        gt=0,
        allow_inf_nan=False,
        description="Seconds a driver told to stop by SIGTERM waits for its running batch "
        "before it abandons the batch (replayed by the next launch) and stops; the "
        "operator gives driver pods this plus 20 s as their termination grace period.",
    )

    def __init__(self, **values: Any) -> None:
        try:
            super().__init__(**values)
        except ValidationError as exc:
            plan = _LOAD.get() or LoadPlan(overrides=frozenset(values))
            raise ConfigurationError(
                describe_errors(exc, plan, type(self).model_fields, ACCEPTED)
            ) from None

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        """Highest priority first: arguments, then (within :meth:`load`) the
        environment, the settings file and the caller's defaults."""
        plan = _LOAD.get()
        if plan is None:
            return (init_settings,)
        return (init_settings, *plan.sources(settings_cls))

    # --- validators ------------------------------------------------------------------

    @field_validator("job_id")
    @classmethod
    def _job_id(cls, value: str) -> str:
        try:
            return validate_id("job id", value)
        except ConfigurationError as exc:
            raise ValueError(str(exc)) from None

    @field_validator("storage")
    @classmethod
    def _storage(cls, value: str) -> str:
        return _normalize_uri(value)

    @field_validator("restore_source")
    @classmethod
    def _restore_source(cls, value: str | None) -> str | None:
        return None if value is None else _normalize_uri(value)

    @field_validator("restore_mode", mode="before")
    @classmethod
    def _restore_mode(cls, value: Any) -> Any:
        if isinstance(value, str) and not isinstance(value, RestoreMode):
            key = value.strip().lower().replace("-", "").replace("_", "")
            return {"claim": RestoreMode.CLAIM, "noclaim": RestoreMode.NO_CLAIM}.get(key, value)
        return value

    @field_validator("metrics_host")
    @classmethod
    def _metrics_host(cls, value: str | None) -> str | None:
        if value is None or not value.strip():
            return None
        try:
            return listen_addresses(value)[0]
        except ConfigurationError as exc:
            raise ValueError(str(exc)) from None

    @field_validator("changelog_codec", mode="before")
    @classmethod
    def _codec(cls, value: Any) -> Any:
        return value.strip().lower() if isinstance(value, str) else value

    # --- views -------------------------------------------------------------------------

    @property
    def resolved_local_dir(self) -> str:
        """``local_dir``, else :func:`default_local_dir` of the storage root."""
        return self.local_dir or default_local_dir(self.storage)

    def task_settings(self) -> TaskSettings:
        """The executor-side tuning these settings describe."""
        return TaskSettings(
            writer=WriterSettings(
                preemptive_upload_bytes=self.changelog_preemptive_upload_bytes,
                codec=Codec.ZSTD if self.changelog_codec == "zstd" else Codec.NONE,
            ),
            uploader=UploaderSettings(
                max_hedges=self.max_hedges,
                hedge_after_s=self.hedge_after_s,
                hedge_budget_ratio=self.hedge_budget_ratio,
            ),
            materialization=MaterializationSettings(
                interval_s=self.materialization_interval_s,
                jitter=self.materialization_jitter,
                max_in_flight=self.materialization_max_in_flight,
                max_sections=self.materialization_max_sections,
                changelog_ratio=self.materialization_changelog_ratio,
            ),
            checkpoint_timeout_s=self.checkpoint_timeout_s,
        )

    def to_env(self) -> dict[str, str]:
        """``GIC_<FIELD>`` variables that :meth:`from_env` reads back into an equal
        object (settings that are ``None`` are left out)."""
        out: dict[str, str] = {}
        for name in type(self).model_fields:
            value = getattr(self, name)
            if value is not None:
                out[env_var(name)] = _env_text(value)
        return out

    # --- loaders -----------------------------------------------------------------------

    @classmethod
    def from_env(cls, env: Mapping[str, str] = os.environ) -> GICSettings:
        """Settings from ``GIC_<FIELD>`` variables of ``env``, defaults elsewhere."""
        return cls._build(LoadPlan(env=env), {})

    @classmethod
    def from_file(cls, path: str | os.PathLike[str]) -> GICSettings:
        """Settings from a JSON (``.json``) or YAML (``.yaml``/``.yml``) file whose top
        level maps setting names to values, defaults elsewhere."""
        return cls._build(LoadPlan(file=Path(path)), {})

    @classmethod
    def load(
        cls,
        file: str | os.PathLike[str] | None = None,
        env: Mapping[str, str] = os.environ,
        *,
        defaults: Mapping[str, tuple[Any, str]] | None = None,
        **overrides: Any,
    ) -> GICSettings:
        """Settings from all sources: ``overrides`` > ``env`` > file > ``defaults`` >
        built-in defaults. The file is ``file``, else the one ``GIC_CONFIG_FILE`` names,
        else none. ``defaults`` maps a setting to ``(value, where it came from)``; the
        second part names the value in error messages."""
        path = file if file is not None else (env.get(CONFIG_FILE_ENV) or None)
        given = {name: value for name, value in overrides.items() if value is not None}
        load = LoadPlan(
            env=env,
            file=None if path is None else Path(path),
            defaults=dict(defaults or {}),
            overrides=frozenset(given),
        )
        return cls._build(load, given)

    @classmethod
    def _build(cls, load: LoadPlan, values: dict[str, Any]) -> GICSettings:
        token = _LOAD.set(load)
        try:
            return cls(**values)
        finally:
            _LOAD.reset(token)


#: What each setting accepts, for error messages.
ACCEPTED: Mapping[str, str] = {
    "job_id": "1-128 lowercase letters, digits, '.', '_' or '-', starting and ending with a "
    "letter or digit",
    "storage": "s3://bucket/prefix, file:///absolute/path or a local path",
    "num_buckets": "an integer from 1 to 32768",
    "num_tasks": "a positive integer (or unset: spark.sql.shuffle.partitions)",
    "retained_checkpoints": "an integer from 1 to 1000",
    "materialization_interval_s": "a positive number of seconds",
    "materialization_jitter": "a number from 0 up to (not including) 1",
    "materialization_max_in_flight": "a positive integer",
    "materialization_max_sections": "a positive integer",
    "materialization_changelog_ratio": "a positive number (multiple of the snapshot's size)",
    "changelog_preemptive_upload_bytes": "a positive number of bytes",
    "changelog_codec": "'zstd' or 'none'",
    "max_hedges": "an integer >= 0 (0 disables hedging)",
    "hedge_after_s": "a positive number of seconds (or unset: adaptive)",
    "hedge_budget_ratio": "a number from 0 to 1",
    "full_snapshots": "true or false (also 1/0, yes/no, on/off)",
    "checkpoint_timeout_s": "a positive number of seconds",
    "restore_source": "a checkpoint or savepoint URI or path (or unset)",
    "restore_mode": "'claim' or 'no-claim' (also Claim, NoClaim; any case)",
    "allow_query_change": "true or false (also 1/0, yes/no, on/off)",
    "output_takeover": "the job id that owns the output now (or unset: take nobody's)",
    "epoch": "a positive integer (or unset: the driver claims the next)",
    "local_dir": "a non-empty directory path (or unset: executor scratch / beside the storage)",
    "orphan_sweep_interval_s": "a positive number of seconds",
    "max_batches": "a positive integer (or unset: no limit)",
    "metrics_port": "a port number from 0 to 65535 (or unset: off)",
    "metrics_host": "an IPv4 or IPv6 address (or unset: every interface)",
    "control_poll_s": "a positive number of seconds",
    "stop_timeout_s": "a positive number of seconds",
}


def _env_text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return repr(value)
    if hasattr(value, "value"):  # enums
        return str(value.value)
    return str(value)
