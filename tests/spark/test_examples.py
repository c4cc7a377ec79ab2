"""Every example runs exactly as its docstring, the README and docs/operations.md say.

The commands are read from the documents, not copied here: each ``gic run ...`` and
``spark-submit ...`` line of an example's module docstring, and each ``gic run
examples/...`` line of the README and the operations guide. They run one after another
in one working directory (with ``examples/`` linked into it), the way a user would try
them, on small inputs. Placeholders a reader fills in are the only substitutions
(:data:`PLACEHOLDERS`). The ``gic run`` commands run in one process started in that
directory (:mod:`tests.spark.cli_runner`: one JVM for all of them, relative paths resolve as in a
shell); ``spark-submit`` in a process of its own, with the environment's ``bin/`` first
on ``PATH`` (what an activated virtual environment gives).
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession

from gic_runtime.errors import ConfigurationError
from gic_runtime.sinks import read_file_sink
from gic_runtime.spark import GICJob
from gic_runtime.storage.uri import StoreResolver

from .cli_runner import clean_env, run_steps
from .words import write_text_batches

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = sorted((REPO / "examples").glob("*.py"))
DOCS = (REPO / "README.md", REPO / "docs" / "operations.md")
#: What a reader replaces in a documented command, and with what.
PLACEHOLDERS = {
    "s3://bucket/out": "submitted-counts/",  # any output URI; S3 needs credentials
    "gic-data/savepoints/sp-...": "{savepoint}",  # the savepoint a reader took before
}
#: A spark-submit of a query that runs until stopped gets this many batches.
SUBMIT_ENV = {"GIC_MAX_BATCHES": "2"}


def documented(text: str) -> list[str]:
    """The ``gic run`` / ``spark-submit`` commands of ``text``, once each: command lines
    (a line ending in a backslash continues on the next, as in a shell) and inline code
    spans."""
    joined = re.sub(r"\\\n\s*", " ", text)
    lines = [line.strip() for line in joined.splitlines()]
    found = [line for line in lines if re.match(r"(gic run|spark-submit) .*examples/", line)]
    found += re.findall(r"`((?:gic run|spark-submit) [^`]*examples/[^`]*)`", joined)
    return list(dict.fromkeys(found))


def example_commands(path: Path) -> list[str]:
    source = path.read_text()
    docstring = source.split('"""', 2)[1]
    return documented(docstring)


def write_inputs(workdir: Path, command: list[str]) -> None:
    """The input a command reads (``--input DIR``), written once: text for word count,
    JSON lines for the event log."""
    if "--input" not in command:
        return
    directory = workdir / command[command.index("--input") + 1]
    if directory.exists():
        return
    if any(arg.endswith("late_events.py") for arg in command):
        directory.mkdir(parents=True)
        for i in range(2):
            events = [
                {"user": f"u{j % 3}", "ts": f"2026-11-28T12:00:{10 * i + j:02d}Z", "amount": j}
                for j in range(8)
            ]
            (directory / f"spend-{i}.json").write_text(
                "\n".join(json.dumps(e) for e in events) + "\n"
            )
    elif any(arg.endswith("sessions.py") for arg in command):
        directory.mkdir(parents=True)
        for i in range(2):  # a minute apart: the first file's sessions close
            clicks = [{"user": f"u{j}", "ts": f"2026-11-28T12:0{i}:0{j}Z"} for j in range(3)]
            (directory / f"clicks-{i}.json").write_text(
                "\n".join(json.dumps(c) for c in clicks) + "\n"
            )
            os.utime(directory / f"clicks-{i}.json", (1_800_000_000 + i, 1_800_000_000 + i))
    elif any(arg.endswith("windowed_counts.py") for arg in command):
        directory.mkdir(parents=True)
        for i in range(3):  # a minute apart: earlier windows and sessions close
            viewed = [{"page": f"p{j}", "ts": f"2026-11-28T12:0{2 * i}:0{j}Z"} for j in range(3)]
            (directory / f"views-{i}.json").write_text(
                "\n".join(json.dumps(v) for v in viewed) + "\n"
            )
            os.utime(directory / f"views-{i}.json", (1_800_000_000 + i, 1_800_000_000 + i))
    elif any(arg.endswith("dedup.py") for arg in command):
        directory.mkdir(parents=True)
        orders = [{"id": f"o{j % 4}", "ts": f"2026-11-28T12:00:0{j}Z"} for j in range(6)]
        (directory / "orders-0.json").write_text("\n".join(json.dumps(o) for o in orders) + "\n")
    elif any(arg.endswith(("event_log.py", "silent_users.py")) for arg in command):
        directory.mkdir(parents=True)
        for i in range(2):
            events = [{"user": f"u{(i + j) % 5}", "event": f"e{i}-{j}"} for j in range(20)]
            (directory / f"events-{i}.json").write_text(
                "\n".join(json.dumps(e) for e in events) + "\n"
            )
    else:
        write_text_batches(directory, 2)


def filled(line: str, savepoint: str = "") -> list[str]:
    """``line`` with its placeholders filled in, split like a shell does."""
    for placeholder, value in PLACEHOLDERS.items():
        line = line.replace(placeholder, value.format(savepoint=savepoint))
    return shlex.split(line)


def output_rows(workdir: Path, command: list[str]) -> int:
    out = workdir / command[command.index("--output") + 1]
    table = read_file_sink(out.resolve().as_uri(), StoreResolver())
    return 0 if table is None else table.num_rows


def test_every_example_documents_how_to_run_it() -> None:
    assert EXAMPLES
    for path in EXAMPLES:
        commands = example_commands(path)
        assert any(c.startswith("gic run ") for c in commands), path
        for command in commands:
            assert f"examples/{path.name}" in command, (path, command)


def test_the_documents_run_examples_that_exist() -> None:
    for doc in DOCS:
        for command in documented(doc.read_text()):
            script = next(a for a in shlex.split(command) if a.startswith("examples/"))
            assert (REPO / script).is_file(), (doc, command)


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    directory = tmp_path / "work"
    directory.mkdir()
    (directory / "examples").symlink_to(REPO / "examples")
    return directory


def plan(workdir: Path, tmp_path: Path) -> list[dict[str, Any]]:
    """The documented ``gic run`` commands in order (examples' docstrings, then the
    documents), inputs written first; a restore from a savepoint is preceded by a
    ``gic savepoint`` of the job and one new input file."""
    lines = [c for p in EXAMPLES for c in example_commands(p) if c.startswith("gic run ")]
    lines += [c for doc in DOCS for c in documented(doc.read_text())]
    steps: list[dict[str, Any]] = []
    for line in dict.fromkeys(lines):  # a command documented twice runs once
        command = filled(line, "{savepoint}")
        write_inputs(workdir, command)
        before: list[list[str]] = []
        if "--restore" in command:
            # the savepoint the restore line stands for: of the job the documents ran
            steps.append({"argv": ["savepoint", "--job-id", "word-count"], "before": []})
            news = tmp_path / "news"
            write_text_batches(news, 1, start=2)
            inputs = workdir / command[command.index("--input") + 1]
            before = [[str(inputs / f.name), f.read_text()] for f in sorted(news.iterdir())]
        steps.append({"argv": command[1:], "before": before})
    return steps


@pytest.mark.slow
def test_the_documented_gic_run_commands_run_as_written(workdir: Path, tmp_path: Path) -> None:
    steps = plan(workdir, tmp_path)
    done, results = run_steps(
        steps,
        cwd=workdir,
        scratch=tmp_path,
        env=clean_env(GIC_LOCAL_DIR=str(tmp_path / "local")),  # machine-local scratch
    )
    assert done.returncode == 0, done.stderr[-4000:]

    started: dict[str, str] = {}
    for result in results:
        argv = result["argv"]
        assert result["code"] == 0, result
        if argv[0] != "run":
            continue
        starts = re.findall(r"job (\S+) started \(epoch \d+\): (.*)", result["stderr"])
        assert len(starts) == 1, result
        job, origin = starts[0]
        started.setdefault(job, origin)
        if "--job-id" not in argv:
            assert job == Path(argv[1]).stem.replace("_", "-"), argv  # the app's name
        if "--restore" in argv:
            assert origin.startswith(f"restored from {result['savepoint']}"), result
        if not origin.startswith("resuming"):  # a resumed job may find nothing new
            progress = r"^  batch \d+: \d+ rows in, checkpoint \d+ committed in \d+ ms"
            assert re.search(progress, result["stderr"], re.M), result
        if not argv[1].endswith("silent_users.py"):  # alerts need a silence the run lacks
            assert output_rows(workdir, argv) > 0, argv
    assert len([r for r in results if r["argv"][0] == "run"]) == len(
        [s for s in steps if s["argv"][0] == "run"]
    )
    # each example kept its own job: event-log did not resume word-count's checkpoint
    assert started["word-count"] == started["event-log"] == started["rate-count"] == "empty state"
    assert started["late-events"] == started["sessions"] == "empty state"
    assert started["silent-users"] == started["dedup"] == "empty state"
    assert started["windowed-counts"] == started["view-sessions"] == "empty state"
    assert "wc-v2" in started
    first = results[0]["stderr"]
    log = Path(re.search(r"Spark's log: (\S+)", first).group(1))  # type: ignore[union-attr]
    assert log.is_file()  # the JVM's output went there, not to the terminal
    assert "WARN" not in done.stderr and "Exception" not in done.stderr


@pytest.mark.slow
def test_the_documented_spark_submit_commands_run_as_written(workdir: Path, tmp_path: Path) -> None:
    submits = [c for p in EXAMPLES for c in example_commands(p) if c.startswith("spark-submit")]
    assert submits
    bin_dir = str(Path(sys.executable).parent)
    path = f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}"
    # python3 from PATH, as the docstring says
    local = str(tmp_path / "local")  # machine-local scratch of this test only
    env = clean_env(**SUBMIT_ENV, PATH=path, SPARK_LOCAL_IP="127.0.0.1", GIC_LOCAL_DIR=local)
    for line in submits:
        command = filled(line)

        done = subprocess.run(
            command, cwd=workdir, env=env, capture_output=True, text=True, timeout=600, check=False
        )

        assert done.returncode == 0, (line, done.stdout[-2000:], done.stderr[-4000:])
        assert "batch(es)" in done.stdout
        assert output_rows(workdir, command) > 0, line


def test_the_app_name_is_the_job_id_unless_one_is_set(
    spark: SparkSession, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in list(os.environ):
        if name.startswith("GIC_"):
            monkeypatch.delenv(name)

    assert GICJob.create("word-count").settings.job_id == "word-count"
    assert GICJob.create().settings.job_id == "gic-job"
    with pytest.raises(ConfigurationError, match=r"the app name given to GICJob\.create = 'Word"):
        GICJob.create("Word Count")
    monkeypatch.setenv("GIC_JOB_ID", "chosen")
    assert GICJob.create("word-count").settings.job_id == "chosen"
    assert GICJob.create("Word Count").settings.job_id == "chosen"  # the name is not used
