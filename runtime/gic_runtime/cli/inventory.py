"""What a storage root holds: its jobs and savepoints, found by listing (read-only).

A job exists exactly when at least one object lies under ``<root>/jobs/<job>/`` (its
status record, fencing epochs, checkpoints, control requests: a driver writes several
before its first batch). :func:`require_job` turns a job id that names nothing into one
error listing the jobs that do exist, so a typo never reads as an empty job.
:func:`open_existing_job` is how the commands that act on one job find it: the job the
options, ``GIC_JOB_ID`` or the settings file name, else the only job under the root (an
error lists them when there are several, and says so when there is none).

Listing the jobs lists every object under ``<root>/jobs/`` (one LIST per 1000 objects on
S3); checking one job stops at its first object.

Thread-safety: stateless functions; a command runs on one thread.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from gic_runtime.checkpoint.catalog import read_manifest, resolve_prefix
from gic_runtime.cli.common import CLIError, JobContext, load_settings, make_resolver
from gic_runtime.driver.savepoint_requests import directory_size
from gic_runtime.errors import GICError
from gic_runtime.layout import SAVEPOINT_MANIFEST, job_dir, parse_checkpoint_id
from gic_runtime.savepoint.canonical import INDEX_NAME, read_canonical_index
from gic_runtime.storage.uri import StoreResolver, join


@dataclass
class JobFiles:
    """The objects of one job directory."""

    job_id: str
    objects: int = 0
    bytes: int = 0
    checkpoints: list[int] = field(default_factory=list)


def scan_jobs(resolver: StoreResolver, root: str) -> dict[str, JobFiles]:
    """Every job under ``root`` (by id, sorted) with its object count, bytes and
    checkpoint ids (ascending)."""
    store, prefix = resolve_prefix(resolver, join(root, "jobs"))
    jobs: dict[str, JobFiles] = {}
    for info in store.list(prefix):
        job_id, _, rest = info.key[len(prefix) :].partition("/")
        if not rest:
            continue  # a stray object directly under jobs/
        entry = jobs.setdefault(job_id, JobFiles(job_id))
        entry.objects += 1
        entry.bytes += info.size
        if rest.startswith("checkpoints/"):
            checkpoint_id = parse_checkpoint_id(rest)
            if checkpoint_id is not None:
                entry.checkpoints.append(checkpoint_id)
    for entry in jobs.values():
        entry.checkpoints.sort()
    return dict(sorted(jobs.items()))


def job_exists(resolver: StoreResolver, root: str, job_id: str) -> bool:
    store, prefix = resolve_prefix(resolver, job_dir(root, job_id))
    return next(iter(store.list(prefix)), None) is not None


def require_job(ctx: JobContext) -> None:
    """Raise :class:`CLIError` naming the jobs under the root when ``ctx.job_id`` has
    no objects there."""
    if job_exists(ctx.resolver, ctx.root, ctx.job_id):
        return
    found = list(scan_jobs(ctx.resolver, ctx.root))
    there = f"jobs there: {', '.join(found)}" if found else "there are no jobs there yet"
    raise CLIError(
        f"no job {ctx.job_id!r} under {ctx.root} ({there}); check --job-id and --storage "
        "(gic jobs lists a root's jobs)"
    )


def open_existing_job(storage: str | None, job_id: str | None, config: Path | None) -> JobContext:
    """The settings of the job a command acts on, which must exist under the root.

    The job is the one ``--job-id``, ``GIC_JOB_ID`` or the settings file names; when
    none does, the only job under the root (listing every object under ``jobs/``).
    Raises :class:`CLIError` when the named job has no objects, or no job was named and
    the root holds none or several (the message lists them)."""
    settings = load_settings(config, storage=storage, job_id=job_id)
    resolver = make_resolver(settings.storage)
    if "job_id" not in settings.model_fields_set:
        found = list(scan_jobs(resolver, settings.storage))
        if not found:
            raise CLIError(
                f"no jobs under {settings.storage} yet: check --storage (or GIC_STORAGE), or "
                "run a job there first"
            )
        if len(found) > 1:
            raise CLIError(
                f"{settings.storage} holds {len(found)} jobs ({', '.join(found)}): name one "
                "with --job-id (or GIC_JOB_ID)"
            )
        settings = load_settings(config, storage=storage, job_id=found[0])
    ctx = JobContext(settings, resolver)
    require_job(ctx)
    return ctx


@dataclass(frozen=True)
class SavepointDir:
    """One savepoint directory: ``kind`` is ``native``, ``canonical`` or ``incomplete``
    (neither marker file: being written, or a failed attempt)."""

    uri: str
    kind: str
    files: int
    bytes: int
    job_id: str | None = None
    checkpoint_id: int | None = None
    created_at: float | None = None
    type: str | None = None
    num_buckets: int | None = None
    error: str | None = None


def describe_savepoint(resolver: StoreResolver, uri: str) -> SavepointDir:
    """What the savepoint directory ``uri`` holds (its marker file read and verified)."""
    files, size = directory_size(resolver, uri)
    try:
        if _exists(resolver, join(uri, SAVEPOINT_MANIFEST)):
            manifest = read_manifest(resolver, join(uri, SAVEPOINT_MANIFEST))
            meta = manifest.savepoint
            return SavepointDir(
                uri,
                "native",
                files,
                size,
                job_id=manifest.job_id,
                checkpoint_id=manifest.checkpoint_id,
                created_at=manifest.created_at,
                type=meta.type.value if meta is not None else None,
                num_buckets=manifest.num_buckets,
            )
        if _exists(resolver, join(uri, INDEX_NAME)):
            index = read_canonical_index(resolver, uri)
            return SavepointDir(uri, "canonical", files, size, num_buckets=index.num_buckets)
    except GICError as exc:
        return SavepointDir(uri, "unreadable", files, size, error=" ".join(str(exc).split()))
    return SavepointDir(uri, "incomplete", files, size)


def savepoint_dirs(resolver: StoreResolver, root: str) -> list[str]:
    """The directories under ``<root>/savepoints/``, sorted."""
    base = join(root, "savepoints")
    store, prefix = resolve_prefix(resolver, base)
    names = {info.key[len(prefix) :].split("/", 1)[0] for info in store.list(prefix)}
    return [join(base, name) for name in sorted(names) if name]


def _exists(resolver: StoreResolver, uri: str) -> bool:
    store, key = resolver.resolve(uri)
    return store.exists(key)
