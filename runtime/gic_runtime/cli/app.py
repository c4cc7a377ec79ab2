"""The ``gic`` command: local runs, savepoints, checkpoint inspection and storage GC.

::

    gic run APP.py [-- app args]     run a job locally on local Spark
    gic savepoint [--stop]           take a savepoint (through the driver, or offline)
    gic jobs [--json]                the jobs under the storage root
    gic checkpoints [--json]         retained checkpoints, status, pending requests
    gic savepoints [--json]          savepoints under the root (or of one job)
    gic describe ID|PATH [--json]    what a checkpoint or savepoint holds, who owns it
    gic state KEY [--from ID|PATH]   one key's state, without Spark
    gic gc [--dry-run] [--force]     orphan sweep of the job's directory
    gic demo                         the word-count demo (make run)
    gic --version                    the installed version

Error contract (:class:`GICGroup`): a :class:`~gic_runtime.errors.GICError` ends the
command with one red line ``error: <message>`` on stderr and exit status 1 (or the
error's ``exit_code``); a usage error (bad option, bad value) with one such line and
status 2. No traceback unless ``GIC_DEBUG=1``. Other exceptions are bugs and keep their
traceback.

Importing this module imports neither pyspark nor the Spark integration: ``gic run``
leaves that to the app, so inspection commands work where Spark is not installed.

Thread-safety: the app object is built once at import and only read afterwards.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from importlib import metadata
from typing import Annotated, Any

import typer
from typer.core import TyperGroup

from gic_runtime.cli import (
    cmd_checkpoints,
    cmd_demo,
    cmd_describe,
    cmd_gc,
    cmd_jobs,
    cmd_run,
    cmd_savepoint,
    cmd_savepoints,
    cmd_state,
)
from gic_runtime.cli.common import debug_enabled, print_error
from gic_runtime.errors import GICError

USAGE_EXIT = 2


class GICGroup(TyperGroup):
    """Typer's group with the error contract of the module docstring."""

    def main(
        self,
        args: Sequence[str] | None = None,
        prog_name: str | None = None,
        complete_var: str | None = None,
        standalone_mode: bool = True,
        windows_expand_args: bool = True,
        **extra: Any,
    ) -> Any:
        code = self._run(args, prog_name, complete_var, windows_expand_args, **extra)
        if not standalone_mode:
            return code
        sys.exit(code)

    def _run(
        self,
        args: Sequence[str] | None,
        prog_name: str | None,
        complete_var: str | None,
        windows_expand_args: bool,
        **extra: Any,
    ) -> int:
        try:
            rv = super().main(
                args,
                prog_name,
                complete_var,
                standalone_mode=False,
                windows_expand_args=windows_expand_args,
                **extra,
            )
        except typer.TyperException as exc:
            # Usage errors (exit status 2) carry the context of the command they concern.
            code = int(getattr(exc, "exit_code", 1))
            ctx = getattr(exc, "ctx", None)
            hint = f" (see: {ctx.command_path} --help)" if code == USAGE_EXIT and ctx else ""
            print_error(exc.format_message().replace("Value error, ", "") + hint)
            return code
        except typer.Abort:
            print_error("aborted")
            return 1
        except GICError as exc:
            if debug_enabled():
                raise
            print_error(str(exc))
            return int(getattr(exc, "exit_code", 1))
        return rv if isinstance(rv, int) else 0


app = typer.Typer(
    cls=GICGroup,
    name="gic",
    help="GIC: generalized incremental checkpoints for Spark Structured Streaming.",
    no_args_is_help=False,
    add_completion=False,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)


def version() -> str:
    """The installed version of the ``gic`` distribution (``unknown`` when it runs from
    a source tree that was never installed)."""
    try:
        return metadata.version("gic")
    except metadata.PackageNotFoundError:
        return "unknown"


def _print_version(value: bool) -> None:
    if value:
        print(f"gic {version()}")
        raise typer.Exit()


@app.callback()
def _options(
    show_version: Annotated[
        bool,
        typer.Option(
            "--version",
            callback=_print_version,
            is_eager=True,
            help="Print the installed version and exit.",
        ),
    ] = False,
) -> None:
    """GIC: generalized incremental checkpoints for Spark Structured Streaming."""


app.command("run", help=cmd_run.HELP)(cmd_run.run)
app.command("savepoint", help=cmd_savepoint.HELP)(cmd_savepoint.savepoint)
app.command("jobs", help=cmd_jobs.HELP)(cmd_jobs.jobs)
app.command("checkpoints", help=cmd_checkpoints.HELP)(cmd_checkpoints.checkpoints)
app.command("savepoints", help=cmd_savepoints.HELP)(cmd_savepoints.savepoints)
app.command("describe", help=cmd_describe.HELP)(cmd_describe.describe)
app.command("state", help=cmd_state.HELP)(cmd_state.state)
app.command("gc", help=cmd_gc.HELP)(cmd_gc.gc)
app.command("demo", help=cmd_demo.HELP)(cmd_demo.demo)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``gic`` console script; returns the exit status."""
    command = typer.main.get_command(app)
    result = command.main(args=argv, prog_name="gic", standalone_mode=False)
    return result if isinstance(result, int) else 0
