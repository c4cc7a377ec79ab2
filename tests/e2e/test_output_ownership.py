"""One manifest applied in two namespaces: the second job may not take the first's output.

Each GICJob gets state of its own (its job id is ``<namespace>.<name>``), but a manifest
copied into another namespace names the same output path. The second job used to commit
checkpoints and publish nothing (the first job's commit markers stood under its batch
ids). Now its driver refuses before its first batch, and the operator shows the refusal
like any other: phase Failed, the Ready reason ``OutputOwned``, a Warning Event, and no
restarts until the spec changes; ``spec.output.takeOverFrom`` is that change.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack
from typing import Any

import pytest

from gic_runtime.sinks import committed_batches

from .cluster import Cluster
from .controlplane_backend import ControlPlaneBackend
from .helpers import checkpoint_id, wait_checkpoints, wait_running

JOB = "shared"


@pytest.fixture(scope="module")
def two(e2e_backend: Any) -> Iterator[tuple[Cluster, Cluster]]:
    if not isinstance(e2e_backend, ControlPlaneBackend):
        pytest.fail("this module opens a second namespace on the test control plane")
    with ExitStack() as stack:
        first = stack.enter_context(e2e_backend.open("e2e-output-a"))
        second = stack.enter_context(e2e_backend.open("e2e-output-b"))
        yield first, second


def manifest(cluster: Cluster, path: str, **extra_spec: Any) -> dict[str, Any]:
    """The GICJob ``shared`` writing to ``path`` (``extra_spec`` merged into the spec)."""
    body = cluster.job_manifest(JOB, extra_spec=extra_spec or None)
    args: list[str] = body["spec"]["application"]["arguments"]
    args[args.index("--output") + 1] = path
    return body


def test_the_same_manifest_in_another_namespace_is_refused_not_silently_empty(
    two: tuple[Cluster, Cluster],
) -> None:
    first, second = two
    output = first.output_uri(JOB)  # one path, as a copied manifest has it
    first.apply(manifest(first, output))
    wait_running(first, JOB)
    owner = f"{first.namespace}.{JOB}"

    second.apply(manifest(second, output))
    second.wait(f"gicjob/{JOB}", "jsonpath={.status.phase}=Failed", 240)
    status = second.status("gicjob", JOB)
    assert f"belongs to job {owner}" in status["message"], status
    assert "not restarted" in status["message"]
    ready = next(c for c in status["conditions"] if c["type"] == "Ready")
    assert (ready["status"], ready["reason"]) == ("False", "OutputOwned")
    assert "OutputOwned" in second.event_reasons(JOB)
    assert status.get("restarts", 0) == 0
    assert "lastCheckpoint" not in status  # it refused before its first batch

    # The owner kept publishing all along, every batch under its own generation.
    before = checkpoint_id(first, JOB)
    wait_checkpoints(first, JOB, before)
    batches = committed_batches(output, first.storage)
    assert batches and {b.generation for b in batches} == {0}

    # The spec change that fixes it: take the output over on purpose.
    second.apply(manifest(second, output, output={"takeOverFrom": owner}))
    wait_running(second, JOB)
    second.wait_until(
        lambda: [b for b in committed_batches(output, first.storage) if b.generation == 1],
        120,
        "the second job's first published batch",
    )
    first.wait(f"gicjob/{JOB}", "jsonpath={.status.phase}=Failed", 240)
    assert "OutputOwned" in first.event_reasons(JOB)  # the old owner stopped, visibly
