"""Sticky, balanced placement of state tasks on executors (spark.assignment)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from gic_runtime.spark.assignment import assign, moved_tasks

_names = st.lists(
    st.integers(0, 30).map(lambda i: f"executor_10.0.0.{i}_{i}"),
    min_size=1,
    max_size=8,
    unique=True,
)
_tasks = st.integers(0, 40)


def _balanced(executors: tuple[str, ...], live: list[str]) -> bool:
    load = dict.fromkeys(live, 0)
    for name in executors:
        load[name] += 1
    return max(load.values()) - min(load.values()) <= 1


@given(live=_names, n=_tasks)
def test_a_first_placement_is_balanced_and_round_robin(live: list[str], n: int) -> None:
    placement = assign(None, live, n)
    assert len(placement.executors) == n
    assert set(placement.executors) <= set(live)
    assert _balanced(placement.executors, live)
    assert placement.moved == ()
    ordered = sorted(live)
    assert placement.executors == tuple(ordered[i % len(ordered)] for i in range(n))


@given(live=_names, n=_tasks)
def test_nothing_moves_while_the_executors_stay(live: list[str], n: int) -> None:
    first = assign(None, live, n)
    again = assign(first.executors, list(reversed(live)), n)
    assert again.executors == first.executors
    assert again.moved == ()


@given(live=_names, n=_tasks, data=st.data())
def test_losing_an_executor_moves_only_its_tasks(
    live: list[str], n: int, data: st.DataObject
) -> None:
    before = assign(None, live, n)
    if len(live) < 2:
        return
    lost = data.draw(st.sampled_from(live))
    survivors = [x for x in live if x != lost]
    after = assign(before.executors, survivors, n)
    assert _balanced(after.executors, survivors)
    assert set(after.moved) == {t for t in range(n) if before.executors[t] == lost}
    assert lost not in after.executors


@given(live=_names, joined=_names, n=_tasks)
def test_executors_that_join_take_tasks_only_to_even_out(
    live: list[str], joined: list[str], n: int
) -> None:
    before = assign(None, live, n)
    grown = sorted(set(live) | set(joined))
    after = assign(before.executors, grown, n)
    assert _balanced(after.executors, grown)
    new = set(grown) - set(live)
    assert all(after.executors[t] in new for t in after.moved)
    # the fewest moves that balance: each old executor gives up only its excess
    ceiling = -(-n // len(grown))
    floor = n // len(grown)
    old_load = {x: before.executors.count(x) for x in live}
    assert len(after.moved) <= sum(max(0, load - floor) for load in old_load.values())
    assert all(after.executors.count(x) <= ceiling for x in grown)


@given(live=_names, n=_tasks, m=_tasks)
def test_a_rescale_keeps_surviving_task_indices_in_place_when_balanced(
    live: list[str], n: int, m: int
) -> None:
    before = assign(None, live, n)
    after = assign(before.executors, live, m)
    assert len(after.executors) == m
    assert _balanced(after.executors, live)


def test_no_live_executor_means_no_preference() -> None:
    placement = assign(["executor_h_1", "executor_h_2"], [], 3)
    assert placement.executors == ("", "", "")
    assert placement.moved == ()


def test_a_negative_task_count_is_refused() -> None:
    try:
        assign(None, ["executor_h_1"], -1)
    except ValueError as exc:
        assert "num_tasks" in str(exc)
    else:
        raise AssertionError("a negative task count was accepted")


def test_moved_tasks_ignores_tasks_without_a_place() -> None:
    assert moved_tasks(["a", "", "b"], ["a", "c", "c"]) == (2,)
    assert moved_tasks(["a"], ["b", "c"]) == (0,)
