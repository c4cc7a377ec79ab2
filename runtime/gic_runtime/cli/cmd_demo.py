"""``gic demo``: the project's main job on embedded defaults (what ``make run`` runs).

Imports the Spark integration only when invoked, like ``gic run``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from gic_runtime.cli.common import CLIError

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
    from gic_runtime.spark.demo import run_demo

    if not run_demo(directory):
        raise CLIError("a demo check failed (see above)")
    return 0
