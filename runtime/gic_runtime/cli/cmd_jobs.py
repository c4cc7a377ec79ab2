"""``gic jobs``: the jobs under a storage root, with status and checkpoints.

Read-only: lists ``<root>/jobs/`` and reads each job's status record. A status record
that cannot be read is shown as such; it does not fail the command (``gic checkpoints
--job-id JOB`` tells more).

Thread-safety: a command runs on one thread.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Annotated

from pydantic import PlainSerializer
from rich.table import Table

from gic_runtime import codec
from gic_runtime.cli.cmd_checkpoints import status_json
from gic_runtime.cli.common import (
    ConfigOpt,
    JsonOpt,
    StorageOpt,
    ago,
    human_bytes,
    load_settings,
    make_resolver,
    stdout_console,
)
from gic_runtime.cli.inventory import JobFiles, scan_jobs
from gic_runtime.codec import json_record
from gic_runtime.errors import GICError
from gic_runtime.status import JobStatus, read_status

HELP = """List the jobs under the storage root: status, checkpoints, objects and bytes.

With --json, prints one JSON document: storage, and jobs (by id), each: job_id, status
(null or: state, epoch, last_checkpoint, restore_pending, updated_at, error),
status_error (null or text), checkpoints (retained ids, ascending), latest_checkpoint,
objects, bytes (all objects under the job's directory).
"""


@json_record("job", computed=("latest_checkpoint",))
@dataclass(frozen=True)
class _Job:
    """One job as listed; its JSON form is an entry of ``jobs`` in ``--json``."""

    job_id: str
    status: Annotated[JobStatus | None, PlainSerializer(status_json)]
    status_error: str | None
    checkpoints: list[int]
    objects: int
    bytes: int

    @classmethod
    def of(cls, files: JobFiles, status: JobStatus | None, status_error: str | None) -> _Job:
        return cls(
            files.job_id, status, status_error, files.checkpoints, files.objects, files.bytes
        )

    @property
    def latest_checkpoint(self) -> int | None:
        return self.checkpoints[-1] if self.checkpoints else None

    def row(self, now: float) -> list[str]:
        status = self.status
        if self.status_error:
            text = "unreadable status record"
        elif status is None:
            text = "-"
        else:
            text = f"{status.state.value}, epoch {status.epoch}, {ago(status.updated_at, now)}"
        ids = self.checkpoints
        shown = f"{ids[0]}..{ids[-1]}" if len(ids) > 1 else (str(ids[0]) if ids else "-")
        return [self.job_id, text, shown, str(self.objects), human_bytes(self.bytes)]


def jobs(*, storage: StorageOpt = None, config: ConfigOpt = None, as_json: JsonOpt = False) -> None:
    root = load_settings(config, storage=storage).storage
    resolver = make_resolver(root)
    found: list[_Job] = []
    for job_id, files in scan_jobs(resolver, root).items():
        try:
            found.append(_Job.of(files, read_status(resolver, root, job_id), None))
        except GICError as exc:
            found.append(_Job.of(files, None, " ".join(str(exc).split())))
    if as_json:
        jobs_json = [codec.to_json(job) for job in found]
        print(json.dumps({"storage": root, "jobs": jobs_json}, indent=2))
        return
    console = stdout_console()
    if not found:
        console.print(f"no jobs under {root}", markup=False)
        return
    table = Table()
    for name in ("job", "status", "checkpoints", "objects", "bytes"):
        table.add_column(name, justify="left" if name in ("job", "status") else "right")
    now = time.time()
    for job in found:
        table.add_row(*job.row(now))
    console.print(f"jobs under {root}:", markup=False)
    console.print(table)
    console.print(f"details of one: gic checkpoints --storage {root} --job-id JOB", markup=False)
