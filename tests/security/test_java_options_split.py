"""GIC splits JVM options exactly as Spark does, so it judges what the JVM will get.

:mod:`gic_operator.java_options` mirrors Spark's two splitters: the launcher's
``CommandBuilderUtils.parseOptionString`` (the driver's options) and
``Utils.splitCommandString`` (the executors'). Pinned here: Spark's own documented
example, that any arguments joined with either splitter's quoting rules split back into
themselves, and that without backslashes and non-ASCII whitespace the launcher's split is
POSIX shell word splitting (:func:`shlex.split`), errors included.
"""

from __future__ import annotations

import shlex

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gic_operator.java_options import (
    OptionSyntaxError,
    executor_split,
    java_whitespace,
    launcher_split,
)

#: Text without surrogates (neither Java nor a pod spec can carry a lone one).
TEXT = st.text(st.characters(exclude_categories=("Cs",)), max_size=12)
#: Separators each splitter takes: the launcher any Java whitespace, executors only these.
LAUNCHER_SPACES = st.sampled_from([" ", "\t", "\n", "\r", "\x0b", "\x0c", "\x1f", "\u2003"])
EXECUTOR_SPACES = st.sampled_from([" ", "\t", "\n", "\r"])


def test_spark_documented_example() -> None:
    assert launcher_split('"ab cd" efgh \'i " j\'') == ["ab cd", "efgh", 'i " j']
    assert executor_split('a "b c" d') == ["a", "b c", "d"]


def test_the_smuggling_forms_of_the_issue_lose_their_quotes() -> None:
    for split in (launcher_split, executor_split):
        assert split('-D"spark.kubernetes.executor.volumes.hostPath.h.mount.path=/x"') == [
            "-Dspark.kubernetes.executor.volumes.hostPath.h.mount.path=/x"
        ]
        assert split("-X'mx64g'") == ["-Xmx64g"]
    assert launcher_split("-Dspark\\.x=1") == ["-Dspark.x=1"]


@pytest.mark.parametrize("text", ["'open", '"open', "trailing\\", "a 'b\" c"])
def test_the_launcher_refuses_what_spark_refuses(text: str) -> None:
    with pytest.raises(OptionSyntaxError):
        launcher_split(text)


def test_java_whitespace_is_javas_not_pythons() -> None:
    assert java_whitespace("\x1c") and java_whitespace("\u2028") and java_whitespace("\u3000")
    assert not java_whitespace("\u00a0") and not java_whitespace("\u202f")
    assert not java_whitespace("\x85")  # NEL: Python's isspace, not Java's
    assert launcher_split("a\u00a0b\x85c") == ["a\u00a0b\x85c"]
    assert executor_split("a\x0bb\u2003c") == ["a\x0bb\u2003c"]


def _launcher_quote(arg: str, style: int) -> str:
    if style == 0 and "'" not in arg:
        return f"'{arg}'"
    if style == 1:
        return '"' + "".join("\\" + c if c in '"\\' else c for c in arg) + '"'
    return "".join("\\" + c for c in arg) if arg else '""'


def _executor_quote(arg: str, style: int) -> str:
    if style == 0 and "'" not in arg:
        return f"'{arg}'"
    return '"' + "".join("\\" + c if c in '"\\' else c for c in arg) + '"'


@given(st.lists(st.tuples(TEXT, st.integers(0, 2), LAUNCHER_SPACES), max_size=6))
def test_launcher_split_inverts_quoting(args: list[tuple[str, int, str]]) -> None:
    joined = "".join(_launcher_quote(arg, style) + space for arg, style, space in args)
    assert launcher_split(joined) == [arg for arg, _, _ in args]


@given(st.lists(st.tuples(TEXT, st.integers(0, 1), EXECUTOR_SPACES), max_size=6))
def test_executor_split_inverts_quoting(args: list[tuple[str, int, str]]) -> None:
    joined = "".join(_executor_quote(arg, style) + space for arg, style, space in args)
    assert executor_split(joined) == [arg for arg, _, _ in args]


@given(st.text(st.sampled_from(["a", "-", "=", ".", "'", '"', " ", "\t", "\n"]), max_size=24))
def test_launcher_split_is_shell_word_splitting_without_backslashes(text: str) -> None:
    try:
        expected: list[str] | None = shlex.split(text)
    except ValueError:
        expected = None
    try:
        got: list[str] | None = launcher_split(text)
    except OptionSyntaxError:
        got = None
    assert got == expected


@given(st.text(max_size=40))
def test_launcher_and_shell_quote_round_trip(text: str) -> None:
    """``shlex.quote`` output (single quotes, ``'"'"'`` for a quote) means the same to
    Spark's launcher: a user may build options with it."""
    args = text.split()
    assert launcher_split(" ".join(shlex.quote(a) for a in args)) == args
