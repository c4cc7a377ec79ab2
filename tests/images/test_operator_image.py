"""The operator image (``localhost/gic-operator:<version>``, the Dockerfile's ``operator``
target): its entrypoint starts the operator against the session's real control plane,
authenticated as the chart's operator ServiceAccount with the chart's RBAC, and it answers
the chart's probes (``/healthz``, ``/readyz``) and serves ``/metrics``, as a pod of the
chart runs it: uid 10001, read-only root with ``/tmp`` a scratch directory, no
capabilities, the chart's variables. ``--network host`` lets it reach the API server on
loopback.
"""

from __future__ import annotations

import json
import secrets
import time
import urllib.error
import urllib.request
import uuid
from pathlib import Path

import pytest
import yaml
from tests.e2e.chart import OPERATOR_ACCOUNT, RELEASE_NAMESPACE, render_access
from tests.support.processes import free_port

from ..controlplane.cluster import ControlPlane
from .podman import REPO, Container, image_ref, podman

pytestmark = pytest.mark.usefixtures("images")

OPERATOR = image_ref("operator")
DEADLINE_S = 180.0


def get(url: str) -> tuple[int, str]:
    """Status and body of a GET (0 and the error when nothing answers)."""
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode(errors="replace")
    except OSError as exc:
        return 0, str(exc)


def operator_kubeconfig(plane: ControlPlane, directory: Path, namespace: str) -> Path:
    """A kubeconfig in ``directory`` (mounted at ``/kube``) with a token of the chart's
    operator ServiceAccount, after applying the CRDs and the chart's RBAC for
    ``namespace``."""
    plane.kubectl("apply", "-f", str(REPO / "crds"), timeout=60)
    release = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": RELEASE_NAMESPACE}}
    plane.kubectl("apply", "-f", "-", input=json.dumps(release))
    access = "".join("---\n" + yaml.safe_dump(doc) for doc in render_access([namespace]))
    plane.kubectl("apply", "-f", "-", input=access)
    token = plane.kubectl(
        "create", "token", OPERATOR_ACCOUNT, "-n", RELEASE_NAMESPACE, "--duration=1h"
    ).stdout.strip()
    (directory / "ca.crt").write_bytes(plane.ca_file.read_bytes())
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": "t",
                "cluster": {"server": plane.server, "certificate-authority": "/kube/ca.crt"},
            }
        ],
        "users": [{"name": OPERATOR_ACCOUNT, "user": {"token": token}}],
        "contexts": [{"name": "t", "context": {"cluster": "t", "user": OPERATOR_ACCOUNT}}],
        "current-context": "t",
    }
    path = directory / "kubeconfig"
    path.write_text(yaml.safe_dump(config))
    for item in (directory, directory / "ca.crt", path):
        item.chmod(0o755 if item.is_dir() else 0o644)  # readable by uid 10001
    return path


def test_the_operator_image_answers_its_probes(control_plane: ControlPlane, tmp_path: Path) -> None:
    namespace = f"img-{uuid.uuid4().hex[:8]}"
    control_plane.client.create("/api/v1/namespaces", {"metadata": {"name": namespace}})
    try:
        kube = tmp_path / "kube"
        kube.mkdir()
        operator_kubeconfig(control_plane, kube, namespace)
        health, metrics = free_port(), free_port()
        options = [
            "--network=host",
            "--read-only",
            "--tmpfs=/tmp:rw,mode=1777",
            "--cap-drop=ALL",
            "--security-opt=no-new-privileges",
            f"--volume={kube}:/kube:ro",
            "--env=KUBECONFIG=/kube/kubeconfig",
            f"--env=GIC_OPERATOR_CONTROL_KEY={secrets.token_urlsafe(32)}",
            "--env=GIC_ALLOWED_STORAGE=file:///data",
            "--env=GIC_ALLOWED_S3_ENDPOINTS=",
        ]
        args = [
            f"--namespace={namespace}",
            "--standalone",
            f"--health-port={health}",
            f"--metrics-port={metrics}",
            "--bind-address=127.0.0.1",
            "--reconcile-interval=5",
        ]
        with Container(OPERATOR, *args, options=options) as container:
            deadline = time.monotonic() + DEADLINE_S
            ready = (0, "")
            while time.monotonic() < deadline and container.running():
                ready = get(f"http://127.0.0.1:{health}/readyz")
                if ready[0] == 200:
                    break
                time.sleep(1)
            log = container.logs()
            assert ready[0] == 200, f"/readyz: {ready}; operator log:\n{log[-4000:]}"
            assert get(f"http://127.0.0.1:{health}/healthz") == (200, "ok\n")
            status, body = get(f"http://127.0.0.1:{metrics}/metrics")
            assert status == 200 and "gic_operator_" in body, body[:2000]
            assert f"gic-operator watching {namespace}" in log, log[-4000:]
            assert " 403" not in log and "Forbidden" not in log, log[-4000:]
            user = podman("exec", container.name, "id", "-u").stdout.strip()
            assert user == "10001"
    finally:
        control_plane.client.delete(f"/api/v1/namespaces/{namespace}")
