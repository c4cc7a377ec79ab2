"""GIC's progress lines: what ``gic run`` prints and what a driver pod's log shows.

The runtime reports its progress as records of the ``gic_runtime`` logger at INFO (job
start, one line per committed batch, stop) and problems at WARNING or above.
:func:`progress_line` is the text of one record, the same everywhere: the message, with
``warning: `` / ``error: `` in front of a problem. ``gic run`` prints these lines under its
header (:mod:`gic_runtime.cli.spark_env`); an app that ``spark-submit`` started (the
operator's driver pods) writes them to stderr through :func:`show_progress`, next to
Spark's own log, so ``kubectl logs`` of a driver shows one line per batch.

Imports neither pyspark nor the Spark integration. Thread-safety: :func:`show_progress`
changes the ``gic_runtime`` logger (a process global); the handler itself is as
thread-safe as :class:`logging.StreamHandler`.
"""

from __future__ import annotations

import logging
from typing import TextIO

#: The logger whose records are GIC's progress.
PROGRESS_LOGGER = "gic_runtime"


def progress_line(record: logging.LogRecord) -> str:
    """One record as a line: its message, prefixed by its level from WARNING up."""
    try:
        text = record.getMessage()
    except (TypeError, ValueError):  # pragma: no cover - a malformed record
        text = str(record.msg)
    if record.levelno >= logging.WARNING:
        text = f"{record.levelname.lower()}: {text}"
    return " ".join(text.splitlines())


class ProgressFormatter(logging.Formatter):
    """Formats records as :func:`progress_line` does."""

    def format(self, record: logging.LogRecord) -> str:
        return progress_line(record)


class _ProgressHandler(logging.StreamHandler):  # type: ignore[type-arg]
    """The handler :func:`show_progress` installs (recognized so it is installed once)."""


def show_progress(stream: TextIO) -> logging.Handler | None:
    """Write the ``gic_runtime`` logger's INFO and higher records to ``stream``, one
    :func:`progress_line` each; the handler, or ``None`` when records already reach a
    handler (the app configured logging itself, or this was called before), so no line
    is printed twice."""
    logger = logging.getLogger(PROGRESS_LOGGER)
    if logger.hasHandlers():
        return None
    handler = _ProgressHandler(stream)
    handler.setLevel(logging.INFO)
    handler.setFormatter(ProgressFormatter())
    logger.addHandler(handler)
    if logger.getEffectiveLevel() > logging.INFO:
        logger.setLevel(logging.INFO)
    return handler
