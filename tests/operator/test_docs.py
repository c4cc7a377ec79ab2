"""docs/operations.md keeps up with the operator: every resource field, phase, state, CLI
option, metric and Event reason the code defines is named there.

The checks look for each name in backticks (`` `spec.checkpointing.storage` ``), so a
field added to a model, a new option or a new Event fails here until it is documented.
A pod template is one shape used by the driver and the executors: it is documented once,
its fields named relative to it (`` `podTemplate.volumes[].name` ``).
"""

from __future__ import annotations

import ast
import types
from collections.abc import Iterator
from enum import Enum
from pathlib import Path
from typing import Any, Union, get_args, get_origin

import pytest
from pydantic import BaseModel

from gic_operator.jobs.job_policy import GENERIC_FAILURE
from gic_operator.main import build_parser
from gic_operator.models import (
    Condition,
    GICJobSpec,
    GICJobStatus,
    JobPhase,
    PodTemplate,
    SavepointSpec,
    SavepointState,
    SavepointStatus,
)
from gic_operator.operator_metrics import OperatorMetrics
from gic_runtime.status import FailureReason

ROOT = Path(__file__).resolve().parents[2]
DOC = (ROOT / "docs" / "operations.md").read_text(encoding="utf-8")
OPERATOR = ROOT / "operator" / "gic_operator"


#: Shapes documented once, not under every field that uses them.
SHARED: tuple[type[BaseModel], ...] = (Condition, PodTemplate)


def _nested_models(annotation: Any) -> tuple[list[type[BaseModel]], bool]:
    """The models inside ``annotation`` (``X``, ``X | None``, ``list[X]``, a union of
    models such as ``status.pending``'s actions) and whether they are list items.
    Conditions are a standard Kubernetes shape, documented as one field."""
    origin = get_origin(annotation)
    if origin in (Union, types.UnionType):
        models: list[type[BaseModel]] = []
        in_list = False
        for arg in get_args(annotation):
            found, listed = _nested_models(arg)
            models += [m for m in found if m not in models]
            in_list = in_list or listed
        return models, in_list
    if origin is list:
        found, _ = _nested_models(get_args(annotation)[0])
        return found, True
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return ([] if annotation in SHARED else [annotation]), False
    return [], False


def field_paths(model: type[BaseModel], prefix: str) -> Iterator[str]:
    """Every field of ``model`` as its path in a manifest (camelCase, ``[]`` for lists);
    a field shared by several members of a union once."""
    seen: set[str] = set()
    for name, info in model.model_fields.items():
        path = f"{prefix}.{info.alias or name}"
        yield path
        nested, in_list = _nested_models(info.annotation)
        for member in nested:
            for sub in field_paths(member, path + ("[]" if in_list else "")):
                if sub not in seen:
                    seen.add(sub)
                    yield sub


def test_union_members_are_all_documented_fields() -> None:
    """Every action in ``status.pending`` contributes its fields."""
    paths = set(field_paths(GICJobStatus, "status"))
    for field in ("kind", "due", "epoch", "mode", "requestId", "requested", "targetGeneration"):
        assert f"status.pending.{field}" in paths


@pytest.mark.parametrize(
    ("model", "prefix"),
    [
        (GICJobSpec, "spec"),
        (GICJobStatus, "status"),
        (SavepointSpec, "spec"),
        (SavepointStatus, "status"),
        (PodTemplate, "podTemplate"),
    ],
    ids=["gicjob-spec", "gicjob-status", "savepoint-spec", "savepoint-status", "pod-template"],
)
def test_every_field_is_documented(model: type[BaseModel], prefix: str) -> None:
    missing = [path for path in field_paths(model, prefix) if f"`{path}`" not in DOC]
    assert missing == [], f"docs/operations.md lacks fields {missing}"


@pytest.mark.parametrize("enum", [JobPhase, SavepointState])
def test_every_phase_and_state_is_documented(enum: type[Enum]) -> None:
    missing = [m.value for m in enum if f"`{m.value}`" not in DOC]
    assert missing == []


def test_every_cli_option_is_documented() -> None:
    options = [
        option
        for action in build_parser()._actions
        for option in action.option_strings
        if option not in ("-h", "--help")
    ]
    assert options, "the parser has options"
    missing = [option for option in options if f"`{option}" not in DOC]
    assert missing == []


def test_every_metric_is_documented() -> None:
    names = []
    for family in OperatorMetrics().registry.collect():
        names.append(family.name + ("_total" if family.type == "counter" else ""))
    assert len(names) == 7
    missing = [name for name in names if f"`{name}`" not in DOC]
    assert missing == []


def _event_reasons() -> set[str]:
    """Reasons of every ``*.event(..., "Normal"|"Warning", "Reason", ...)`` call with a
    literal reason in the operator's modules (test support excluded)."""
    reasons: set[str] = set()
    for path in sorted(OPERATOR.rglob("*.py")):
        if "testing" in path.relative_to(OPERATOR).parts:
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
                continue
            if node.func.attr != "event":
                continue
            values = [a.value if isinstance(a, ast.Constant) else None for a in node.args]
            for index, value in enumerate(values[:-1]):
                if value in ("Normal", "Warning") and isinstance(values[index + 1], str):
                    reasons.add(str(values[index + 1]))
    return reasons


def test_every_event_reason_is_documented() -> None:
    reasons = _event_reasons()
    assert {"DriverLaunched", "SavepointDisposed"} <= reasons, "the scan finds events"
    # Built at run time from the action's name in job_actions._savepoint_failed.
    reasons |= {"UpgradeFailed", "SuspendFailed"}
    missing = sorted(r for r in reasons if f"| `{r}` |" not in DOC)
    assert missing == []


def test_every_driver_failure_reason_is_documented() -> None:
    """The reasons a driver records (status record, §9) are Event reasons and Ready
    reasons on a GICJob (§14.6); the generic one is the operator's."""
    reasons = [r.value for r in FailureReason]
    assert "QueryMismatch" in reasons
    missing = [r for r in reasons if DOC.count(f"| `{r}` |") < 2]
    assert missing == [], "each needs a row in the status record's and the Events' tables"
    assert f"| `{GENERIC_FAILURE}` |" in DOC
