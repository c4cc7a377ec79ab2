"""Kubernetes-style conditions and RFC 3339 times for status records.

:func:`set_condition` keeps ``lastTransitionTime`` stable while a condition's status stays
the same (only reason and message are refreshed), which is what ``kubectl wait
--for=condition=...`` and humans expect. Conditions are plain JSON dicts (camelCase), as
they appear in a status patch.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from gic_operator.models.base import ConditionStatus

#: Latest time :func:`rfc3339` writes (the end of year 9999); later ones are clamped.
MAX_TIME = 253402300799.0


def rfc3339(ts: float) -> str:
    """``ts`` (seconds since the epoch) as ``YYYY-MM-DDTHH:MM:SSZ``. A time outside
    1970..9999 (or not a number: a driver may report anything) is clamped into it."""
    if not math.isfinite(ts):
        ts = MAX_TIME if ts > 0 else 0.0
    ts = min(max(ts, 0.0), MAX_TIME)
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_time(text: str | None) -> float | None:
    """Seconds since the epoch of an RFC 3339 time, or ``None`` for ``None``/garbage."""
    if not text:
        return None
    try:
        return datetime.fromisoformat(str(text).replace("Z", "+00:00")).timestamp()
    except (ValueError, OverflowError):
        return None


def find_condition(conditions: Sequence[Mapping[str, Any]], type_: str) -> Mapping[str, Any] | None:
    """The condition of ``type_``, or ``None``."""
    for condition in conditions:
        if condition.get("type") == type_:
            return condition
    return None


def set_condition(
    conditions: Sequence[Mapping[str, Any]],
    type_: str,
    status: bool | None,
    reason: str,
    message: str,
    *,
    now: float,
    generation: int | None = None,
) -> list[dict[str, Any]]:
    """A new list with condition ``type_`` set; ``status`` None means Unknown."""
    value = (
        ConditionStatus.UNKNOWN
        if status is None
        else (ConditionStatus.TRUE if status else ConditionStatus.FALSE)
    )
    text = value.value
    old = find_condition(conditions, type_)
    changed = old is None or old.get("status") != text
    condition: dict[str, Any] = {
        "type": type_,
        "status": text,
        "reason": reason,
        "message": message,
        "lastTransitionTime": rfc3339(now)
        if changed
        else (old or {}).get("lastTransitionTime", rfc3339(now)),
    }
    if generation is not None:
        condition["observedGeneration"] = generation
    out = [dict(c) for c in conditions if c.get("type") != type_]
    out.append(condition)
    out.sort(key=lambda c: str(c.get("type")))
    return out
