"""Process-wide settings of the operator, given on its command line.

Values are immutable (a frozen dataclass), so handlers may share one instance across
threads.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class OperatorSettings:
    """How the operator runs: the period of its reconcile timers, its kopf peering
    (``None``: standalone), and which namespaces it watches."""

    reconcile_interval_s: float = 5.0
    peering: str | None = "gic-operator"
    namespaces: tuple[str, ...] = ()
    all_namespaces: bool = False
