"""Named crash points for crash-recovery tests: ``kill -9`` at an exact protocol step.

A process whose environment sets ``GIC_CRASHPOINTS`` (comma-separated ``name@batch``
or ``name`` entries, e.g. ``after_acks@3,before_publish@5``) sends itself SIGKILL when
it reaches a listed point (for the listed batch, or any batch without ``@``). Without
the variable :func:`hit` is a dictionary lookup that does nothing. Production drivers
never set it; the points name the steps of the per-batch protocol where a crash is
hardest to survive:

``after_acks``, ``after_manifest``, ``before_publish`` (driver, per batch);
``savepoint_copy`` (driver, while a savepoint is being written); ``in_task`` (state
task, after processing, before its changelog is durable).
"""

from __future__ import annotations

import os
import signal
from functools import cache

ENV = "GIC_CRASHPOINTS"


@cache
def _points(spec: str) -> frozenset[tuple[str, int | None]]:
    out: set[tuple[str, int | None]] = set()
    for raw in spec.split(","):
        item = raw.strip()
        if not item:
            continue
        name, _, batch = item.partition("@")
        out.add((name, int(batch) if batch else None))
    return frozenset(out)


def hit(name: str, batch_id: int | None = None) -> None:
    """SIGKILL this process if ``name`` (for ``batch_id``) is armed."""
    spec = os.environ.get(ENV)
    if not spec:
        return
    points = _points(spec)
    if (name, None) in points or (batch_id is not None and (name, batch_id) in points):
        os.kill(os.getpid(), signal.SIGKILL)
