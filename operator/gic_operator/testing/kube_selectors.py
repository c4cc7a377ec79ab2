"""Label and field selectors of LIST and WATCH requests, parsed once and matched many times.

Label selectors: comma-separated requirements, all of which must hold: ``key=value``,
``key==value``, ``key!=value``, ``key in (a,b)``, ``key notin (a,b)``, ``key`` (exists)
and ``!key`` (does not exist). ``!=`` and ``notin`` also hold when the key is absent, as
in Kubernetes.

Field selectors: comma-separated ``path=value``, ``path==value`` or ``path!=value`` on
dotted paths into the object (``metadata.name``, ``metadata.namespace``,
``status.phase``, ``spec.nodeName``); a missing field reads as the empty string. A real
API server accepts only a few paths per kind; this one accepts any.

Thread-safety: selectors are immutable after parsing.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from gic_operator.testing.kube_errors import bad_request

_Check = Callable[[Mapping[str, str]], bool]
_KEY = r"[A-Za-z0-9]([-A-Za-z0-9_./]*[A-Za-z0-9])?"
_SET_RE = re.compile(rf"^\s*({_KEY})\s+(in|notin)\s+\(([^)]*)\)\s*$")
_CMP_RE = re.compile(rf"^\s*({_KEY})\s*(==|!=|=)\s*([-A-Za-z0-9_.]*)\s*$")
_EXISTS_RE = re.compile(rf"^\s*(!?)\s*({_KEY})\s*$")


def _split_requirements(text: str) -> list[str]:
    """Split at commas that are not inside parentheses."""
    parts: list[str] = []
    depth = 0
    current = ""
    for char in text:
        if char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
        if char == "," and depth == 0:
            parts.append(current)
            current = ""
        else:
            current += char
    parts.append(current)
    return [part for part in parts if part.strip()]


def _requirement(text: str) -> _Check:
    if match := _SET_RE.match(text):
        key, op, values_text = match.group(1), match.group(3), match.group(4)
        values = frozenset(v.strip() for v in values_text.split(",") if v.strip())
        if op == "in":
            return lambda labels: key in labels and labels[key] in values
        return lambda labels: key not in labels or labels[key] not in values
    if match := _CMP_RE.match(text):
        key, op, value = match.group(1), match.group(3), match.group(4)
        if op == "!=":
            return lambda labels: labels.get(key) != value
        return lambda labels: key in labels and labels[key] == value
    if match := _EXISTS_RE.match(text):
        negate, key = match.group(1) == "!", match.group(2)
        if negate:
            return lambda labels: key not in labels
        return lambda labels: key in labels
    raise bad_request(f"unable to parse requirement: {text.strip()!r}")


@dataclass(frozen=True)
class LabelSelector:
    """A parsed label selector; the empty selector matches everything."""

    text: str
    checks: tuple[_Check, ...]

    @classmethod
    def parse(cls, text: str | None) -> LabelSelector:
        """Parse the ``labelSelector`` query parameter (None or empty: match all)."""
        text = text or ""
        return cls(text, tuple(_requirement(part) for part in _split_requirements(text)))

    def matches(self, obj: Mapping[str, Any]) -> bool:
        """Whether the object's labels satisfy every requirement."""
        labels = (obj.get("metadata") or {}).get("labels") or {}
        return all(check(labels) for check in self.checks)


def _field_value(obj: Mapping[str, Any], path: str) -> str:
    node: Any = obj
    for part in path.split("."):
        if not isinstance(node, Mapping) or part not in node:
            return ""
        node = node[part]
    if isinstance(node, bool):
        return "true" if node else "false"
    return "" if node is None else str(node)


@dataclass(frozen=True)
class FieldSelector:
    """A parsed field selector: (path, equal?, value) terms, all of which must hold."""

    text: str
    terms: tuple[tuple[str, bool, str], ...]

    @classmethod
    def parse(cls, text: str | None) -> FieldSelector:
        """Parse the ``fieldSelector`` query parameter (None or empty: match all)."""
        text = text or ""
        terms = []
        for part in _split_requirements(text):
            match = re.match(r"^\s*([A-Za-z0-9_.]+)\s*(==|!=|=)\s*(.*?)\s*$", part)
            if match is None:
                raise bad_request(f"invalid field selector: {part.strip()!r}")
            terms.append((match.group(1), match.group(2) != "!=", match.group(3)))
        return cls(text, tuple(terms))

    def matches(self, obj: Mapping[str, Any]) -> bool:
        """Whether the object's fields satisfy every term."""
        return all((_field_value(obj, path) == value) == equal for path, equal, value in self.terms)

    def names(self) -> tuple[str | None, str | None]:
        """The ``metadata.namespace`` and ``metadata.name`` required by equality terms."""
        wanted: dict[str, str] = {p: v for p, eq, v in self.terms if eq}
        return wanted.get("metadata.namespace"), wanted.get("metadata.name")
