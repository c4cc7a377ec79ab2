"""Sticky, balanced placement of state tasks on executors.

A state task (a bucket range) keeps an executor-local copy of its state where it ran
last. Running it anywhere else means restoring the range from storage, so the driver
pins each task to an executor (see docs/architecture.md §13.2) and this module decides
which.

:func:`assign` maps task indices to executors given the previous assignment and the
executors alive now. Rules, in order:

1. a task stays where it is while its executor is alive and not over its share;
2. tasks whose executor is gone (or that are new after a rescale) go to the executors
   with the fewest tasks (ties: the executor named first);
3. when executors joined, tasks move from the most loaded to the least loaded executor,
   one at a time (highest task index first), until the loads differ by at most one.

Invariants (pinned by property tests): the result is balanced (loads differ by at most
one); with an unchanged executor set and task count nothing moves; a task on a
surviving executor moves only to balance a changed executor set; the result depends
only on the inputs (every driver computes the same placement).

Pure functions on values; thread-safe.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

__all__ = ["Placement", "assign", "moved_tasks"]


@dataclass(frozen=True, slots=True)
class Placement:
    """Where each task should run: ``executors[i]`` is task ``i``'s executor ("" means
    no preference: nobody is alive to prefer)."""

    executors: tuple[str, ...]
    moved: tuple[int, ...] = ()
    """Tasks whose executor changed from the previous placement (deliberate moves)."""

    def load(self) -> dict[str, int]:
        """Tasks per executor."""
        out: dict[str, int] = {}
        for name in self.executors:
            if name:
                out[name] = out.get(name, 0) + 1
        return out


def assign(previous: Sequence[str] | None, live: Sequence[str], num_tasks: int) -> Placement:
    """The placement of ``num_tasks`` tasks on the ``live`` executors that moves as few
    tasks as possible from ``previous`` (see the module docstring)."""
    if num_tasks < 0:
        raise ValueError(f"num_tasks must be >= 0, got {num_tasks}")
    alive = sorted(set(live))
    if not alive:
        return Placement(("",) * num_tasks)
    prev = list(previous or ())
    ceiling = -(-num_tasks // len(alive))
    order = {name: i for i, name in enumerate(alive)}
    owner: list[str] = ["" for _ in range(num_tasks)]
    load = dict.fromkeys(alive, 0)
    # 1. stay where alive, up to the ceiling (lower task indices keep their place first)
    for task in range(num_tasks):
        where = prev[task] if task < len(prev) else ""
        if where in load and load[where] < ceiling:
            owner[task] = where
            load[where] += 1
    # 2. homeless tasks to the least loaded executors
    for task in range(num_tasks):
        if not owner[task]:
            target = min(alive, key=lambda n: (load[n], order[n]))
            owner[task] = target
            load[target] += 1
    # 3. even out after executors joined
    while True:
        most = max(alive, key=lambda n: (load[n], -order[n]))
        least = min(alive, key=lambda n: (load[n], order[n]))
        if load[most] - load[least] <= 1:
            break
        task = max(t for t in range(num_tasks) if owner[t] == most)
        owner[task] = least
        load[most] -= 1
        load[least] += 1
    executors = tuple(owner)
    return Placement(executors, moved_tasks(prev, executors))


def moved_tasks(before: Sequence[str], after: Sequence[str]) -> tuple[int, ...]:
    """Tasks that ran (or were placed) somewhere before and somewhere else after."""
    return tuple(
        task
        for task in range(min(len(before), len(after)))
        if before[task] and after[task] and before[task] != after[task]
    )
