"""Anonymous memory of the running process, for tests that run a child interpreter and
check what it keeps (``from tests.support.memory_probe import anon_kib`` in the child's
script; run it with ``cwd=REPO`` so the package is importable).

Linux only (``/proc/self/status``); stateless and thread-safe.
"""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
"""The repository root: a child's working directory makes ``tests.support`` importable."""


def anon_kib() -> int:
    """``RssAnon`` of this process in KiB: its resident anonymous pages (heap, arenas,
    anonymous mappings), not the file pages it maps."""
    with open("/proc/self/status", encoding="ascii") as status:
        for line in status:
            if line.startswith("RssAnon:"):
                return int(line.split()[1])
    raise RuntimeError("/proc/self/status has no RssAnon line")
