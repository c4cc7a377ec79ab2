"""Job settings: one typed, validated object, loaded from arguments, environment and file.

A setting is a field declaration (type, bounds, default, and a description of what it
tunes and why that default) in :mod:`gic_runtime.config.fields`; here, its line in
:data:`ACCEPTED` (the same bounds in words, for error messages), sometimes a validator,
and an entry of :meth:`GICSettings.task_settings` when executors use it.
:class:`GICSettings` adds to those fields what a settings object does: validation, the
sources it is loaded from, and its views. The sources and the error text are
:mod:`gic_runtime.config_sources`; the settings of each component live in its own module
(e.g. :class:`~gic_runtime.changelog.writer.WriterSettings`).

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
from typing import Any

from pydantic import ValidationError, field_validator
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict

from gic_runtime.changelog.segment import Codec
from gic_runtime.changelog.upload_types import UploaderSettings
from gic_runtime.changelog.writer import WriterSettings
from gic_runtime.checkpoint.manifest import RestoreMode
from gic_runtime.config.fields import SettingsFields
from gic_runtime.config_sources import (
    CONFIG_FILE_ENV,
    ENV_PREFIX,
    LoadPlan,
    describe_errors,
    env_var,
)
from gic_runtime.coordination.task_settings import TaskSettings
from gic_runtime.errors import ConfigurationError
from gic_runtime.layout import validate_id
from gic_runtime.listen import listen_addresses
from gic_runtime.local_dirs import default_local_dir
from gic_runtime.materialization.scheduler import MaterializationSettings
from gic_runtime.state.background_restore import BackgroundRestoreSettings
from gic_runtime.storage.uri import StorageURI

__all__ = ["ACCEPTED", "DRIVER_PID_FILE_ENV", "GICSettings"]

DRIVER_PID_FILE_ENV = "GIC_DRIVER_PID_FILE"
"""File where a driver process announces its pid while SIGTERM stops it cleanly (set by
the driver pod's entry process, :mod:`gic_runtime.cli.driver_process`)."""
_LOAD: ContextVar[LoadPlan | None] = ContextVar("gic_settings_load", default=None)


def _normalize_uri(value: str) -> str:
    text = value.strip()
    if not text:
        raise ValueError("must not be empty")
    try:
        return str(StorageURI.parse(text)).rstrip("/")
    except ConfigurationError as exc:
        raise ValueError(str(exc)) from None


class GICSettings(SettingsFields):
    """Settings of one GIC job (see the module docstring for sources and precedence;
    the fields are :class:`~gic_runtime.config.fields.SettingsFields`)."""

    model_config = SettingsConfigDict(
        env_prefix=ENV_PREFIX,
        case_sensitive=False,
        frozen=True,
        extra="forbid",
        validate_default=True,
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
                time_min_change=self.materialization_time_min_change,
                growth_turns=self.materialization_growth_turns,
            ),
            checkpoint_timeout_s=self.checkpoint_timeout_s,
            restore=BackgroundRestoreSettings(
                background=self.restore_background,
                eager_when_all_touched=self.restore_eager_when_all_touched,
                select_keys=self.restore_select_keys,
                parallel=self.restore_parallel,
                fetch_threads=self.restore_fetch_threads,
                window_bytes=self.restore_window_bytes,
            ),
            local_state_mapped_limit=self.local_state_mapped_limit,
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
    "materialization_time_min_change": "a number from 0 to 1 (fraction of the snapshot's size)",
    "materialization_growth_turns": "true or false (also 1/0, yes/no, on/off)",
    "changelog_preemptive_upload_bytes": "a positive number of bytes",
    "changelog_codec": "'zstd' or 'none'",
    "max_hedges": "an integer >= 0 (0 disables hedging)",
    "hedge_after_s": "a positive number of seconds (or unset: adaptive)",
    "hedge_budget_ratio": "a number from 0 to 1",
    "full_snapshots": "true or false (also 1/0, yes/no, on/off)",
    "checkpoint_timeout_s": "a positive number of seconds",
    "restore_background": "true or false (also 1/0, yes/no, on/off)",
    "restore_at_start": "true or false (also 1/0, yes/no, on/off)",
    "restore_eager_when_all_touched": "true or false (also 1/0, yes/no, on/off)",
    "restore_select_keys": "true or false (also 1/0, yes/no, on/off)",
    "restore_parallel": "an integer from 1 to 64",
    "restore_fetch_threads": "an integer from 1 to 64",
    "restore_window_bytes": "a number of bytes, at least 65536",
    "local_state_mapped_limit": "a number of bytes, 0 or more (0: never unmap)",
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
