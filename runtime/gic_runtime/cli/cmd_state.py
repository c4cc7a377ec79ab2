"""``gic state KEY``: one key's state, from the job's latest checkpoint or from a given
checkpoint or savepoint, without Spark.

The source is opened as ``read_state`` opens it
(:mod:`gic_runtime.savepoint.state_source`: verified, bounded, a manifest naming objects
outside its directory refused); the key's bucket is ``bucket_for(key, num_buckets)``
and only that bucket is read (a checkpoint's rebuilt in memory from its snapshot and
changelog). Keys are typed as the job keyed its rows: text by default, an integer with
``--int``, any key (a composite one is a JSON array) with ``--json-key``.

Every text that comes from storage (state names, keys, values) is printed through the
terminal-safe console, escaped for rich's markup. A key without state, a job or
checkpoint that does not exist, or a damaged file ends the command with one
``error:`` line and status 1 (docs/operations.md §2.2). Read-only. Thread-safety: a
command runs on one thread.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.markup import escape
from rich.table import Table

from gic_runtime.checkpoint.catalog import list_checkpoints
from gic_runtime.cli.common import (
    CLIError,
    ConfigOpt,
    JobIdOpt,
    JsonOpt,
    StorageOpt,
    stdout_console,
    to_uri,
)
from gic_runtime.cli.inventory import open_existing_job
from gic_runtime.errors import StateError
from gic_runtime.savepoint.state_json import from_json, to_json, to_plain
from gic_runtime.savepoint.state_rows import user_table
from gic_runtime.savepoint.state_source import (
    StateSource,
    key_rows,
    latest_state_source,
    open_state_source,
)
from gic_runtime.state.keys import decode_key, decode_value
from gic_runtime.state.timers import from_micros
from gic_runtime.storage.uri import StoreResolver

HELP = """Show one key's state: from the job's latest checkpoint, or --from a checkpoint id,
a checkpoint manifest, a native or a canonical savepoint. Reads only the key's bucket;
needs no Spark.

  gic state alice --job-id sessions                the key "alice", latest checkpoint
  gic state 42 --int --from 7 --job-id counts      the integer key 42 in checkpoint 7
  gic state '["eu", 7]' --json-key --from gic-data/savepoints/sp-1
  gic state alice --state session --json           one state, as JSON

With --json, prints one JSON document: source (kind, uri, num_buckets), key (the key
as JSON), bucket, and entries, each: state, kind (value | map | list | timer), user_key
(a map entry's key; a timer's time in microseconds), index (a list element's
position), value, expires_us, ttl_by, ttl_us. Bytes appear as {"$bytes": base64}, maps
with keys other than text as a "$map" object holding key-value pairs (docs/operations.md
section 15.5).

Exits 1 when the key has no state there (or none of the --state names).
"""

KeyArg = Annotated[
    str, typer.Argument(metavar="KEY", help="The key (text unless --int or --json-key).")
]
FromOpt = Annotated[
    str | None,
    typer.Option(
        "--from",
        metavar="ID|PATH",
        help="A checkpoint id of the job (or 'latest', the default), a checkpoint manifest, "
        "a native or a canonical savepoint (URI or local path).",
        show_default=False,
    ),
]
IntOpt = Annotated[bool, typer.Option("--int", help="The key is an integer.")]
JsonKeyOpt = Annotated[
    bool, typer.Option("--json-key", help="The key is JSON text (a composite key: an array).")
]
StateOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--state", metavar="NAME", help="Only this state (repeatable).", show_default=False
    ),
]


def _key(text: str, as_int: bool, as_json: bool) -> Any:
    if as_int and as_json:
        raise typer.BadParameter("give --int or --json-key, not both", param_hint="KEY")
    if as_int:
        try:
            return int(text.strip())
        except ValueError:
            raise typer.BadParameter(f"{text!r} is not an integer", param_hint="KEY") from None
    if as_json:
        try:
            return from_json(text, as_key=True)
        except StateError as exc:
            raise typer.BadParameter(str(exc), param_hint="KEY") from None
    return text


def _source(
    wanted: str | None, storage: str | None, job_id: str | None, config: Path | None
) -> tuple[StoreResolver, StateSource]:
    if wanted is None or wanted.strip() in ("", "latest"):
        ctx = open_existing_job(storage, job_id, config)
        return ctx.resolver, latest_state_source(ctx.resolver, ctx.root, ctx.job_id)
    if wanted.strip().isdigit():
        ctx = open_existing_job(storage, job_id, config)
        refs = list_checkpoints(ctx.resolver, ctx.root, ctx.job_id)
        match = [r for r in refs if r.checkpoint_id == int(wanted)]
        if not match:
            ids = ", ".join(str(r.checkpoint_id) for r in refs) or "none"
            raise CLIError(
                f"job {ctx.job_id} has no checkpoint {wanted.strip()} under {ctx.root} (its "
                f"checkpoints: {ids}); older checkpoints are deleted once newer ones are retained"
            )
        return ctx.resolver, open_state_source(ctx.resolver, match[-1].uri)
    resolver = StoreResolver()
    return resolver, open_state_source(resolver, to_uri(wanted))


def _entries(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out = []
    for r in rows:
        user_key = None if r["user_key_msgpack"] is None else decode_key(r["user_key_msgpack"])
        value = None if r["value_msgpack"] is None else decode_value(r["value_msgpack"])
        out.append(
            {
                "state": r["state"],
                "kind": r["kind"],
                "user_key": to_plain(user_key),
                "index": r["index"],
                "value": to_plain(value),
                "expires_us": r["expires_us"],
                "ttl_by": r["ttl_by"],
                "ttl_us": r["ttl_us"],
            }
        )
    return out


def state(
    key: KeyArg,
    *,
    source: FromOpt = None,
    as_int: IntOpt = False,
    json_key: JsonKeyOpt = False,
    states: StateOpt = None,
    storage: StorageOpt = None,
    job_id: JobIdOpt = None,
    config: ConfigOpt = None,
    as_json: JsonOpt = False,
) -> None:
    value = _key(key, as_int, json_key)
    resolver, opened = _source(source, storage, job_id, config)
    bucket, table = key_rows(resolver, opened, value)
    rows = user_table(table).to_pylist()
    where = f"{opened.uri} (bucket {bucket} of {opened.num_buckets})"
    if not rows:
        hint = (
            "" if as_int or json_key else "; an integer key needs --int, a composite one --json-key"
        )
        raise CLIError(f"key {to_json(value)} has no state in {where}{hint}")
    if states:
        kept = [r for r in rows if r["state"] in states]
        if not kept:
            have = ", ".join(sorted({r["state"] for r in rows}))
            raise CLIError(
                f"key {to_json(value)} has no state {', '.join(states)} in {where} "
                f"(its states: {have})"
            )
        rows = kept
    doc = {
        "source": {"kind": opened.kind, "uri": opened.uri, "num_buckets": opened.num_buckets},
        "key": to_plain(value),
        "bucket": bucket,
        "entries": _entries(rows),
    }
    if as_json:
        print(json.dumps(doc, indent=2))
    else:
        _print(doc, rows)


def _time(micros: int | None) -> str:
    if micros is None:
        return ""
    try:
        return f"{micros} ({from_micros(micros).isoformat().replace('+00:00', 'Z')})"
    except OverflowError:
        return str(micros)


def _print(doc: dict[str, Any], rows: list[dict[str, Any]]) -> None:
    console = stdout_console()
    src = doc["source"]
    console.print(
        f"key {escape(to_json(doc['key']))}: bucket {doc['bucket']} of {src['num_buckets']}, "
        f"{escape(src['kind'].replace('-', ' '))} {escape(src['uri'])}",
        soft_wrap=True,
    )
    table = Table()
    for name in ("state", "kind", "user key / time", "index", "value", "expires", "ttl"):
        table.add_column(name, overflow="fold")
    for r in rows:
        user_key = r["user_key"] or ""
        if r["kind"] == "timer":
            user_key = _time(int(user_key))
        ttl = f"{r['ttl_us']} us of {r['ttl_by']} time" if r["ttl_by"] else ""
        expires = _time(r["expires_us"]) or ("at the first watermark + ttl" if ttl else "")
        cells = (r["state"], r["kind"], user_key, "" if r["index"] is None else str(r["index"]))
        table.add_row(*(escape(c) for c in (*cells, r["value"] or "", expires, ttl)))
    console.print(table)
