"""What the CLI prints from storage cannot drive the terminal: a driver- or
tenant-written text with escape sequences (clear screen, window title, clipboard write)
is shown with its control characters escaped, in lines and in tables alike."""

from __future__ import annotations

import io
from typing import Any

from rich.table import Table

from gic_runtime.cli.common import SafeConsole, terminal_safe
from gic_runtime.errors import GICError
from gic_runtime.status import JobState

HOSTILE = "boom\x1b[2J\x1b]0;owned\x07\x1b]52;c;ZWNobyBoaQ==\x07\r\x9b31m done"


def test_control_characters_are_shown_escaped() -> None:
    assert terminal_safe(HOSTILE) == (
        "boom\\x1b[2J\\x1b]0;owned\\x07\\x1b]52;c;ZWNobyBoaQ==\\x07\\x0d\\x9b31m done"
    )
    assert terminal_safe("two\nlines\tand a tab") == "two\nlines\tand a tab"


def test_a_failure_text_from_storage_reaches_the_terminal_inert(gic: Any, storage: Any) -> None:
    storage.run_job("wc", range(1, 2))
    storage.write_status("wc", JobState.FAILED, failure=GICError(HOSTILE))

    result = gic("checkpoints", "--storage", storage.root, "--job-id", "wc")

    assert result.exit_code == 0, result.stderr
    assert not any(ch in result.stdout for ch in "\x1b\x07\r\x9b")
    assert "boom\\x1b[2J" in result.stdout


def test_tables_and_styles_still_render() -> None:
    out = io.StringIO()
    console = SafeConsole(file=out, force_terminal=True, highlight=False, width=60)
    table = Table()
    table.add_column("error")
    table.add_row(HOSTILE)
    console.print(table)
    console.print("[red]unreadable[/red]", HOSTILE)
    text = out.getvalue()
    assert "\x1b[31m" in text  # our own style reaches the terminal
    assert "\x1b[2J" not in text and "\x1b]" not in text and "\x07" not in text
