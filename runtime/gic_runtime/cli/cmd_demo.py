"""``gic demo``: the project's main job on embedded defaults (what ``make run`` runs).

Imports the Spark integration only when invoked, like ``gic run``, and runs it with this
interpreter for Spark's Python workers unless ``PYSPARK_PYTHON`` is set (see
:mod:`gic_runtime.cli.spark_env`), so ``.venv/bin/gic demo`` works without an activated
environment. Spark's output goes to ``<dir>/spark.log``; a failed job ends the command
with one line naming its root cause and that log.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from gic_runtime.cli.common import CLIError, stdout_console
from gic_runtime.cli.spark_env import failure_line, interpreter_env, process_state
from gic_runtime.errors import GICError

HELP = (
    "Run the word-count example on local Spark with GIC checkpoints on local storage: "
    "stop it with a savepoint, start a second job from the savepoint (no-claim), and "
    "check that state carried over and the savepoint was released."
)


def demo(
    directory: Annotated[
        Path, typer.Option("--dir", help="Working directory (replaced on every run).")
    ] = Path("gic-demo"),
) -> int:
    with process_state(interpreter_env()):
        from gic_runtime.spark.word_count_demo import run_demo, spark_log

        try:
            ok = run_demo(directory, stdout_console())
        except GICError as exc:
            raise CLIError(failure_line(str(exc), spark_log(directory))) from exc
    if not ok:
        raise CLIError("a demo check failed (see above)")
    return 0
