"""GIC's progress lines in a driver's log: the lines ``gic run`` prints, written once."""

from __future__ import annotations

import io
import logging
from collections.abc import Iterator
from contextlib import contextmanager

from gic_runtime.logs import PROGRESS_LOGGER, progress_line, show_progress


@contextmanager
def clean_logging() -> Iterator[None]:
    """No handlers on the ``gic_runtime`` and root loggers (as in a fresh driver process,
    pytest's own capture handler included) for the body; both as they were afterwards."""
    logger, root = logging.getLogger(PROGRESS_LOGGER), logging.getLogger()
    saved = (logger.handlers[:], logger.level, root.handlers[:])
    logger.handlers.clear()
    root.handlers.clear()
    try:
        yield
    finally:
        logger.handlers[:], root.handlers[:] = saved[0], saved[2]
        logger.setLevel(saved[1])


def test_batch_lines_and_warnings_reach_the_stream_once() -> None:
    out = io.StringIO()
    with clean_logging():
        assert show_progress(out) is not None
        assert show_progress(out) is None  # a second call adds nothing
        job = logging.getLogger("gic_runtime.spark.job")
        job.info("batch %d: %d rows in, checkpoint %d committed in %.0f ms", 3, 10, 3, 12.0)
        job.debug("not shown")
        logging.getLogger("gic_runtime.spark.driver").warning("a warning\nover two lines")
        logging.getLogger("elsewhere").warning("not ours")
    assert out.getvalue().splitlines() == [
        "batch 3: 10 rows in, checkpoint 3 committed in 12 ms",
        "warning: a warning over two lines",
    ]


def test_an_app_that_configured_logging_keeps_its_own_handlers() -> None:
    with clean_logging():
        logging.getLogger().addHandler(logging.NullHandler())
        assert show_progress(io.StringIO()) is None
        assert not logging.getLogger(PROGRESS_LOGGER).handlers


def test_the_line_is_the_message_with_the_level_of_a_problem() -> None:
    record = logging.LogRecord(
        "gic_runtime.x", logging.ERROR, "f", 1, "sweep %s", ("failed",), None
    )
    assert progress_line(record) == "error: sweep failed"
