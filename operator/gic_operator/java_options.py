"""Split a string of JVM options into the arguments Spark hands to ``java``.

``spark.driver.extraJavaOptions`` and ``spark.executor.extraJavaOptions`` are one string
each; Spark splits it into arguments before the JVM sees them, with quotes and escapes
removed, so a check on the string as written is not a check on what the JVM gets
(``-D"spark.x=y"`` becomes ``-Dspark.x=y``, ``-X'mx64g'`` becomes ``-Xmx64g``). Spark has
two splitters, and this module mirrors both, so that a caller can judge every argument
either one produces:

* :func:`launcher_split` mirrors ``org.apache.spark.launcher.CommandBuilderUtils
  .parseOptionString``, which ``spark-submit``'s launcher uses for the driver's JVM (the
  driver runs in client mode in its pod): arguments are separated by runs of Java
  whitespace (``Character.isWhitespace``, :func:`java_whitespace`); single quotes take
  everything literally up to the next single quote; double quotes take everything up to
  the next double quote, except that a backslash takes the next character literally; a
  backslash outside quotes takes the next character literally; ``''`` and ``""`` make an
  empty argument; an unterminated quote or a trailing backslash is an error
  (:class:`OptionSyntaxError`, where Spark throws ``IllegalArgumentException``).
* :func:`executor_split` mirrors ``org.apache.spark.util.Utils.splitCommandString``, with
  which Spark on Kubernetes splits the executors' options into their pods' environment:
  separators are only space, tab, CR and LF; a backslash is special only inside double
  quotes; unterminated quotes end the last argument without an error.

Both work on code points. Java works on UTF-16 units, which differs only for characters
outside the Basic Multilingual Plane; none of those is a quote, a backslash or
whitespace, so the split is the same.

Pure functions; thread-safe.
"""

from __future__ import annotations

import unicodedata

#: Characters ``Character.isWhitespace`` counts besides the Unicode separators.
_JAVA_CONTROL_WHITESPACE = frozenset("\t\n\x0b\x0c\r\x1c\x1d\x1e\x1f")
#: Unicode space separators ``Character.isWhitespace`` does not count (no-break spaces).
_JAVA_NO_BREAK_SPACES = frozenset("\u00a0\u2007\u202f")
#: Separators of ``Utils.splitCommandString``.
_EXECUTOR_SPACES = frozenset(" \t\r\n")


class OptionSyntaxError(ValueError):
    """A string Spark's launcher refuses to split: an unterminated quote or a trailing
    backslash."""


def java_whitespace(char: str) -> bool:
    """Whether Java's ``Character.isWhitespace`` holds for the one character ``char``:
    a Unicode space, line or paragraph separator other than a no-break space, or one of
    tab, LF, VT, FF, CR and the four information separators U+001C..U+001F."""
    if char in _JAVA_CONTROL_WHITESPACE:
        return True
    if char in _JAVA_NO_BREAK_SPACES:
        return False
    return unicodedata.category(char) in ("Zs", "Zl", "Zp")


def launcher_split(text: str) -> list[str]:
    """The arguments ``CommandBuilderUtils.parseOptionString`` makes of ``text`` (see the
    module docstring); raises :class:`OptionSyntaxError` where Spark would throw."""
    out: list[str] = []
    word: list[str] = []
    in_word = single = double = escaped = False
    for char in text:
        if escaped:
            word.append(char)
            escaped = False
        elif char == "\\" and not single:
            escaped = in_word = True
        elif char == "'" and not double:
            single = not single
            in_word = True
        elif char == '"' and not single:
            double = not double
            in_word = True
        elif single or double or not java_whitespace(char):
            word.append(char)
            in_word = True
        elif in_word:
            out.append("".join(word))
            word.clear()
            in_word = False
    if single or double or escaped:
        raise OptionSyntaxError("a trailing backslash" if escaped else "an unterminated quote")
    if in_word:
        out.append("".join(word))
    return out


def executor_split(text: str) -> list[str]:
    """The arguments ``Utils.splitCommandString`` makes of ``text`` (see the module
    docstring); never raises."""
    out: list[str] = []
    word: list[str] = []
    in_word = single = double = False
    chars = iter(text)
    for char in chars:
        if double:
            if char == '"':
                double = False
            elif char == "\\":
                word.append(next(chars, ""))
            else:
                word.append(char)
        elif single:
            if char == "'":
                single = False
            else:
                word.append(char)
        elif char == '"':
            double = in_word = True
        elif char == "'":
            single = in_word = True
        elif char not in _EXECUTOR_SPACES:
            word.append(char)
            in_word = True
        elif in_word:
            out.append("".join(word))
            word.clear()
            in_word = False
    if in_word or single or double:
        out.append("".join(word))
    return out
