"""``gic`` commands run one after another in one Python process, as a user types them.

One process means one JVM for all of them; it starts in the given working directory, so
relative paths resolve as in a user's shell. A step is ``{"argv": [...], "before":
[[path, text], ...]}`` (files written before it runs, in that order, each with a later
modification time than the one before); ``{savepoint}`` in an argument is
the path the last ``gic savepoint`` printed. Every step runs, also after one failed;
each result holds its argv, exit code, stdout, stderr and the savepoint path then known.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

RUNNER = """
import io, json, re, sys
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path
from gic_runtime.cli import main

import os, time
results, savepoint, stamp = [], "", 0
for step in json.loads(Path(sys.argv[1]).read_text()):
    for path, text in step.get("before", []):
        Path(path).write_text(text)
        # file sources take files in modification-time order: make it the write order
        stamp = max(stamp + 10_000_000, time.time_ns())
        os.utime(path, ns=(stamp, stamp))
    argv = [arg.replace("{savepoint}", savepoint) for arg in step["argv"]]
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        try:
            code = main(argv)
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 1
    found = re.search(r"path\\s+(\\S+)", out.getvalue())
    if argv[0] == "savepoint" and found:
        savepoint = found.group(1)
    results.append({"argv": argv, "code": code, "stdout": out.getvalue(),
                    "stderr": err.getvalue(), "savepoint": savepoint})
Path(sys.argv[2]).write_text(json.dumps(results))
"""


def clean_env(**extra: str) -> dict[str, str]:
    """This environment without GIC settings or Spark interpreter choices."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("GIC_") and k not in ("PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON")
    }
    return {**env, **extra}


def run_steps(
    steps: Sequence[Mapping[str, Any]], *, cwd: Path, scratch: Path, env: dict[str, str]
) -> tuple[subprocess.CompletedProcess[str], list[dict[str, Any]]]:
    """Run ``steps`` (see the module docstring) in ``cwd``; the process and the results
    (empty when the process failed before writing them). ``scratch`` holds the plan."""
    plan, out = scratch / "plan.json", scratch / "out.json"
    plan.write_text(json.dumps(list(steps)))
    done = subprocess.run(
        [sys.executable, "-c", RUNNER, str(plan), str(out)],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    results: list[dict[str, Any]] = json.loads(out.read_text()) if out.is_file() else []
    return done, results
