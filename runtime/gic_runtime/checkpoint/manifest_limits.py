"""How much of a manifest a reader decodes: bytes, JSON values, buckets, references.

A manifest is written by a driver, which runs the tenant's code, so its reader bounds
not only the bytes it reads but what they decode into. :class:`ManifestLimits` holds
the bounds one reader applies:

* ``max_bytes``: a larger file is refused before it is downloaded;
* ``max_values``: an upper bound on the JSON values of the body (every ``[``, ``{``,
  ``:`` and ``,`` byte can start at most one value, :func:`json_value_bound`), counted
  on the raw bytes *before* parsing, so the parser never allocates more than that many
  objects whatever the body holds (long lists of object names, handles, buckets);
* ``max_buckets``: bucket entries of one manifest (the runtime's largest bucket count);
* ``max_references``: distinct objects a reader collects from a job's retained
  manifests together (the operator's orphan sweep keeps that set, one manifest decoded
  at a time).

Every bound a manifest breaks is a :class:`~gic_runtime.errors.CorruptFileError`
naming the file (:class:`~gic_runtime.errors.ObjectTooLargeError` for ``max_bytes``).

:data:`DRIVER_LIMITS` is what the runtime (drivers, the CLI) reads with: it admits
every manifest a driver may write. :data:`OPERATOR_LIMITS` is far smaller: the operator
is shared by every tenant, so what one tenant's driver wrote must not take its memory
(the chart gives it 512Mi); the operator's settings may change it.

Invariant: a reader applying limits ``L`` never parses a body of more than
``L.max_bytes`` bytes or ``L.max_values`` JSON values. Immutable; thread-safe.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from gic_runtime.errors import CorruptFileError

_VALUE_STARTS: Final = (b"[", b"{", b":", b",")


@dataclass(frozen=True, slots=True)
class ManifestLimits:
    """The bounds one reader applies to the manifests it decodes (module docstring)."""

    max_bytes: int
    max_values: int
    max_buckets: int
    max_references: int

    def __post_init__(self) -> None:
        for name in ("max_bytes", "max_values", "max_buckets", "max_references"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"ManifestLimits.{name} must be a positive integer, got {value!r}")


DRIVER_LIMITS: Final = ManifestLimits(
    max_bytes=64 * 1024 * 1024,
    max_values=32_000_000,
    max_buckets=32_768,
    max_references=4_000_000,
)
"""What the runtime reads and what a driver may write (``write_manifest`` refuses more):
64 MiB per manifest (real ones: 638 KB for 128 buckets x 200 handles in format v2, about
135,000 JSON values), 32 million values (no v2 manifest within 64 MiB comes near: a
value takes two bytes at least), 32,768 buckets (the most a job may have)."""

OPERATOR_LIMITS: Final = ManifestLimits(
    max_bytes=8 * 1024 * 1024,
    max_values=1_000_000,
    max_buckets=32_768,
    max_references=100_000,
)
"""What the operator reads by default: 8 MiB and a million JSON values per manifest
(about 7 times the largest benchmarked manifest; decoding one takes well under 100 MiB),
and 100,000 distinct objects referenced by a job's retained manifests together (4 times
the largest benchmarked state)."""


def json_value_bound(payload: bytes) -> int:
    """An upper bound on the JSON values (keys included) ``payload`` parses into: one
    for the top level plus one per ``[``, ``{``, ``:`` and ``,`` byte (bytes inside
    strings count too, so it never undercounts). Reads the bytes, allocates nothing."""
    return 1 + sum(payload.count(start) for start in _VALUE_STARTS)


def check_value_bound(payload: bytes, limits: ManifestLimits, *, what: str, uri: str) -> None:
    """Raise :class:`CorruptFileError` naming ``uri`` when ``payload`` may parse into more
    than ``limits.max_values`` JSON values (checked before it is parsed)."""
    bound = json_value_bound(payload)
    if bound > limits.max_values:
        raise CorruptFileError(
            f"{what} body may hold up to {bound} JSON values, more than the "
            f"{limits.max_values} this reader decodes, so it was not parsed; a manifest "
            "that large names far more objects, handles or buckets than a job keeps: "
            "inspect the file (another process wrote it, or it was damaged)",
            uri=uri,
        )
