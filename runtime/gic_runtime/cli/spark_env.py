"""What the ``gic`` commands that run Spark locally (``run``, ``demo``) set up first.

* **Interpreter.** Spark's Python workers run ``PYSPARK_PYTHON`` (else ``python3`` from
  ``PATH``), which must import ``gic_runtime`` like the driver does. Unless the user set
  them, ``PYSPARK_PYTHON`` and ``PYSPARK_DRIVER_PYTHON`` are this interpreter
  (``sys.executable``) and ``SPARK_LOCAL_IP`` is ``127.0.0.1``, so ``.venv/bin/gic``
  works without an activated virtual environment.
* **Spark's output.** The JVM's stdout and stderr (start-up lines, Spark's log, Python
  workers' tracebacks) go to one log file (``GIC_SPARK_LOG``, read by
  :func:`gic_runtime.spark.local_spark`) whose path the command prints once; the
  terminal shows GIC's own lines. A user's ``GIC_SPARK_LOG`` wins (``/dev/stderr``
  brings Spark's output back to the terminal).
* **Failures.** :func:`failure_line` turns a job's error into one line that names the
  root cause, says what to do when the workers' interpreter cannot import GIC, and
  where the full log is.
* **Progress.** :func:`progress_lines` prints the runtime's INFO records (job start, one
  line per committed batch, stop) and warnings on stderr while a job runs.

Importing this module imports neither pyspark nor the Spark integration.
Thread-safety: :func:`process_state` and :func:`progress_lines` change process globals
(environment, ``sys.argv``, ``sys.path``, logging); one command at a time.
"""

from __future__ import annotations

import logging
import os
import sys
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

from rich.console import Console

from gic_runtime.logs import progress_line

#: Read by :func:`gic_runtime.spark.local_spark` (kept equal to its ``SPARK_LOG_ENV``).
SPARK_LOG_ENV = "GIC_SPARK_LOG"
INTERPRETER_ENV = ("PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON")


def interpreter_env(environ: Mapping[str, str] = os.environ) -> dict[str, str]:
    """The variables to add so Spark's Python is this interpreter and binds locally;
    variables already in ``environ`` are left to the user."""
    env = {name: sys.executable for name in INTERPRETER_ENV if name not in environ}
    if "SPARK_LOCAL_IP" not in environ:
        env["SPARK_LOCAL_IP"] = "127.0.0.1"
    return env


def spark_log_path(directory: Path, name: str, environ: Mapping[str, str] = os.environ) -> Path:
    """The JVM's log file: ``GIC_SPARK_LOG`` if set, else ``<directory>/<name>``."""
    given = environ.get(SPARK_LOG_ENV)
    return Path(given) if given else directory.absolute() / name


def new_log_name(stem: str) -> str:
    """A log file name for one run: ``<stem>-<UTC yyyymmdd-hhmmss>-<pid>.log``."""
    return f"{stem}-{time.strftime('%Y%m%d-%H%M%S', time.gmtime())}-{os.getpid()}.log"


@contextmanager
def process_state(
    env: Mapping[str, str], argv: list[str] | None = None, path0: str | None = None
) -> Iterator[None]:
    """Run the body with ``env`` added to the environment (and ``sys.argv`` /
    ``sys.path[0]`` set when given); everything is restored afterwards, including
    variables the body added."""
    saved_env = dict(os.environ)
    saved_argv = sys.argv[:]
    saved_path = sys.path[:]
    os.environ.update(env)
    if argv is not None:
        sys.argv = argv
    if path0 is not None:
        sys.path.insert(0, path0)
    try:
        yield
    finally:
        for name in set(os.environ) - set(saved_env):
            del os.environ[name]
        for name, value in saved_env.items():
            if os.environ.get(name) != value:
                os.environ[name] = value
        sys.argv = saved_argv
        sys.path[:] = saved_path


def failure_line(message: str, log: Path | None) -> str:
    """``message`` (a job's error) with what to do when Spark's Python workers could not
    import a module, and where Spark's full log is (when Spark wrote one)."""
    text = " ".join(message.split())
    if "No module named" in text:
        python = os.environ.get("PYSPARK_PYTHON", "python3")
        text += (
            f"; Spark's Python workers run {python} (PYSPARK_PYTHON), which must import "
            f"gic_runtime and the job's modules: point PYSPARK_PYTHON at an interpreter "
            f"with gic installed (this one is {sys.executable}) or unset it"
        )
    if log is not None and log.is_file():
        text += f" (Spark's log: {log})"
    return text


class _ConsoleHandler(logging.Handler):
    """Log records as plain lines on a console (:func:`~gic_runtime.logs.progress_line`,
    indented under the command's header)."""

    def __init__(self, console: Console) -> None:
        super().__init__(logging.INFO)
        self.console = console

    def emit(self, record: logging.LogRecord) -> None:
        text = progress_line(record)
        self.console.print(f"  {text}", markup=False, highlight=False, soft_wrap=True)


@contextmanager
def progress_lines(console: Console, logger: str = "gic_runtime") -> Iterator[None]:
    """Print ``logger``'s INFO and higher records on ``console`` while the body runs."""
    target = logging.getLogger(logger)
    handler = _ConsoleHandler(console)
    level = target.level
    target.addHandler(handler)
    target.setLevel(logging.INFO)
    try:
        yield
    finally:
        target.removeHandler(handler)
        target.setLevel(level)
