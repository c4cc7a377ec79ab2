"""The sources :class:`~gic_runtime.config.GICSettings` is layered from, for
pydantic-settings: ``GIC_*`` variables of a given mapping, a JSON/YAML settings file and
caller defaults, plus the error text that names where each bad value came from.

A :class:`LoadPlan` describes one load: which sources take part and, once
pydantic-settings has called them, which settings each one gave. Its
:meth:`~LoadPlan.source_of` names a setting's origin by priority (argument > environment
variable > file key > caller default), exactly as pydantic-settings merges them.

Imports neither pyspark nor the settings class (which imports this module).
Thread-safety: a plan belongs to one load on one thread; the readers are stateless.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import ValidationError
from pydantic.fields import FieldInfo
from pydantic_settings import BaseSettings, EnvSettingsSource, PydanticBaseSettingsSource

from gic_runtime.errors import ConfigurationError

ENV_PREFIX = "GIC_"
CONFIG_FILE_ENV = "GIC_CONFIG_FILE"


def env_var(name: str) -> str:
    """The environment variable of setting ``name`` (``GIC_`` + upper case)."""
    return ENV_PREFIX + name.upper()


@dataclass
class LoadPlan:
    """The sources of one load (``None``: not taken part) and what each one gave."""

    env: Mapping[str, str] | None = None
    file: Path | None = None
    defaults: Mapping[str, tuple[Any, str]] = field(default_factory=dict)
    """Setting -> (value, where it came from, as error messages name it)."""
    overrides: frozenset[str] = frozenset()
    from_env: set[str] = field(default_factory=set)
    from_file: set[str] = field(default_factory=set)

    def source_of(self, name: str) -> str:
        if name in self.overrides:
            return f"argument {name}"
        if name in self.from_env:
            return f"environment variable {env_var(name)}"
        if name in self.from_file:
            return f"file {self.file} key {name!r}"
        if name in self.defaults:
            return self.defaults[name][1]
        return f"default of {name}"

    def sources(self, settings_cls: type[BaseSettings]) -> list[PydanticBaseSettingsSource]:
        """The plan's sources after the arguments, highest priority first."""
        found: list[PydanticBaseSettingsSource] = []
        if self.env is not None:
            found.append(EnvSource(settings_cls, self))
        if self.file is not None:
            file = self.file
            found.append(DictSource(settings_cls, lambda: read_settings_file(file), self.from_file))
        if self.defaults:
            values = {name: value for name, (value, _) in self.defaults.items()}
            found.append(DictSource(settings_cls, lambda: values, None))
        return found


def _optional(info: FieldInfo | None) -> bool:
    return info is not None and not info.is_required() and info.default is None


class EnvSource(EnvSettingsSource):
    """``GIC_<FIELD>`` variables of the plan's mapping (not necessarily ``os.environ``);
    names match in any case; a blank value of an optional setting is ``None``."""

    def __init__(self, settings_cls: type[BaseSettings], plan: LoadPlan) -> None:
        self._plan = plan
        super().__init__(settings_cls, env_prefix=ENV_PREFIX, case_sensitive=False)

    def _load_env_vars(self) -> Mapping[str, str | None]:
        return {name.lower(): value for name, value in (self._plan.env or {}).items()}

    def __call__(self) -> dict[str, Any]:
        data = super().__call__()
        fields = self.settings_cls.model_fields
        for name, value in data.items():
            if isinstance(value, str) and not value.strip() and _optional(fields.get(name)):
                data[name] = None
        self._plan.from_env.update(data)
        return data


class DictSource(PydanticBaseSettingsSource):
    """Settings from ``read()`` (a settings file, the caller's defaults); the names it
    gave are added to ``record``."""

    def __init__(
        self,
        settings_cls: type[BaseSettings],
        read: Callable[[], dict[str, Any]],
        record: set[str] | None,
    ) -> None:
        super().__init__(settings_cls)
        self._read = read
        self._record = record

    def get_field_value(self, field: FieldInfo, field_name: str) -> tuple[Any, str, bool]:
        return None, field_name, False  # unused: __call__ returns every value at once

    def __call__(self) -> dict[str, Any]:
        data = self._read()
        if self._record is not None:
            self._record.update(data)
        return data


def read_settings_file(file: Path) -> dict[str, Any]:
    """The top-level mapping of a ``.json``, ``.yaml`` or ``.yml`` settings file; every
    problem (extension, unreadable, syntax, not a mapping) is a one-line
    :class:`ConfigurationError` naming the file."""
    suffix = file.suffix.lower()
    if suffix not in (".json", ".yaml", ".yml"):
        raise ConfigurationError(
            f"settings file {file} has an unknown extension {suffix!r}: name it *.json, "
            "*.yaml or *.yml"
        )
    try:
        text = file.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigurationError(
            f"cannot read settings file {file}: {exc.strerror or exc}; check the path "
            f"(given directly or by {CONFIG_FILE_ENV})"
        ) from exc
    data = _parse_json(file, text) if suffix == ".json" else _parse_yaml(file, text)
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigurationError(
            f"settings file {file} must hold a mapping of setting names to values at its "
            f"top level, not a {type(data).__name__}"
        )
    return {str(key): value for key, value in data.items()}


def _parse_json(file: Path, text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError as exc:
        raise ConfigurationError(f"settings file {file} is not valid JSON: {exc}") from exc


def _parse_yaml(file: Path, text: str) -> Any:
    try:
        import yaml
    except ImportError:
        raise ConfigurationError(
            f"settings file {file} is YAML, but pyyaml is not installed: install it "
            "(pip install pyyaml) or write the settings as JSON"
        ) from None
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigurationError(f"settings file {file} is not valid YAML: {exc}") from exc


def describe_errors(
    exc: ValidationError, plan: LoadPlan, known: Mapping[str, Any], accepted: Mapping[str, str]
) -> str:
    """One line per bad setting: where it came from, what is wrong, what is accepted
    (``known``: the settings' names, ``accepted``: what each one accepts)."""
    lines: dict[str, str] = {}
    for error in exc.errors(include_url=False):
        name = str(error["loc"][0]) if error["loc"] else "?"
        if name in lines:
            continue
        source = plan.source_of(name)
        if error["type"] == "extra_forbidden":
            lines[name] = f"{source}: not a setting (known settings: {', '.join(known)})"
            continue
        message = str(error["msg"]).removeprefix("Value error, ")
        shown = repr(error.get("input"))
        shown = shown if len(shown) <= 60 else shown[:57] + "..."
        lines[name] = f"{source} = {shown}: {message}; accepted: {accepted.get(name, '?')}"
    count = len(lines)
    head = f"invalid GIC settings ({count} problem{'s' if count != 1 else ''}):"
    return "\n".join([head, *(f"  - {line}" for line in lines.values())])
