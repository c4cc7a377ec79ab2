"""The launch's ConfigMap and Secret through the real seam (KubernetesApi against the
in-process API emulator) and through a whole launch with the in-memory fake: the template
is replaced at every launch, the RPC secret created once and never read back or shown."""

from __future__ import annotations

import base64
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gic_operator import launcher
from gic_operator.errors import KubeError
from gic_operator.kube import KubernetesApi
from gic_operator.launcher import LaunchPlan
from gic_operator.models import GICJobSpec
from gic_operator.testing.kube_client import KubeClient
from gic_operator.testing.kube_emulator import KubeEmulator

NS = "prod"


def plan(image: str = "gic:1", **changes: Any) -> LaunchPlan:
    spec = GICJobSpec.model_validate(
        {
            "application": {"image": image, "mainFile": "/opt/job.py"},
            "checkpointing": {"storage": "s3://bucket/gic"},
        }
    )
    values: dict[str, Any] = {
        "namespace": NS,
        "name": "wc",
        "uid": "uid-1",
        "spec": spec,
        "job_id": "prod.wc",
        "epoch": 1,
    }
    values.update(changes)
    return LaunchPlan(**values)


@pytest.fixture(scope="module")
def emulator(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[KubeEmulator, Path]]:
    with KubeEmulator() as kube:
        config = kube.write_kubeconfig(tmp_path_factory.mktemp("kube") / "kubeconfig")
        KubeClient(config).request("POST", "/api/v1/namespaces", {"metadata": {"name": NS}})
        yield kube, config
    assert kube.server_errors == []


@pytest.fixture
def api(emulator: tuple[KubeEmulator, Path]) -> Iterator[KubernetesApi]:
    from kubernetes.config import new_client_from_config

    client = new_client_from_config(config_file=str(emulator[1]))  # type: ignore[no-untyped-call]
    try:
        yield KubernetesApi(client, request_timeout_s=10)
    finally:
        client.close()


@pytest.fixture
def raw(emulator: tuple[KubeEmulator, Path]) -> KubeClient:
    return KubeClient(emulator[1])


def test_template_config_map_is_created_then_replaced(api: KubernetesApi, raw: KubeClient) -> None:
    first = launcher.executor_template_config_map(plan())
    api.apply_config_map(NS, first)
    name = first["metadata"]["name"]
    stored = raw.get(f"/api/v1/namespaces/{NS}/configmaps/{name}")
    assert stored["data"] == first["data"]
    env = [{"name": "X", "value": "1"}]
    changed = GICJobSpec.model_validate(
        {
            "application": {"image": "gic:1", "mainFile": "/opt/job.py", "env": env},
            "checkpointing": {"storage": "s3://bucket/gic"},
        }
    )
    second = launcher.executor_template_config_map(plan(spec=changed, epoch=2))
    api.apply_config_map(NS, second)
    stored = raw.get(f"/api/v1/namespaces/{NS}/configmaps/{name}")
    assert stored["data"] == second["data"] != first["data"]
    assert stored["metadata"]["ownerReferences"][0]["kind"] == "GICJob"


def test_auth_secret_is_created_once(api: KubernetesApi, raw: KubeClient) -> None:
    first = launcher.auth_secret(NS, "wc", "uid-1", token=b"first")
    api.create_secret(NS, first)
    api.create_secret(NS, launcher.auth_secret(NS, "wc", "uid-1", token=b"second"))
    stored = raw.get(f"/api/v1/namespaces/{NS}/secrets/{first['metadata']['name']}")
    assert stored["data"] == first["data"]  # the first secret stays
    assert stored["immutable"] is True
    assert stored["metadata"]["ownerReferences"][0]["uid"] == "uid-1"


def test_an_invalid_secret_manifest_never_shows_its_data(api: KubernetesApi) -> None:
    bad = launcher.auth_secret(NS, "bad", "uid-2", token=b"do-not-print-me")
    bad["metadata"]["namez"] = "typo"
    encoded = bad["data"][launcher.AUTH_KEY]
    with pytest.raises(KubeError) as caught:
        api.create_secret(NS, bad)
    text = str(caught.value)
    assert "manifest is not valid" in text
    assert encoded not in text and "do-not-print-me" not in text


def test_auth_secrets_are_random_and_printable() -> None:
    first = launcher.auth_secret(NS, "wc", "u")["data"][launcher.AUTH_KEY]
    second = launcher.auth_secret(NS, "wc", "u")["data"][launcher.AUTH_KEY]
    assert first != second
    text = base64.b64decode(first)
    assert len(text) >= 43 and text.isascii() and b"\n" not in text  # 32 bytes, base64url


def test_long_job_names_give_valid_object_names() -> None:
    name = "a" * 250
    assert len(launcher.auth_secret_name(name)) <= 253
    assert len(launcher.executor_template_name(name)) <= 253
    assert launcher.auth_secret_name(name) != launcher.auth_secret_name("a" * 249)


@pytest.mark.parametrize("master", [None, "local[2]"])
def test_a_launch_creates_the_secret_and_template_first(tmp_path: Path, master: str | None) -> None:
    """A whole reconcile with the in-memory fake: with a k8s:// master the Secret and the
    ConfigMap the driver pod mounts exist before the pod does; a local driver needs
    neither."""
    from gic_operator.job_reconciler import JobReconciler
    from gic_operator.models import API_VERSION
    from gic_operator.storage_view import open_job_storage
    from gic_operator.testing.fake_kube import TestingKubeApi

    kube = TestingKubeApi()
    application: dict[str, Any] = {"image": "gic:1", "mainFile": "/opt/job.py"}
    if master is not None:
        application["sparkConf"] = {"spark.master": master}
    body = {
        "apiVersion": API_VERSION,
        "kind": "GICJob",
        "metadata": {"name": "wc", "namespace": NS},
        "spec": {"application": application, "checkpointing": {"storage": f"file://{tmp_path}"}},
    }
    kube.put_object("gicjobs", NS, body)
    JobReconciler(kube, open_job_storage).reconcile_named(NS, "wc")
    order = [
        call[0]
        for call in kube.calls
        if call[0] in ("create_secret", "apply_config_map", "create_pod")
    ]
    [pod] = kube.pods.values()
    if master is not None:
        assert order == ["create_pod"]
        assert not kube.secrets and not kube.config_maps
        return
    assert order == ["create_secret", "apply_config_map", "create_pod"]
    volumes = {v["name"]: v for v in pod["spec"]["volumes"]}
    assert (NS, volumes["spark-auth"]["secret"]["secretName"]) in kube.secrets
    assert (NS, volumes["executor-template"]["configMap"]["name"]) in kube.config_maps
