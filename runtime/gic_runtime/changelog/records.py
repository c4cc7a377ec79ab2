"""Change records: what the state backend appends to the changelog.

The changelog works at key-value level, below the value/map/list state API, so replay
is the same for every state kind: apply each record to the bucket's store in sequence
order.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass


class Op(enum.IntEnum):
    """Key-value mutation kinds (stored as one byte; never renumber)."""

    PUT = 1
    """Set ``key`` to ``value``."""
    DELETE = 2
    """Remove ``key`` (no-op if absent)."""
    APPEND = 3
    """Append ``value`` bytes to the value at ``key`` (creating it if absent)."""
    DELETE_PREFIX = 4
    """Remove every key starting with ``key`` (``value`` is empty)."""


@dataclass(frozen=True, slots=True)
class ChangeRecord:
    """One mutation of one bucket, at sequence number ``seq``."""

    seq: int
    op: Op
    key: bytes
    value: bytes = b""
