"""``make run``: the demo job runs end to end and checks itself against a reference."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from gic_runtime.cli import core_demo as demo


def test_demo_runs_all_steps_and_leaves_only_referenced_files(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert demo.main(["--storage", str(tmp_path), "--batches", "4"]) == 0
    out = capsys.readouterr().out
    assert "counts recovered from checkpoint 4" in out
    assert "source released: True" in out
    # At least the crashed checkpoint's changelog segment was swept.
    assert re.search(r"orphan sweep deleted [1-9][0-9]* file\(s\)", out)
    # The savepoint is self-contained under its own directory.
    assert (tmp_path / "savepoints" / "wordcount-sp-1" / "_savepoint.manifest").is_file()


def test_demo_reports_a_bad_storage_uri_in_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert demo.main(["--storage", "ftp://nowhere/x"]) == 1
    assert "unsupported storage URI scheme 'ftp'" in capsys.readouterr().out
