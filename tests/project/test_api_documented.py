"""Every public name of ``gic_runtime.spark`` is documented: its ``__all__`` and, for each
class there, the public methods, properties, dataclass fields and the attributes its
``__init__`` sets. A member counts as documented when README.md or docs/operations.md
(or docs/architecture.md) names it qualified, in backticks: `` `KeyState.batch_id` ``,
`` `GICJob.create(...)` ``; a module-level name when it appears in backticks."""

from __future__ import annotations

import ast
import dataclasses
import inspect
import re
import textwrap
from pathlib import Path

import gic_runtime.spark as api

ROOT = Path(__file__).resolve().parents[2]
DOCS = ("README.md", "docs/operations.md", "docs/architecture.md")


def _init_attributes(cls: type) -> list[str]:
    """Public attributes ``cls.__init__`` assigns (``self.name = ...``)."""
    init = cls.__dict__.get("__init__")
    if init is None or dataclasses.is_dataclass(cls):  # a dataclass's are its fields
        return []
    tree = ast.parse(textwrap.dedent(inspect.getsource(init)))
    names: list[str] = []
    for node in ast.walk(tree):
        targets: list[ast.expr] = []
        if isinstance(node, ast.Assign):
            targets = list(node.targets)
        elif isinstance(node, ast.AnnAssign):
            targets = [node.target]
        for target in targets:
            for t in target.elts if isinstance(target, ast.Tuple) else [target]:
                if (
                    isinstance(t, ast.Attribute)
                    and isinstance(t.value, ast.Name)
                    and t.value.id == "self"
                    and not t.attr.startswith("_")
                    and t.attr not in names
                ):
                    names.append(t.attr)
    return names


def public_names() -> list[str]:
    names: list[str] = []
    for name in api.__all__:
        names.append(name)
        obj = getattr(api, name)
        if not inspect.isclass(obj):
            continue
        members: list[str] = []
        if dataclasses.is_dataclass(obj):
            members += [f.name for f in dataclasses.fields(obj)]
        members += [a for a in vars(obj) if not a.startswith("_")]
        members += _init_attributes(obj)
        names += [f"{name}.{m}" for m in dict.fromkeys(members)]
    return names


def documented(text: str, name: str) -> bool:
    """``name`` in backticks, optionally called: `` `name` ``, `` `name(...)` ``."""
    return re.search(rf"`{re.escape(name)}(?:\(|`)", text) is not None


def test_the_public_names_are_found() -> None:
    names = public_names()
    assert "KeyState.batch_id" in names
    assert "GICJob.create" in names and "BatchReport.commit_ms" in names
    assert "RunSummary.last_checkpoint" in names


def test_every_public_name_of_the_spark_api_is_documented() -> None:
    text = "\n".join((ROOT / doc).read_text(encoding="utf-8") for doc in DOCS)
    missing = [n for n in public_names() if not documented(text, n)]
    assert missing == [], f"not documented in {', '.join(DOCS)}: {missing}"
