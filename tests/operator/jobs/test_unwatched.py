"""Warning Events on GICJobs outside the watched namespaces (gic_operator.jobs.unwatched),
against the in-memory API."""

from __future__ import annotations

import threading

import pytest

from gic_operator.jobs.unwatched import (
    NOT_WATCHED,
    UnwatchedJobsReporter,
    not_watched_message,
    report_unwatched,
)
from gic_operator.operator_errors import KubeError
from gic_operator.testing.fake_kube import TestingKubeApi


def job(name: str) -> dict[str, object]:
    return {
        "metadata": {"name": name},
        "spec": {"application": {"image": "x", "mainFile": "/x.py"}},
    }


@pytest.fixture
def kube() -> TestingKubeApi:
    api = TestingKubeApi()
    api.put_object("gicjobs", "team-a", job("watched"))
    api.put_object("gicjobs", "team-z", job("lost"))
    api.put_object("gicjobs", "default", job("also-lost"))
    api.put_object("savepoints", "team-z", {"metadata": {"name": "sp"}, "spec": {}})
    return api


def test_only_jobs_outside_the_watched_namespaces_get_the_warning(kube: TestingKubeApi) -> None:
    reported = report_unwatched(kube, ["team-a", "team-b"])
    assert reported == [("default", "also-lost"), ("team-z", "lost")]
    events = {(e.namespace, e.name): e for e in kube.events}
    assert set(events) == {("default", "also-lost"), ("team-z", "lost")}
    lost = events[("team-z", "lost")]
    assert (lost.kind, lost.type, lost.reason) == ("GICJob", "Warning", NOT_WATCHED)
    assert lost.message == not_watched_message("team-z", ["team-a", "team-b"])
    # The GICJobs are only read: no status, no finalizer, nothing else written.
    assert {c[0] for c in kube.calls} == {"list_objects_everywhere", "event"}


def test_the_message_says_how_to_add_the_namespace() -> None:
    message = not_watched_message("team-z", ["team-b", "team-a"])
    assert message.startswith(
        "namespace team-z is not watched by the GIC operator (it watches team-a, team-b)"
    )
    assert "--reuse-values --set 'watchNamespaces={team-a,team-b,team-z}'" in message


def test_a_job_being_deleted_gets_no_warning(kube: TestingKubeApi) -> None:
    kube.objects[("gicjobs", "team-z", "lost")]["metadata"]["deletionTimestamp"] = "now"
    assert report_unwatched(kube, ["team-a"]) == [("default", "also-lost")]


def test_the_reporter_scans_until_stopped_and_survives_a_failed_list(
    kube: TestingKubeApi,
) -> None:
    kube.fail_next("list_objects_everywhere", KubeError("forbidden", status=403))
    scanned = threading.Event()
    reporter = UnwatchedJobsReporter(["team-a", "default"], interval_s=0.01)

    original = kube.event

    def event(*args: object, **kwargs: object) -> None:
        original(*args, **kwargs)  # type: ignore[arg-type]
        scanned.set()

    kube.event = event  # type: ignore[method-assign]
    reporter.start(kube)
    try:
        assert scanned.wait(30), "no scan after the failed one"
    finally:
        reporter.stop()
    assert {(e.namespace, e.name) for e in kube.events} == {("team-z", "lost")}
    calls = sum(1 for c in kube.calls if c[0] == "list_objects_everywhere")
    assert calls >= 2
    reporter.stop()  # idempotent
