"""Named crash points for crash-recovery tests: ``kill -9`` at an exact protocol step.

A process whose environment sets ``GIC_CRASHPOINTS`` (comma-separated ``name@batch``
or ``name`` entries, e.g. ``after_acks@3,before_publish@5``) sends itself SIGKILL when
it reaches a listed point (for the listed batch, or any batch without ``@``). Without
the variable :func:`hit` is a dictionary lookup that does nothing. Production drivers
never set it; the points name the steps of the per-batch protocol where a crash is
hardest to survive:

``after_acks``, ``after_manifest``, ``before_publish`` (driver, per batch);
``manifest_put`` (driver, after every fence check of a checkpoint, right before its
manifest's create-if-absent PUT); ``savepoint_copy`` (driver, while a savepoint is
being written); ``in_task`` (state task, after processing, before its changelog is
durable).

The same points can *hold* instead of kill: ``GIC_HOLDPOINTS`` (same syntax) makes the
process stop at a listed point until a test releases it, which is how a test delays a
step past something another process does (e.g. a manifest PUT that lands after a newer
launch claimed the job). A held process creates ``<GIC_HOLD_DIR>/<name>@<batch>.held``
(``<name>.held`` without a batch), then waits until ``<name>@<batch>.release`` exists
in the same directory, and continues. It kills itself after ``GIC_HOLD_TIMEOUT_S``
(default 300) seconds without a release, so a held process never outlives its test.
"""

from __future__ import annotations

import os
import signal
import time
from functools import cache
from pathlib import Path

ENV = "GIC_CRASHPOINTS"
HOLD_ENV = "GIC_HOLDPOINTS"
HOLD_DIR_ENV = "GIC_HOLD_DIR"
HOLD_TIMEOUT_ENV = "GIC_HOLD_TIMEOUT_S"
_HOLD_POLL_S = 0.02


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


def _armed(spec: str | None, name: str, batch_id: int | None) -> bool:
    if not spec:
        return False
    points = _points(spec)
    return (name, None) in points or (batch_id is not None and (name, batch_id) in points)


def hit(name: str, batch_id: int | None = None) -> None:
    """SIGKILL this process if ``name`` (for ``batch_id``) is armed; hold it there if
    it is armed as a hold point (see the module docstring)."""
    if _armed(os.environ.get(ENV), name, batch_id):
        os.kill(os.getpid(), signal.SIGKILL)
    if _armed(os.environ.get(HOLD_ENV), name, batch_id):
        _hold(name, batch_id)


def hold_file(directory: str | os.PathLike[str], name: str, batch_id: int | None) -> Path:
    """The file a process held at ``name`` (for ``batch_id``) creates while it waits."""
    label = name if batch_id is None else f"{name}@{batch_id}"
    return Path(directory) / f"{label}.held"


def release_file(directory: str | os.PathLike[str], name: str, batch_id: int | None) -> Path:
    """The file that releases a process held at ``name`` (for ``batch_id``)."""
    return hold_file(directory, name, batch_id).with_suffix(".release")


def _hold(name: str, batch_id: int | None) -> None:
    directory = os.environ.get(HOLD_DIR_ENV) or "."
    timeout = float(os.environ.get(HOLD_TIMEOUT_ENV) or 300.0)
    release = release_file(directory, name, batch_id)
    hold_file(directory, name, batch_id).write_text(str(os.getpid()))
    deadline = time.monotonic() + timeout
    while not release.exists():
        if time.monotonic() > deadline:
            os.kill(os.getpid(), signal.SIGKILL)
        time.sleep(_HOLD_POLL_S)
