"""Two jobs and one output path, as a user meets it with ``gic run``.

The same word-count job started under a second job id, into the first one's output
directory, used to commit its checkpoints and publish none of its batches (the first
job's commit markers stood under the same batch ids), without a word. Now the second
job is refused before its first batch, naming both jobs; a job restored from the
owner's savepoint keeps writing there; and a deliberate takeover works and keeps the
earlier output readable. The commands run in one Python process (one JVM), like the
documents' commands in ``test_examples.py``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from gic_runtime.sinks import committed_batches, read_file_sink
from gic_runtime.sinks.ownership import read_generations
from gic_runtime.status import read_status
from gic_runtime.storage.uri import StoreResolver

from .words import write_text_batches

REPO = Path(__file__).resolve().parents[2]

RUNNER = """
import io, json, re, sys
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path
from gic_runtime.cli import main

results, savepoint = [], ""
for argv in json.loads(Path(sys.argv[1]).read_text()):
    argv = [arg.replace("{savepoint}", savepoint) for arg in argv]
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
                    "stderr": err.getvalue()})
Path(sys.argv[2]).write_text(json.dumps(results))
"""


def run_commands(tmp_path: Path, work: Path, commands: list[list[str]]) -> list[dict[str, Any]]:
    (tmp_path / "plan.json").write_text(json.dumps(commands))
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("GIC_") and k not in ("PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON")
    }
    env["GIC_LOCAL_DIR"] = str(tmp_path / "local")
    done = subprocess.run(
        [sys.executable, "-c", RUNNER, str(tmp_path / "plan.json"), str(tmp_path / "out.json")],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    results: list[dict[str, Any]] = json.loads((tmp_path / "out.json").read_text())
    return results


def word_count(job: str, *extra: str) -> list[str]:
    return [
        "run",
        "examples/word_count.py",
        "--job-id",
        job,
        "--storage",
        "data",
        *extra,
        "--",
        "--input",
        "text",
        "--output",
        "counts",
    ]


@pytest.mark.slow
def test_a_second_job_cannot_silently_take_an_output_path(tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    (work / "examples").symlink_to(REPO / "examples")
    write_text_batches(work / "text", 2)
    results = run_commands(
        tmp_path,
        work,
        [
            word_count("payments"),
            word_count("payments2"),  # another job, same output: refused
            ["savepoint", "--job-id", "payments", "--storage", "data"],
            word_count("payments-v2", "--restore", "{savepoint}"),  # continues the state
            word_count("payments3", "--take-over-output", "payments-v2"),  # on purpose
        ],
    )
    first, refused, savepoint, restored, taken = results
    assert first["code"] == 0, first
    out = (work / "counts").resolve().as_uri()
    resolver = StoreResolver()

    assert refused["code"] != 0, refused
    message = " ".join(refused["stderr"].split())
    assert "belongs to job payments" in message, message
    assert "Give job payments2 an output path of its own" in message
    assert "--take-over-output payments" in message
    storage = (work / "data").resolve().as_uri()
    status = read_status(resolver, storage, "payments2")
    assert status is not None and status.failure is not None
    assert status.failure.reason == "OutputOwned"
    assert not any((work / "data" / "jobs" / "payments2" / "checkpoints").glob("*.manifest"))

    assert savepoint["code"] == 0, savepoint
    assert restored["code"] == 0, restored
    assert taken["code"] == 0, taken
    batches = committed_batches(out, resolver)
    by_generation: dict[int, list[int]] = {}
    for batch in batches:
        by_generation.setdefault(batch.generation, []).append(batch.batch_id)
    # payments wrote generation 0; payments-v2 continued it as generation 1 (a restore
    # from a savepoint of payments' last checkpoint finds no new input, so it may have
    # published nothing); payments3 took over as the next generation and published its
    # own batches under names of their own.
    store, key = resolver.resolve(out)
    owners = [(g.job_id, g.continues_at) for g in read_generations(store, key + "/")]
    assert owners[0] == ("payments", None)
    assert owners[1][0] == "payments-v2" and owners[1][1] is not None  # it continues
    assert owners[2] == ("payments3", None)  # it takes over, earlier output kept
    assert sorted(by_generation[0]) == [0, 1], batches
    assert sorted(by_generation[2]) == [0, 1], batches
    # The same input counted from scratch twice: generation 2 holds what generation 0
    # holds, and the reader returns both.
    rows = {
        g: sum(
            pq.read_table(work / "counts" / f).num_rows
            for b in batches
            for f in b.files
            if b.generation == g
        )
        for g in (0, 2)
    }
    assert rows[0] == rows[2] > 0
    table = read_file_sink(out, resolver)
    assert table is not None and table.num_rows == rows[0] + rows[2]
