"""CRDs of other projects that the chart's optional objects need, fetched as Go modules.

The chart can render a ServiceMonitor (``monitoring.coreos.com/v1``), whose CRD belongs to
the Prometheus Operator. Its release is a Go module on the module proxy, with the CRD
YAML inside (``example/prometheus-operator-crd/``), so it is fetched the way the control
plane's own modules are: ``go mod download`` at a pinned version, checked by the Go
checksum database and against the module hash pinned here, cached in the module cache.

Errors: :class:`ExtraCrdError` when Go is missing, the download fails, or the module's
hash is not the pinned one.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

from .cluster import REPO

PROMETHEUS_OPERATOR = "github.com/prometheus-operator/prometheus-operator"
PROMETHEUS_OPERATOR_VERSION = "v0.93.0"
#: ``go mod download``'s ``Sum`` (the module's h1 hash) of that version.
PROMETHEUS_OPERATOR_SUM = "h1:AohlYJT+En8TmNpAcEUJ3GsaJTAqfEBwHmGTVpRm/Io="
SERVICE_MONITOR_CRD = "example/prometheus-operator-crd/monitoring.coreos.com_servicemonitors.yaml"


class ExtraCrdError(RuntimeError):
    """A CRD of another project could not be fetched or did not match its pin."""


def _go() -> str:
    """Go as ``make controlplane`` finds it: on PATH, else the one it installed."""
    found = shutil.which("go")
    if found:
        return found
    installed = REPO / ".cache" / "go" / "bin" / "go"
    if installed.exists():
        return str(installed)
    raise ExtraCrdError("no go on PATH nor in .cache/go: run make controlplane first")


def service_monitor_crd() -> Path:
    """The Prometheus Operator's ServiceMonitor CRD (pinned release), fetched once."""
    module = f"{PROMETHEUS_OPERATOR}@{PROMETHEUS_OPERATOR_VERSION}"
    env = {**os.environ, "GOTOOLCHAIN": "local", "GOFLAGS": "-mod=mod"}
    done = subprocess.run(
        [_go(), "mod", "download", "-json", module],
        capture_output=True,
        text=True,
        env=env,
        cwd="/",
        timeout=600,
        check=False,
    )
    try:
        info = json.loads(done.stdout)
    except json.JSONDecodeError:
        info = {}
    if done.returncode != 0 or "Dir" not in info:
        detail = info.get("Error") or done.stderr.strip()[-500:]
        raise ExtraCrdError(f"go mod download {module} failed: {detail}")
    if info.get("Sum") != PROMETHEUS_OPERATOR_SUM:
        raise ExtraCrdError(
            f"{module} has hash {info.get('Sum')}, expected {PROMETHEUS_OPERATOR_SUM}"
        )
    crd = Path(info["Dir"]) / SERVICE_MONITOR_CRD
    if not crd.is_file():
        raise ExtraCrdError(f"{module} has no {SERVICE_MONITOR_CRD}")
    return crd
