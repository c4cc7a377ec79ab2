"""Durable control channel between requesters (CLI, operator) and a job's driver.

Requests (savepoint, stop) and their outcomes live in storage under the job directory,
so they survive restarts on both sides. See :mod:`gic_runtime.control.channel`.
"""

from gic_runtime.control.channel import (
    ControlChannel,
    ControlEntry,
    ControlState,
    ControlTimeoutError,
    control_dir,
    outcome_uri,
    request_uri,
)
from gic_runtime.control.model import (
    ControlRequest,
    Outcome,
    OutcomeState,
    RequestType,
    SavepointRequest,
    StopRequest,
    parse_savepoint_format,
    parse_savepoint_type,
)

__all__ = [
    "ControlChannel",
    "ControlEntry",
    "ControlRequest",
    "ControlState",
    "ControlTimeoutError",
    "Outcome",
    "OutcomeState",
    "RequestType",
    "SavepointRequest",
    "StopRequest",
    "control_dir",
    "outcome_uri",
    "parse_savepoint_format",
    "parse_savepoint_type",
    "request_uri",
]
