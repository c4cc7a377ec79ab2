"""``gic savepoints``: the savepoints under ``<root>/savepoints/`` and, for a job named
explicitly, those its control channel recorded elsewhere (``--target``).

Read-only: lists the directories, reads and verifies each one's marker file (native:
``_savepoint.manifest``; canonical: ``_canonical.json``). A directory with neither is
``incomplete`` (being written, or a failed attempt); one whose marker cannot be read is
``unreadable``; neither fails the command.

With ``--job-id`` (or ``GIC_JOB_ID`` / the settings file) only that job's savepoints are
listed: native ones whose manifest names the job, and every savepoint path recorded by
the outcomes of the job's control requests (canonical savepoints name no job
themselves).

Thread-safety: a command runs on one thread.
"""

from __future__ import annotations

import json
from typing import Any

from gic_runtime.cli.common import (
    ConfigOpt,
    JobIdOpt,
    JsonOpt,
    StorageOpt,
    human_bytes,
    iso,
    load_settings,
    make_resolver,
    stdout_console,
)
from gic_runtime.cli.inventory import SavepointDir, describe_savepoint, savepoint_dirs
from gic_runtime.control import ControlChannel
from gic_runtime.storage.uri import StoreResolver

HELP = """List savepoints: kind, job, checkpoint, creation time, size, path.

Lists <storage>/savepoints/. With --job-id, only that job's savepoints, including those
taken into another --target (found through the job's control channel).

With --json, prints one JSON document: storage, job_id (null: all), savepoints, each:
uri, kind (native | canonical | incomplete | unreadable), type (intermediate | terminal
| null), job_id, checkpoint_id, created_at, num_buckets, files, bytes, error.
"""


def _json(info: SavepointDir) -> dict[str, Any]:
    return {
        "uri": info.uri,
        "kind": info.kind,
        "type": info.type,
        "job_id": info.job_id,
        "checkpoint_id": info.checkpoint_id,
        "created_at": iso(info.created_at, millis=True),
        "num_buckets": info.num_buckets,
        "files": info.files,
        "bytes": info.bytes,
        "error": info.error,
    }


def _of_job(
    resolver: StoreResolver, root: str, job_id: str, found: list[SavepointDir]
) -> list[SavepointDir]:
    recorded = [
        entry.outcome.path
        for entry in ControlChannel(resolver, root, job_id).entries()
        if entry.outcome is not None and entry.outcome.succeeded and entry.outcome.path
    ]
    mine = [s for s in found if s.job_id == job_id or s.uri in recorded]
    listed = {s.uri for s in found}
    mine += [
        describe_savepoint(resolver, uri) for uri in dict.fromkeys(recorded) if uri not in listed
    ]
    return [s for s in mine if s.uri in listed or s.files]  # recorded, since deleted: left out


def savepoints(
    *,
    storage: StorageOpt = None,
    job_id: JobIdOpt = None,
    config: ConfigOpt = None,
    as_json: JsonOpt = False,
) -> None:
    settings = load_settings(config, storage=storage, job_id=job_id)
    root = settings.storage
    resolver = make_resolver(root)
    found = [describe_savepoint(resolver, uri) for uri in savepoint_dirs(resolver, root)]
    job = settings.job_id if "job_id" in settings.model_fields_set else None
    if job is not None:
        found = _of_job(resolver, root, job, found)
    if as_json:
        doc = {"storage": root, "job_id": job, "savepoints": [_json(s) for s in found]}
        print(json.dumps(doc, indent=2))
        return
    console = stdout_console()
    where = f"of job {job} " if job else ""
    if not found:
        console.print(f"no savepoints {where}under {root}", markup=False)
        return
    console.print(f"savepoints {where}under {root}:", markup=False)
    for info in found:
        kind = f"{info.kind} ({info.type})" if info.type else info.kind
        facts = [f"job {info.job_id}"] if info.job_id else []
        if info.checkpoint_id is not None:
            facts.append(f"checkpoint {info.checkpoint_id}")
        if info.created_at is not None:
            facts.append(f"created {iso(info.created_at)}")
        facts.append(f"{human_bytes(info.bytes)} in {info.files} files")
        console.print(f"  {info.uri}", markup=False)
        console.print(f"    {kind}: {', '.join(facts)}", markup=False)
        if info.error:
            console.print(f"    unreadable: {info.error}", markup=False)
    console.print("describe one with: gic describe PATH", markup=False)
