"""kopf's settings of the operator: per-handler INFO lines stay out of the log, only
kopf's warnings become Events, and no diff base is kept on resources (the annotation an
earlier configuration left is removed)."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import kopf
import pytest
from kopf._core.actions.loggers import LocalObjectLogger, ObjectLogger

from gic_operator.kopf_settings import (
    KOPF_OBJECTS_LOGGER,
    LEGACY_DIFFBASE_ANNOTATION,
    NoDiffBaseStorage,
    apply_kopf_settings,
    quiet_kopf_logs,
)
from gic_operator.main import FINALIZER

SAVEPOINT = {
    "apiVersion": "gic.io/v1alpha1",
    "kind": "Savepoint",
    "metadata": {"name": "sp-1", "namespace": "prod", "uid": "u-1"},
    "spec": {"job": "word-count"},
}


class Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


@pytest.fixture
def kopf_log() -> Iterator[Records]:
    """What reaches the handlers of the root logger from kopf's object loggers."""
    root, objects = logging.getLogger(), logging.getLogger(KOPF_OBJECTS_LOGGER)
    saved = (root.level, objects.level)
    records = Records()
    root.addHandler(records)
    root.setLevel(logging.DEBUG)
    try:
        yield records
    finally:
        root.removeHandler(records)
        root.setLevel(saved[0])
        objects.setLevel(saved[1])


def test_settings_post_only_warnings_keep_no_diff_base_and_name_the_finalizer() -> None:
    settings = kopf.OperatorSettings()
    apply_kopf_settings(settings, peering="gic-operator", finalizer=FINALIZER)
    assert settings.posting.level == logging.WARNING
    assert isinstance(settings.persistence.diffbase_storage, NoDiffBaseStorage)
    assert settings.persistence.finalizer == FINALIZER
    assert settings.peering.name == "gic-operator"
    assert (settings.watching.server_timeout, settings.networking.request_timeout) == (60, 30)
    standalone = kopf.OperatorSettings()
    apply_kopf_settings(standalone, peering=None, finalizer=FINALIZER)
    assert standalone.peering.name == kopf.OperatorSettings().peering.name


def test_no_diff_base_is_read_or_written_and_the_old_annotation_goes() -> None:
    storage = NoDiffBaseStorage()
    old = {**SAVEPOINT, "metadata": {**SAVEPOINT["metadata"]}}
    old["metadata"]["annotations"] = {LEGACY_DIFFBASE_ANNOTATION: '{"spec":{"job":"x"}}\n'}
    body = kopf.Body(old)
    assert storage.fetch(body=body) is None
    patch = kopf.Patch()
    storage.store(body=body, patch=patch, essence=storage.build(body=body))
    assert dict(patch) == {"metadata": {"annotations": {LEGACY_DIFFBASE_ANNOTATION: None}}}
    clean = kopf.Body(SAVEPOINT)
    patch = kopf.Patch()
    storage.store(body=clean, patch=patch, essence=storage.build(body=clean))
    assert not patch  # nothing to write: no API call
    # the essence never carries the annotation either
    assert LEGACY_DIFFBASE_ANNOTATION not in str(storage.build(body=body))


def test_handler_success_lines_stay_out_of_the_log_at_info(kopf_log: Records) -> None:
    settings = kopf.OperatorSettings()
    apply_kopf_settings(settings, peering=None, finalizer=FINALIZER)
    local = LocalObjectLogger(body=kopf.Body(SAVEPOINT), settings=settings)
    posted = ObjectLogger(body=kopf.Body(SAVEPOINT), settings=settings)

    quiet_kopf_logs("INFO")
    local.info("Timer 'gicjob-timer' succeeded.")
    posted.info("Handler 'savepoint-event' succeeded.")
    local.warning("Timer 'gicjob-timer' failed temporarily: storage unreachable")
    posted.error("Handler 'savepoint-dispose' failed permanently: boom")
    assert kopf_log.lines == [
        "Timer 'gicjob-timer' failed temporarily: storage unreachable",
        "Handler 'savepoint-dispose' failed permanently: boom",
    ]

    kopf_log.lines.clear()
    quiet_kopf_logs("DEBUG")  # --verbose / --log-level DEBUG shows everything
    local.info("Timer 'gicjob-timer' succeeded.")
    assert kopf_log.lines == ["Timer 'gicjob-timer' succeeded."]

    # the operator's own loggers are untouched
    kopf_log.lines.clear()
    quiet_kopf_logs("INFO")
    logging.getLogger("gic_operator.handlers").info("job prod/wc launched")
    assert kopf_log.lines == ["job prod/wc launched"]
