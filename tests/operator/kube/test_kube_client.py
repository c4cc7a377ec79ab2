"""KubernetesApi (the real seam, on the ``kubernetes`` client) without a server: an
unreachable API, manifests refused before any request, and the translation of client
errors. Its calls against a real API server are in ``tests/operator/apiserver``."""

from __future__ import annotations

import json
from typing import Any

import pytest

from gic_operator.kube.kube_api import pod_info
from gic_operator.kube.kube_client import KubernetesApi, translate_error
from gic_operator.operator_errors import KubeError, TransientKubeError


def test_invalid_pod_manifest_is_a_clear_error(unreachable: KubernetesApi) -> None:
    bad: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p3"},
        "spec": {"containers": [{"name": "driver", "image": "busybox"}], "restartpolicy": "Never"},
    }
    with pytest.raises(KubeError, match="creating pod prod/p3 failed: the manifest is not valid"):
        unreachable.create_pod("prod", bad)


def test_unreachable_api_is_transient_and_events_are_only_logged(
    unreachable: KubernetesApi, caplog: pytest.LogCaptureFixture
) -> None:
    with pytest.raises(TransientKubeError, match="reading pod ns/p failed: cannot reach"):
        unreachable.get_pod("ns", "p")
    obj = {"apiVersion": "gic.io/v1alpha1", "kind": "GICJob", "metadata": {"name": "x"}}
    unreachable.event(obj, "Normal", "Launched", "message")
    assert "could not post event Launched (Normal) on GICJob None/x" in caplog.text


def status_error(code: int, reason: str, message: str) -> Exception:
    from kubernetes.client.exceptions import ApiException

    body = {"kind": "Status", "status": "Failure", "reason": reason, "message": message}
    return ApiException(status=code, reason="HTTP reason", body=json.dumps(body))


@pytest.mark.parametrize(
    ("code", "reason", "transient"),
    [
        (429, "TooManyRequests", True),
        (500, "InternalError", True),
        (503, "ServiceUnavailable", True),
        (409, "Conflict", True),
        (403, "Forbidden", False),
        (422, "Invalid", False),
    ],
)
def test_error_translation(code: int, reason: str, transient: bool) -> None:
    error = translate_error("creating pod ns/p", status_error(code, reason, "the details"))
    assert isinstance(error, TransientKubeError) is transient
    assert (error.status, error.reason) == (code, reason)
    assert str(error) == f"creating pod ns/p failed: HTTP {code} {reason}: the details"


def test_pod_info_reads_termination_and_failure_reasons() -> None:
    failed = pod_info(
        {
            "metadata": {"name": "d", "deletionTimestamp": "2026-01-01T00:00:00Z"},
            "status": {
                "phase": "Failed",
                "startTime": "2026-01-01T00:00:00Z",
                "containerStatuses": [
                    {"name": "sidecar", "state": {"running": {}}},
                    {
                        "name": "driver",
                        "state": {"terminated": {"exitCode": 137, "reason": "OOMKilled"}},
                    },
                ],
            },
        }
    )
    assert (failed.exit_code, failed.reason, failed.deleting, failed.finished) == (
        137,
        "OOMKilled",
        True,
        True,
    )
    evicted = pod_info(
        {"metadata": {"name": "d"}, "status": {"phase": "Failed", "reason": "Evicted"}}
    )
    assert (evicted.reason, evicted.exit_code) == ("Evicted", None)
