"""``kubectl get`` of custom resources against the emulator shows the CRD's printer columns."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from gic_operator.testing.kube_emulator import KubeEmulator
from gic_operator.testing.kubectl import Kubectl

from .tables import evaluate, human_age, install_tables

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    ("seconds", "text"),
    [(-3, "0s"), (5, "5s"), (119, "119s"), (190, "3m10s"), (600, "10m"), (3 * 3600 + 60, "3h1m")],
)
def test_ages_read_like_the_api_servers(seconds: float, text: str) -> None:
    assert human_age(seconds) == text


def test_simple_jsonpaths() -> None:
    obj = {"status": {"lastCheckpoint": {"id": 0}, "conditions": [{"type": "Ready"}]}}
    assert evaluate(obj, ".status.lastCheckpoint.id") == 0
    assert evaluate(obj, ".status.conditions[0].type") == "Ready"
    assert evaluate(obj, ".status.conditions[3].type") is None
    assert evaluate(obj, ".status.missing.id") is None


@pytest.fixture
def kubectl(tmp_path: Path) -> Iterator[Kubectl]:
    with KubeEmulator() as kube:
        install_tables(kube)
        tool = Kubectl(kube.write_kubeconfig(tmp_path / "kubeconfig"), tmp_path / "cache")
        tool("apply", "--validate=false", "-f", str(REPO / "crds"))
        yield tool
    assert kube.server_errors == []


def test_kubectl_get_prints_the_crd_columns(kubectl: Kubectl) -> None:
    kubectl.apply(
        "apiVersion: gic.io/v1alpha1\nkind: GICJob\nmetadata: {name: j1, namespace: default}\n"
        "spec: {application: {image: x, mainFile: /x.py}, checkpointing: {storage: s3://b}}\n"
    )
    status = '{"status": {"phase": "Running", "lastCheckpoint": {"id": 0}, "restarts": 2}}'
    kubectl("patch", "gj", "j1", "--subresource=status", "--type=merge", "-p", status)

    table = kubectl("get", "gj").stdout.splitlines()
    assert table[0].split() == ["NAME", "PHASE", "CHECKPOINT", "CHECKPOINT-AGE", "RESTARTS", "AGE"]
    assert table[1].split()[:4] == ["j1", "Running", "0", "2"]
    wide = kubectl("get", "gj", "j1", "-o", "wide").stdout.splitlines()
    assert "RESTORED-FROM" in wide[0].split()
    missing = kubectl("get", "gj", "nope", check=False)
    assert missing.returncode == 1
    assert "(NotFound)" in missing.stderr and '"nope" not found' in missing.stderr
    assert kubectl("get", "gsp").stderr.strip() == "No resources found in default namespace."
