"""Without ``--job-id`` (nor ``GIC_JOB_ID`` or a settings file naming one), a command that
acts on one job uses the only job under the storage root: with several it lists them, with
none it says so."""

from __future__ import annotations

from typing import Any


def test_checkpoints_without_job_id_shows_the_only_job(gic: Any, storage: Any) -> None:
    storage.run_job("word-count", range(1, 3))

    result = gic("checkpoints", "--storage", storage.root)

    assert result.exit_code == 0, result.stderr
    assert f"checkpoints of job word-count ({storage.root}):" in result.stdout
    assert gic.json("checkpoints", "--storage", storage.root)["job_id"] == "word-count"


def test_the_other_job_commands_use_the_only_job_too(gic: Any, storage: Any) -> None:
    storage.run_job("word-count", range(1, 3))

    described = gic.json("describe", "latest", "--storage", storage.root)
    assert (described["job_id"], described["checkpoint_id"]) == ("word-count", 2)
    swept = gic.json("gc", "--dry-run", "--storage", storage.root)
    assert swept["job_id"] == "word-count"
    saved = gic("savepoint", "--storage", storage.root)
    assert saved.exit_code == 0, saved.stderr
    assert "from the latest checkpoint" in saved.stdout
    assert "checkpoint  2" in saved.stdout  # word-count's latest


def test_several_jobs_are_listed_and_none_is_picked(gic: Any, storage: Any) -> None:
    storage.run_job("word-count", range(1, 2))
    storage.run_job("event-log", range(1, 2))

    for command in (["checkpoints"], ["describe", "latest"], ["gc"], ["savepoint"]):
        result = gic(*command, "--storage", storage.root)

        assert result.exit_code == 1, command
        assert result.stdout == ""
        assert gic.errors(result) == [
            f"error: {storage.root} holds 2 jobs (event-log, word-count): name one with "
            "--job-id (or GIC_JOB_ID)"
        ]


def test_an_empty_root_says_there_are_no_jobs(gic: Any, storage: Any) -> None:
    result = gic("checkpoints", "--storage", storage.root)

    assert result.exit_code == 1
    assert gic.errors(result) == [
        f"error: no jobs under {storage.root} yet: check --storage (or GIC_STORAGE), or run "
        "a job there first"
    ]


def test_a_job_named_by_the_environment_is_not_replaced(gic: Any, storage: Any) -> None:
    storage.run_job("word-count", range(1, 2))

    result = gic("checkpoints", "--storage", storage.root, env={"GIC_JOB_ID": "gic-job"})

    assert result.exit_code == 1
    [line] = gic.errors(result)
    assert line.startswith(f"error: no job 'gic-job' under {storage.root} (jobs there: word-count)")
