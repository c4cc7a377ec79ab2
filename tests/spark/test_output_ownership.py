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
from gic_runtime.sinks.output_owners import read_generations
from gic_runtime.status import read_status
from gic_runtime.storage.uri import StoreResolver

from .cli_runner import clean_env, run_steps
from .words import write_text_batches

REPO = Path(__file__).resolve().parents[2]


def run_commands(tmp_path: Path, work: Path, steps: list[dict[str, Any]]) -> list[dict[str, Any]]:
    done, results = run_steps(
        steps,
        cwd=work,
        scratch=tmp_path,
        env=clean_env(GIC_LOCAL_DIR=str(tmp_path / "local")),
    )
    assert done.returncode == 0, done.stderr[-4000:]
    return results


def word_count(job: str, *extra: str, output: str = "counts") -> list[str]:
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
        output,
    ]


@pytest.mark.slow
def test_a_second_job_cannot_silently_take_an_output_path(tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    (work / "examples").symlink_to(REPO / "examples")
    write_text_batches(work / "text", 2)
    write_text_batches(tmp_path / "news", 1, start=2)  # arrives after the savepoint
    news = [[str(work / "text" / f.name), f.read_text()] for f in (tmp_path / "news").iterdir()]
    results = run_commands(
        tmp_path,
        work,
        [
            {"argv": word_count("payments")},
            {"argv": word_count("payments2")},  # another job, same output: refused
            {"argv": ["savepoint", "--job-id", "payments", "--storage", "data"]},
            # restored from payments' savepoint: it continues that state and its output
            {"argv": word_count("payments-v2", "--restore", "{savepoint}"), "before": news},
            # another job taking the output over on purpose
            {"argv": word_count("payments3", "--take-over-output", "payments-v2")},
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
    # payments wrote generation 0 (batches 0-1); payments-v2 continued its state as
    # generation 1 (batch 2, the new file); payments3 took over as generation 2 and
    # counted all three files from scratch under names of its own.
    store, key = resolver.resolve(out)
    owners = [(g.job_id, g.continues_at) for g in read_generations(store, key + "/")]
    assert owners == [("payments", None), ("payments-v2", 2), ("payments3", None)]
    assert by_generation == {0: [0, 1], 1: [2], 2: [0, 1, 2]}, batches
    # The same input counted from scratch: generation 2 holds what generations 0 and 1
    # hold together, and the reader returns all of it.
    rows = {
        g: sum(
            pq.read_table(work / "counts" / f).num_rows
            for b in batches
            if b.generation == g
            for f in b.files
        )
        for g in (0, 1, 2)
    }
    assert rows[0] + rows[1] == rows[2] > 0
    table = read_file_sink(out, resolver)
    assert table is not None and table.num_rows == rows[0] + rows[1] + rows[2]


@pytest.mark.slow
def test_a_job_resuming_from_its_checkpoints_keeps_its_output(tmp_path: Path) -> None:
    """The same job restarted into another output, where its last checkpoint's batch
    can no longer be published, is refused naming both outputs, with nothing published
    there; restarted into its own output it goes on."""
    work = tmp_path / "work"
    work.mkdir()
    (work / "examples").symlink_to(REPO / "examples")
    write_text_batches(work / "text", 2)
    checkpoints = work / "data" / "jobs" / "payments" / "checkpoints"
    results = run_commands(
        tmp_path,
        work,
        [
            {"argv": word_count("payments")},
            {"argv": word_count("payments", output="elsewhere")},
            {"argv": word_count("payments")},
        ],
    )
    first, moved, again = results
    assert first["code"] == 0, first
    assert moved["code"] != 0, moved
    message = " ".join(moved["stderr"].split())
    assert "resumes from its own checkpoint" in message, message
    assert "counts" in message and "elsewhere" in message, message
    assert committed_batches((work / "elsewhere").resolve().as_uri(), StoreResolver()) == []
    status = read_status(StoreResolver(), (work / "data").resolve().as_uri(), "payments")
    assert status is not None
    assert again["code"] == 0, again
    assert sorted(p.name for p in checkpoints.glob("*.manifest")), "the job went on"
