"""The job status record: what the driver reports to the operator and the CLI.

::

    <root>/jobs/<job_id>/status.json      GICT record, overwritten in place

Its values (:mod:`gic_runtime.status.record`: :class:`JobStatus` and its parts), why a
launch failed (:mod:`gic_runtime.status.failures`), and the stored file with its
bounded reader and its writer (:mod:`gic_runtime.status.record_file`). Import the names
from here.
"""

from gic_runtime.status.failures import (
    ERROR_TYPE_MAX,
    FAILURE_MESSAGE_MAX,
    FailureReason,
    FailureStatus,
    error_text,
    failure_message,
    failure_reason,
    one_line,
)
from gic_runtime.status.record import (
    MAX_RANGES,
    BucketRange,
    CheckpointStatus,
    DriverInfo,
    JobState,
    JobStatus,
    MaterializationStatus,
    RestoreStatus,
    SavepointStatus,
    SweepStatus,
)
from gic_runtime.status.record_file import (
    FORMAT_VERSION,
    MAGIC,
    STATUS_MAX_BYTES,
    STATUS_NAME,
    SUPPORTED_VERSIONS,
    decode_status,
    encode_status,
    read_status,
    status_uri,
    write_status,
)

__all__ = [
    "ERROR_TYPE_MAX",
    "FAILURE_MESSAGE_MAX",
    "FORMAT_VERSION",
    "MAGIC",
    "MAX_RANGES",
    "STATUS_MAX_BYTES",
    "STATUS_NAME",
    "SUPPORTED_VERSIONS",
    "BucketRange",
    "CheckpointStatus",
    "DriverInfo",
    "FailureReason",
    "FailureStatus",
    "JobState",
    "JobStatus",
    "MaterializationStatus",
    "RestoreStatus",
    "SavepointStatus",
    "SweepStatus",
    "decode_status",
    "encode_status",
    "error_text",
    "failure_message",
    "failure_reason",
    "one_line",
    "read_status",
    "status_uri",
    "write_status",
]
