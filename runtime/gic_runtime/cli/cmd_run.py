"""``gic run APP.py``: run a GIC job locally, in this process, on local Spark.

Order of work, so bad input fails before Spark starts (which takes seconds):

1. the app file must exist;
2. settings are loaded and validated (:meth:`GICSettings.load` with the command's
   options as overrides; an error names the option);
3. PySpark must be importable (it is not imported here: the app imports it);
4. the settings are exported as ``GIC_*`` variables (every setting, unset ones as empty
   values, so the app's :meth:`GICJob.create <gic_runtime.spark.GICJob.create>` sees
   exactly these; ``GIC_JOB_ID`` only when a source named the job, otherwise the app's
   name is its id), plus the interpreter and Spark log of
   :mod:`gic_runtime.cli.spark_env` (``PYSPARK_PYTHON`` = this interpreter unless set;
   the JVM's output goes to a log file under the local directory, printed once);
5. the app runs with :func:`runpy.run_path` as ``__main__``, ``sys.argv = [app, *args]``
   and its directory first on ``sys.path``, like ``python APP.py args``; the runtime's
   progress (job start, one line per committed batch, stop) is printed on stderr.

The environment, ``sys.argv``, ``sys.path`` and logging are restored afterwards. The
app's ``SystemExit`` code becomes the command's exit code; a GIC error (a failed batch,
a Python worker that cannot import GIC) ends it with one line naming the root cause and
Spark's log.

Thread-safety: mutates process globals (environment, argv, path); one run at a time.
"""

from __future__ import annotations

import importlib.util
import runpy
from pathlib import Path
from typing import Annotated

import typer

from gic_runtime.cli.common import (
    CLIError,
    ConfigOpt,
    StorageOpt,
    load_settings,
    print_error,
    stderr_console,
)
from gic_runtime.cli.spark_env import (
    SPARK_LOG_ENV,
    failure_line,
    interpreter_env,
    new_log_name,
    process_state,
    progress_lines,
    spark_log_path,
)
from gic_runtime.config import GICSettings, env_var
from gic_runtime.errors import GICError

HELP = """Run a GIC job (a PySpark app using gic_runtime.spark) locally, in this process.

Settings come from the options here, then GIC_* environment variables, the settings
file, and defaults; they are validated before Spark starts and passed to the app as
GIC_* variables. Arguments after -- go to the app:

  gic run examples/word_count.py --job-id wc -- --input text/ --output word-counts/
"""

AppArg = Annotated[
    str, typer.Argument(metavar="APP", help="The job's Python file.", show_default=False)
]
AppArgs = Annotated[
    list[str] | None,
    typer.Argument(metavar="APP_ARGS", help="Arguments for the app, after --.", show_default=False),
]
RestoreOpt = Annotated[
    str | None,
    typer.Option(
        "--restore",
        help="Checkpoint manifest or savepoint (URI or path) to start from, when the job "
        "has no checkpoint of its own yet.",
        show_default=False,
    ),
]
RestoreModeOpt = Annotated[
    str | None,
    typer.Option(
        "--restore-mode",
        metavar="claim|no-claim",
        help="claim: the job owns the source's files from now on; no-claim (default): it "
        "never deletes them and stops referencing them after its first checkpoint.",
        show_default=False,
    ),
]
TakeoverOpt = Annotated[
    str | None,
    typer.Option(
        "--take-over-output",
        metavar="JOB",
        help="Take the transactional output over from job JOB, its owner now (an output "
        "path belongs to one job's state; JOB's committed batches stay readable).",
        show_default=False,
    ),
]
JobIdOpt = Annotated[
    str | None,
    typer.Option(
        "--job-id",
        help="Job id (its directory is <storage>/jobs/<job-id>). Default: GIC_JOB_ID, the "
        "settings file, else the name the app gives GICJob.create.",
        show_default=False,
    ),
]
MaxBatchesOpt = Annotated[
    int | None,
    typer.Option("--max-batches", help="Stop after this many micro-batches.", show_default=False),
]
BucketsOpt = Annotated[
    int | None,
    typer.Option(
        "--buckets", help="Key buckets (fixed for the life of the state).", show_default=False
    ),
]
LocalDirOpt = Annotated[
    str | None,
    typer.Option(
        "--local-dir", help="Directory for executor-local state copies.", show_default=False
    ),
]


def app_environment(settings: GICSettings, log: Path) -> dict[str, str]:
    """The variables the app runs with: every setting (unset ones empty; the job id only
    when a source gave it), the interpreter and local-IP defaults, and the Spark log."""
    env = settings.to_env()
    for name in type(settings).model_fields:
        env.setdefault(env_var(name), "")
    if "job_id" not in settings.model_fields_set:
        del env[env_var("job_id")]  # GICJob.create names the job after the app
    env.update(interpreter_env())
    env[SPARK_LOG_ENV] = str(log)
    return env


def _log_path(settings: GICSettings, app: Path) -> Path:
    local = Path(settings.resolved_local_dir)
    return spark_log_path(local / "logs", new_log_name(app.stem))


def run(
    app: AppArg,
    app_args: AppArgs = None,
    *,
    storage: StorageOpt = None,
    job_id: JobIdOpt = None,
    config: ConfigOpt = None,
    restore: RestoreOpt = None,
    restore_mode: RestoreModeOpt = None,
    max_batches: MaxBatchesOpt = None,
    buckets: BucketsOpt = None,
    local_dir: LocalDirOpt = None,
    take_over_output: TakeoverOpt = None,
) -> None:
    path = Path(app).expanduser()
    if not path.is_file():
        what = "is a directory, not a file" if path.is_dir() else "does not exist"
        raise CLIError(
            f"job file {app} {what}: pass the path of the job's Python file, e.g. "
            "gic run examples/word_count.py -- --input text/ --output word-counts/"
        )
    if restore_mode is not None and restore is None:
        raise CLIError(
            "--restore-mode was given without --restore: name the checkpoint or savepoint "
            "to restore from with --restore, or leave out --restore-mode"
        )
    settings = load_settings(
        config,
        storage=storage,
        job_id=job_id,
        restore_source=restore,
        restore_mode=restore_mode,
        max_batches=max_batches,
        num_buckets=buckets,
        local_dir=local_dir,
        output_takeover=take_over_output,
    )
    if importlib.util.find_spec("pyspark") is None:
        raise CLIError(
            "gic run needs PySpark, which is not installed in this environment: install "
            "it with pip install 'gic[spark]'"
        )
    log = _log_path(settings, path)
    env = app_environment(settings, log)
    restore_text = (
        f", restore {settings.restore_source} ({settings.restore_mode.value})"
        if settings.restore_source
        else ""
    )
    job = settings.job_id if "job_id" in settings.model_fields_set else "named after the app"
    console = stderr_console()
    console.print(
        f"gic run: job {job}, storage {settings.storage}{restore_text}; Spark's log: {log}",
        markup=False,
        soft_wrap=True,
    )
    resolved = path.resolve()
    argv = [str(path), *(app_args or [])]
    try:
        with process_state(env, argv, str(resolved.parent)), progress_lines(console):
            runpy.run_path(str(resolved), run_name="__main__")
    except SystemExit as exc:
        code = exc.code
        if code is None or code == 0:
            return
        if isinstance(code, int):
            raise typer.Exit(code) from None
        print_error(str(code))
        raise typer.Exit(1) from None
    except GICError as exc:
        raise CLIError(failure_line(str(exc), log)) from exc
    except Exception:
        where = f"; Spark's log: {log}" if log.is_file() else ""
        print_error(f"the app {app} raised an exception (traceback below){where}")
        raise
