"""Hypothesis strategies for the parts of a checkpoint manifest that the manifest tests
draw alike (``tests/unit/checkpoint/test_manifest_codec.py``, ``test_manifest_v2.py``):
the manifest's kind with its savepoint information, and its restore lineage."""

from __future__ import annotations

from hypothesis import strategies as st

from gic_runtime.checkpoint import (
    ManifestKind,
    RestoreLineage,
    RestoreMode,
    SavepointFormat,
    SavepointInfo,
    SavepointType,
)


@st.composite
def kinds_and_savepoints(draw: st.DrawFn) -> tuple[ManifestKind, SavepointInfo | None]:
    """Any manifest kind, with a savepoint's type and format when it is a savepoint
    (``None`` for the other kinds)."""
    kind = draw(st.sampled_from(ManifestKind))
    savepoint = None
    if kind is ManifestKind.SAVEPOINT:
        savepoint = SavepointInfo(
            draw(st.sampled_from(SavepointType)), draw(st.sampled_from(SavepointFormat))
        )
    return kind, savepoint


def lineages(source: str) -> st.SearchStrategy[RestoreLineage | None]:
    """No lineage, or a restore from the manifest at ``source`` in any mode."""
    return st.none() | st.builds(
        RestoreLineage,
        st.just(source),
        st.sampled_from(RestoreMode),
        st.integers(0, 10**6),
        st.booleans(),
    )
