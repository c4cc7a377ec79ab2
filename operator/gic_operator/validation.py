"""Readable messages for invalid custom resources.

A pydantic :class:`~pydantic.ValidationError` lists every problem with its location in
Python names; users wrote camelCase YAML, so the message names each field the way it
appears in their manifest (``spec.checkpointing.storage``) and says what is wrong.
"""

from __future__ import annotations

from pydantic import ValidationError
from pydantic.alias_generators import to_camel


def _location(prefix: str, loc: tuple[int | str, ...]) -> str:
    parts = [prefix]
    for item in loc:
        if isinstance(item, int):
            parts[-1] += f"[{item}]"
        else:
            parts.append(to_camel(item) if "_" in item else item)
    return ".".join(parts)


def describe_validation_error(exc: ValidationError, prefix: str) -> str:
    """One line per problem: ``<field>: <what is wrong>``; fix hint at the end."""
    lines = []
    for error in exc.errors():
        where = _location(prefix, tuple(error.get("loc", ())))
        kind = error.get("type", "")
        if kind == "missing":
            text = "is required"
        elif kind == "extra_forbidden":
            text = "is not a known field (check the spelling; kubectl explain gicjob.spec)"
        else:
            text = str(error.get("msg", "is invalid"))
            text = text.removeprefix("Value error, ")
        lines.append(f"{where}: {text}")
    return "invalid spec: " + "; ".join(lines) + ". Fix the manifest and apply it again."
