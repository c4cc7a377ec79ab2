"""The ``output`` part of a GICJob spec: who may write the job's transactional output.

An output path belongs to one job's state (docs/architecture.md, "Output ownership"):
a job whose state does not come from the owner's checkpoints or savepoints is refused
before its first batch. :class:`OutputSpec` names the job whose output this one takes
over on purpose; it becomes the driver's ``output_takeover`` setting.
"""

from __future__ import annotations

from pydantic import Field

from gic_operator.models.base import KubeModel

#: A job id as the runtime writes it (gic_runtime.layout.validate_id).
JOB_ID_PATTERN = r"^[a-z0-9]([a-z0-9._-]{0,126}[a-z0-9])?$"


class OutputSpec(KubeModel):
    """Ownership of the job's transactional output."""

    take_over_from: str | None = Field(
        None,
        max_length=128,
        pattern=JOB_ID_PATTERN,
        description="Job id (as storage and the refusal name it, e.g. team-a.payments) "
        "that owns the output path now and whose output this job takes over on purpose. "
        "Its committed batches stay readable; it can no longer write there. Unset: a job "
        "writes only an output that is new, its own, or that of the job whose checkpoint "
        "or savepoint it starts from.",
    )
