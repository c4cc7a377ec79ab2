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

from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from gic_runtime.sinks import committed_batches, read_file_sink
from gic_runtime.sinks.ownership import read_generations
from gic_runtime.status import read_status
from gic_runtime.storage.uri import StoreResolver

from .cli_runner import clean_env, run_steps
from .words import write_text_batches

REPO = Path(__file__).resolve().parents[2]


def run_commands(tmp_path: Path, work: Path, commands: list[list[str]]) -> list[dict[str, Any]]:
    done, results = run_steps(
        [{"argv": argv} for argv in commands],
        cwd=work,
        scratch=tmp_path,
        env=clean_env(GIC_LOCAL_DIR=str(tmp_path / "local")),
    )
    assert done.returncode == 0, done.stderr[-4000:]
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
