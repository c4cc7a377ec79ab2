"""What every ``gic`` command shares: the job options, settings, consoles and formatting.

Every command takes ``--storage``, ``--job-id`` and ``--config``; unset options fall back
to :meth:`GICSettings.load <gic_runtime.config.GICSettings.load>` (environment
``GIC_STORAGE`` / ``GIC_JOB_ID``, the file ``GIC_CONFIG_FILE`` names, then defaults; a
job id no source names is the only job under the root for the commands that act on one
job, :func:`gic_runtime.cli.inventory.open_existing_job`). A settings error names the
command-line option that was wrong, not the setting.

Errors reach the user as one line ``error: <message>`` on stderr (see
:func:`error_line`); secrets from the environment are masked in it. Results go to
stdout, progress (spinners, bars) to stderr, so ``--json`` output can be piped.

Thread-safety: stateless helpers; consoles are created per call (they follow whatever
``sys.stdout`` / ``sys.stderr`` are at that time).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.text import Text

from gic_runtime.config import GICSettings
from gic_runtime.errors import ConfigurationError, GICError
from gic_runtime.status import JobState, JobStatus
from gic_runtime.storage.local import LocalObjectStore
from gic_runtime.storage.uri import StorageURI, StoreResolver

DEBUG_ENV = "GIC_DEBUG"

#: A status record younger than this (seconds) in a live state means a driver may be
#: running: a driver refreshes its record after every batch and state change and at least
#: every ``gic_runtime.spark.telemetry.HEARTBEAT_S`` seconds, so a live one is rarely silent
#: this long; an older record belongs to a driver that died without saying so (kill -9).
FRESH_S = 120.0
LIVE_STATES = frozenset({JobState.STARTING, JobState.RUNNING, JobState.STOPPING})

#: Environment variables whose values never appear in output.
_SECRET_ENV = (
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
    "AWS_ACCESS_KEY_ID",
    "GIC_CONTROL_KEY",  # a job's control key (gic_runtime.control.auth)
)

#: Command-line option of each setting the CLI sets, for error messages.
OPTION_OF: dict[str, str] = {
    "storage": "--storage",
    "job_id": "--job-id",
    "restore_source": "--restore",
    "restore_mode": "--restore-mode",
    "max_batches": "--max-batches",
    "num_buckets": "--buckets",
    "local_dir": "--local-dir",
    "output_takeover": "--take-over-output",
}

StorageOpt = Annotated[
    str | None,
    typer.Option(
        "--storage",
        help="Storage root URI (s3://bucket/prefix, file:///path or a local path). "
        "Default: GIC_STORAGE, the settings file, else ./gic-data.",
        show_default=False,
    ),
]
JobIdOpt = Annotated[
    str | None,
    typer.Option(
        "--job-id",
        help="Job id (its directory is <storage>/jobs/<job-id>). Default: GIC_JOB_ID, the "
        "settings file, else the only job under the storage root.",
        show_default=False,
    ),
]
ConfigOpt = Annotated[
    Path | None,
    typer.Option(
        "--config",
        help="Settings file (JSON or YAML). Default: GIC_CONFIG_FILE.",
        show_default=False,
        dir_okay=False,
    ),
]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print one JSON document instead of tables.")]


class CLIError(GICError):
    """A command cannot do what was asked; ``exit_code`` is the process exit status."""

    def __init__(self, message: str, *, exit_code: int = 1) -> None:
        super().__init__(message)
        self.exit_code = exit_code


@dataclass(frozen=True, slots=True)
class JobContext:
    """The settings a command runs with and a resolver for their storage."""

    settings: GICSettings
    resolver: StoreResolver

    @property
    def root(self) -> str:
        return self.settings.storage

    @property
    def job_id(self) -> str:
        return self.settings.job_id


def load_settings(config: Path | None = None, **overrides: Any) -> GICSettings:
    """:meth:`GICSettings.load` with ``overrides`` (``None`` = not given); errors name
    the command-line options instead of the settings."""
    try:
        return GICSettings.load(file=config, **overrides)
    except ConfigurationError as exc:

        def option(match: re.Match[str]) -> str:
            name = match.group(1)
            return f"option {OPTION_OF[name]}" if name in OPTION_OF else match.group(0)

        raise ConfigurationError(re.sub(r"argument (\w+)", option, str(exc))) from None


def make_resolver(root: str) -> StoreResolver:
    """A resolver for objects under ``root`` and anywhere else. S3 settings are read from
    the environment only when an ``s3://`` URI is first used.

    An existing local root gets a store of its own, so listed objects are named exactly
    as manifests name them (``file:///...``); a missing one is not created by a
    read-only command.
    """
    resolver = StoreResolver()
    loc = StorageURI.parse(root)
    if loc.scheme == "file" and Path(loc.path).is_dir():
        resolver.register(LocalObjectStore(loc.path))
    return resolver


def to_uri(path: str) -> str:
    """A storage URI for ``path``: URIs stay as they are (without a trailing slash),
    local paths become absolute ``file://`` URIs."""
    text = path.strip()
    if not text:
        raise ConfigurationError("an empty path was given: pass a URI or a local path")
    if "://" in text:
        return str(StorageURI.parse(text))
    return Path(os.path.abspath(Path(text).expanduser())).as_uri()


# --- output ------------------------------------------------------------------------------


#: Width of tables on a stdout that is not a terminal (and ``COLUMNS`` is unset).
PIPED_WIDTH = 200


_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def terminal_safe(text: str) -> str:
    """``text`` without terminal control characters: each (ESC, BEL, CR, C1 codes, ...;
    not newline or tab) is shown as its escape, e.g. ``\\x1b``. Text read from storage
    is written by drivers and tenants; printed as is, an escape sequence could clear the
    screen, retitle the window or write the clipboard."""
    return _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", text)


class SafeConsole(Console):
    """A console that never passes control characters of the text it renders to the
    terminal (:func:`terminal_safe`); its own styles still reach it. Every string it
    renders, printed or in a table cell, goes through :meth:`render_str`."""

    def render_str(self, text: str, **kwargs: Any) -> Text:
        return super().render_str(terminal_safe(text), **kwargs)


def stdout_console() -> Console:
    """The console for results. When stdout is not a terminal (piped, captured), text
    lines are never wrapped, so a printed command or path stays on one line, and tables
    get :data:`PIPED_WIDTH` columns (``COLUMNS`` wins) instead of rich's 80."""
    console = SafeConsole(highlight=False)
    if not console.is_terminal:
        console.soft_wrap = True
        if not os.environ.get("COLUMNS"):
            console.width = PIPED_WIDTH
    return console


def stderr_console() -> Console:
    return SafeConsole(stderr=True, highlight=False)


def debug_enabled() -> bool:
    return os.environ.get(DEBUG_ENV, "").strip().lower() not in ("", "0", "false", "no")


def redact(text: str) -> str:
    """``text`` with the values of credential environment variables masked."""
    for name in _SECRET_ENV:
        value = os.environ.get(name)
        if value and len(value) >= 4:
            text = text.replace(value, "***")
    return text


def error_line(message: str) -> str:
    """``message`` as one line (whitespace runs, newlines included, become one space)."""
    return " ".join(redact(message).split())


def print_error(message: str) -> None:
    """Print ``error: <message>`` as one red line on stderr."""
    console = SafeConsole(stderr=True, highlight=False, soft_wrap=True)
    console.print(f"error: {error_line(message)}", style="red", markup=False)


def iso(ts: float | None, *, millis: bool = False) -> str | None:
    """UTC ISO-8601 time of ``ts`` (seconds since the epoch), ``Z`` suffixed."""
    if ts is None:
        return None
    text = datetime.fromtimestamp(ts, UTC).isoformat(
        timespec="milliseconds" if millis else "seconds"
    )
    return text.replace("+00:00", "Z")


def human_bytes(size: int | None) -> str:
    """``1536`` -> ``1.5 KiB``."""
    if size is None:
        return "-"
    value = float(size)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if value < 1024 or unit == "TiB":
            return f"{size} B" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")


def ago(ts: float, now: float) -> str:
    """``ts`` relative to ``now``: ``12 s ago``."""
    seconds = max(0.0, now - ts)
    if seconds < 120:
        return f"{seconds:.0f} s ago"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min ago"
    return f"{seconds / 3600:.1f} h ago"


def driver_looks_alive(status: JobStatus | None, now: float) -> bool:
    """Whether a driver may still be running the job whose status record is ``status``:
    a live state (starting, running, stopping) refreshed less than :data:`FRESH_S` ago.
    ``gic gc`` refuses to sweep then; ``gic savepoint`` asks the driver instead of
    taking the savepoint offline."""
    return status is not None and status.state in LIVE_STATES and now - status.updated_at < FRESH_S
