"""Who may write a transactional output location: one job of one state lineage at a time.

A file sink's output directory holds each published batch under names derived from its
batch id, and a batch whose commit marker exists is never published again (that is what
makes a replay idempotent). Two jobs writing one directory would therefore lose output
silently: the second one's batch 3 meets the first one's marker 3 and is skipped. This
module makes that impossible by recording who owns the directory.

The record: ``<output>/_gic_output/g<NNNNNN>``, one write-once ``GICW`` file per
*generation* (:class:`OutputGeneration`: the job id, the state lineage it continues, and
where it took over). The current owner is the highest generation. A job holds the
output while its generation is the highest; a claim that changes the owner creates the
next generation's file with create-if-absent, so of two jobs claiming at once exactly
one wins and the other re-reads and decides again.

A *state lineage* (a random token chosen when a job starts without state) travels with
the state: every manifest's ``sink`` section names it, savepoints carry it, and a job
restored or upgraded from a checkpoint or savepoint continues it. Claim rules
(:func:`claim_output`), for job J of lineage T:

* no record yet: J becomes generation 0 (a directory written before records existed
  counts as its writer's generation 0, see :attr:`OutputClaim.legacy_owner`);
* J owns the highest generation with lineage T: J keeps writing (a resume);
* the highest generation has lineage T but another job: J continues that job's state
  (a restore or an upgrade), so it takes over as the next generation, and batches of
  earlier generations of T from J's next batch on are superseded (:func:`superseded`);
  a job that was displaced before never comes back this way;
* anything else (another lineage, or J's own id with other state) is refused with
  :class:`~gic_runtime.errors.OutputOwnedError`, unless the claim names the current
  owner as the job it takes over from (:attr:`OutputClaim.takeover`): then J becomes the
  next generation and the earlier output stays readable beside J's.

A job checks its claim when it starts (:func:`check_claim`, which writes nothing) and
creates its record when it first publishes (:func:`claim_output`): a refusal comes
before the first batch, and a job that fails before its first checkpoint leaves no
record that would refuse its own next start.

Invariants: a generation's files and markers have names of their own (generation 0
keeps the original names), so no generation's batch is ever skipped because of another
generation's marker; records are only ever created, never changed or deleted; listing
and reading records is bounded (:data:`MAX_GENERATIONS`, :data:`RECORD_MAX_BYTES`).
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from dataclasses import dataclass

from gic_runtime.codec import Count, Finite, Text, from_stored_json, json_record, to_json
from gic_runtime.errors import CorruptFileError, ObjectExistsError, OutputOwnedError
from gic_runtime.formats import decode_text_record, encode_text_record, load_json
from gic_runtime.storage.listing import list_bounded
from gic_runtime.storage.object_store import ObjectStore, read_bounded

__all__ = [
    "MAX_GENERATIONS",
    "OWNERS_DIR",
    "OutputClaim",
    "OutputGeneration",
    "check_claim",
    "claim_output",
    "read_generations",
    "superseded",
    "taken_over",
]

OWNERS_DIR = "_gic_output"
OWNER_MAGIC = "GICW"
OWNER_VERSION = 1
#: Most generations an output directory may record (a takeover per restart would take
#: years to get there); more is refused as damaged rather than read without bound.
MAX_GENERATIONS = 10_000
#: Largest owner record read (a record is a few hundred bytes).
RECORD_MAX_BYTES = 64 * 1024
#: How often a claim re-reads after losing a race for the next generation.
_CLAIM_ATTEMPTS = 5


@json_record("output owner record")
@dataclass(frozen=True, slots=True)
class OutputGeneration:
    """Generation ``generation`` of an output directory: job ``job_id`` of state lineage
    ``lineage`` writes there from ``created_at`` on. ``continues_at`` is set when the job
    continues the previous owner's state: batches of earlier generations of the same
    lineage from that batch id on are superseded by this generation's."""

    generation: Count
    job_id: Text
    lineage: Text
    continues_at: Count | None = None
    created_at: Finite = 0.0


@dataclass(frozen=True, slots=True)
class OutputClaim:
    """What a job starting to write an output presents.

    ``next_batch`` is the first batch id it will publish; ``takeover`` the job id it
    deliberately takes the output over from (its earlier output stays readable);
    ``legacy_owner`` the job whose checkpoint this one starts from when that checkpoint
    wrote to the same output (it owns a directory written before owner records existed).
    """

    job_id: str
    lineage: str
    next_batch: int
    takeover: str | None = None
    legacy_owner: str | None = None


def _key(prefix: str, generation: int) -> str:
    return f"{prefix}{OWNERS_DIR}/g{generation:06d}"


def _encode(record: OutputGeneration) -> bytes:
    payload = json.dumps(to_json(record), sort_keys=True, separators=(",", ":")).encode()
    return encode_text_record(OWNER_MAGIC, OWNER_VERSION, payload)


def _decode(data: bytes, uri: str) -> OutputGeneration:
    _, payload = decode_text_record(
        data, OWNER_MAGIC, frozenset({OWNER_VERSION}), what="output owner record", uri=uri
    )
    body = load_json(payload, what="output owner record", uri=uri)
    return from_stored_json(OutputGeneration, body, uri=uri)


def read_generations(store: ObjectStore, prefix: str) -> list[OutputGeneration]:
    """Every generation recorded for the output at key ``prefix`` (``""`` or ending in
    ``/``), oldest first. Raises :class:`CorruptFileError` for a damaged record or a gap
    (generation files are contiguous from ``g000000``), and
    :class:`~gic_runtime.errors.TooManyObjectsError` past :data:`MAX_GENERATIONS`."""
    out: list[OutputGeneration] = []
    listing = list_bounded(
        store,
        f"{prefix}{OWNERS_DIR}/",
        MAX_GENERATIONS,
        what="output owner records",
        hint="the output directory's owner records are damaged; give the job another output",
    )
    for info in listing:
        uri = store.uri_for(info.key)
        record = _decode(read_bounded(store, info.key, RECORD_MAX_BYTES, what="owner record"), uri)
        if info.key != _key(prefix, len(out)) or record.generation != len(out):
            raise CorruptFileError(
                f"output owner records are not contiguous: expected generation {len(out)}",
                uri=uri,
            )
        out.append(record)
    return out


def taken_over(store: ObjectStore, prefix: str, generation: int) -> bool:
    """Whether a job took the output over after ``generation`` (one existence check)."""
    return store.exists(_key(prefix, generation + 1))


def superseded(generation: int, batch_id: int, generations: Sequence[OutputGeneration]) -> bool:
    """Whether batch ``batch_id`` published by ``generation`` is superseded: a later
    generation of the same lineage continued that state from ``batch_id`` or earlier."""
    if generation >= len(generations):
        return False
    lineage = generations[generation].lineage
    return any(
        later.lineage == lineage
        and later.continues_at is not None
        and later.continues_at <= batch_id
        for later in generations[generation + 1 :]
    )


def _refusal(path: str, claim: OutputClaim, current: OutputGeneration, *, displaced: bool) -> str:
    since = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(current.created_at))
    if displaced:
        why = (
            f"job {current.job_id} took it over (generation {current.generation}, {since}) "
            f"after job {claim.job_id} wrote there"
        )
    elif current.job_id == claim.job_id:
        why = (
            f"job {claim.job_id} wrote there with other state (it starts without the "
            "checkpoints that wrote it)"
        )
    else:
        why = (
            f"it belongs to job {current.job_id} (since {since}), and job {claim.job_id} "
            "does not continue that job's state"
        )
    return (
        f"output {path}: {why}; publishing there would skip batches already committed "
        f"under the same ids. Give job {claim.job_id} an output path of its own, or take "
        f"the output over on purpose with the setting output_takeover={current.job_id} "
        f"(gic run --take-over-output {current.job_id}; GICJob "
        f"spec.output.takeOverFrom: {current.job_id}): job {current.job_id}'s committed "
        f"batches stay readable and it can no longer write there"
    )


def _next(
    claim: OutputClaim, generations: Sequence[OutputGeneration], path: str
) -> OutputGeneration | None:
    """The generation ``claim`` should create, or ``None`` when it holds the latest."""
    now = time.time()
    if not generations:
        return OutputGeneration(0, claim.job_id, claim.lineage, None, now)
    current = generations[-1]
    following = len(generations)
    if current.job_id == claim.job_id and current.lineage == claim.lineage:
        return None
    if claim.takeover is not None and claim.takeover == current.job_id:
        return OutputGeneration(following, claim.job_id, claim.lineage, None, now)
    displaced = current.job_id != claim.job_id and any(
        g.job_id == claim.job_id for g in generations
    )
    if current.lineage == claim.lineage and not displaced:
        return OutputGeneration(following, claim.job_id, claim.lineage, claim.next_batch, now)
    raise OutputOwnedError(_refusal(path, claim, current, displaced=displaced))


def _legacy(path: str, claim: OutputClaim) -> OutputGeneration:
    """Generation 0 of a directory with batches but no owner records: the batches of
    :attr:`OutputClaim.legacy_owner`, whose checkpoint ``claim``'s job starts from (their
    names are the original ones); refused when the claim names no such job."""
    if claim.legacy_owner is None:
        raise OutputOwnedError(
            f"output {path} holds batches another job published before output owners "
            f"were recorded, and job {claim.job_id} does not start from that job's "
            f"checkpoints; give job {claim.job_id} an output path of its own"
        )
    return OutputGeneration(0, claim.legacy_owner, claim.lineage, None, time.time())


def check_claim(
    store: ObjectStore, prefix: str, path: str, claim: OutputClaim, *, has_batches: bool
) -> OutputGeneration | None:
    """Decide ``claim`` without writing: the generation the claiming job already holds,
    or ``None`` when :func:`claim_output` would create one. Raises
    :class:`~gic_runtime.errors.OutputOwnedError` when the claim would be refused.

    A job checks at start and creates its record only when it first publishes: a job
    that fails before its first checkpoint leaves no record behind, so its next start
    (which draws a new state lineage) is not refused by its own earlier attempt."""
    generations = read_generations(store, prefix)
    if not generations and has_batches:
        _next(claim, [_legacy(path, claim)], path)  # raises when refused
        return None  # generation 0's record is still to be written
    record = _next(claim, generations, path)
    return generations[-1] if record is None else None


def claim_output(
    store: ObjectStore, prefix: str, path: str, claim: OutputClaim, *, has_batches: bool
) -> OutputGeneration:
    """Make ``claim``'s job the writer of the output at key ``prefix`` of ``store``
    (``path`` is its URI, for messages) and return the generation it writes as.

    ``has_batches`` says whether the directory already holds committed batches; without
    owner records those were written before records existed, and they count as
    generation 0 of :attr:`OutputClaim.legacy_owner` (refused when there is none).
    Raises :class:`~gic_runtime.errors.OutputOwnedError` per the rules in the module
    docstring; writes nothing then.
    """
    for _ in range(_CLAIM_ATTEMPTS):
        generations = read_generations(store, prefix)
        if not generations and has_batches:
            first = _legacy(path, claim)
            if not _create(store, _key(prefix, 0), first):
                continue
            generations = [first]
        record = _next(claim, generations, path)
        if record is None:
            return generations[-1]
        if _create(store, _key(prefix, record.generation), record):
            return record
    raise OutputOwnedError(
        f"output {path}: other jobs kept claiming it while job {claim.job_id} tried to; "
        "give each job an output path of its own"
    )


def _create(store: ObjectStore, key: str, record: OutputGeneration) -> bool:
    """Create ``key`` with ``record``; ``False`` when another claim created it first."""
    try:
        store.put(key, _encode(record), if_absent=True)
    except ObjectExistsError:
        return False
    return True
