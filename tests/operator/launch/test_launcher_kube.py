"""The launch's Secret and ConfigMap without a server: manifests refused before any
request never show the secret, secrets are random, names stay valid, and a whole launch
with the in-memory fake creates the Secret and the template before the pod. (The same
objects through KubernetesApi against a real API server: ``tests/operator/apiserver``.)"""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

import pytest

from gic_operator.kube.kube_client import KubernetesApi
from gic_operator.launch import launch_plan, launcher
from gic_operator.operator_errors import KubeError

NS = "prod"


def test_an_invalid_secret_manifest_never_shows_its_data(unreachable: KubernetesApi) -> None:
    bad = launcher.auth_secret(NS, "bad", "uid-2", token=b"do-not-print-me")
    bad["metadata"]["namez"] = "typo"
    encoded = bad["data"][launch_plan.AUTH_KEY]
    with pytest.raises(KubeError) as caught:
        unreachable.create_secret(NS, bad)
    text = str(caught.value)
    assert "manifest is not valid" in text
    assert encoded not in text and "do-not-print-me" not in text


def test_auth_secrets_are_random_and_printable() -> None:
    first = launcher.auth_secret(NS, "wc", "u")["data"][launch_plan.AUTH_KEY]
    second = launcher.auth_secret(NS, "wc", "u")["data"][launch_plan.AUTH_KEY]
    assert first != second
    text = base64.b64decode(first)
    assert len(text) >= 43 and text.isascii() and b"\n" not in text  # 32 bytes, base64url


def test_executors_get_the_key_spark_derives_from_the_drivers_file() -> None:
    """Spark's driver reads the secret file and uses the base64 of its bytes as the key;
    executors read ``_SPARK_AUTH_SECRET`` as the key itself: the two must agree."""
    data = launcher.auth_secret(NS, "wc", "u", token=b"\x00\xff" * 16)["data"]
    file_bytes = base64.b64decode(data[launch_plan.AUTH_KEY])
    executor_key = base64.b64decode(data[launch_plan.AUTH_ENV_KEY]).decode("ascii")
    assert executor_key == base64.b64encode(file_bytes).decode("ascii")


def test_long_job_names_give_valid_object_names() -> None:
    name = "a" * 250
    assert len(launch_plan.auth_secret_name(name)) <= 253
    assert len(launch_plan.executor_template_name(name)) <= 253
    assert launch_plan.auth_secret_name(name) != launch_plan.auth_secret_name("a" * 249)


@pytest.mark.parametrize("master", [None, "local[2]"])
def test_a_launch_creates_the_secret_and_template_first(tmp_path: Path, master: str | None) -> None:
    """A whole reconcile with the in-memory fake: the job's control-key Secret, and with a
    k8s:// master the RPC Secret and the ConfigMap the driver pod mounts, exist before the
    pod does; a local driver needs only the control key."""
    from gic_operator.jobs.job_controller import JobController
    from gic_operator.models import API_VERSION
    from gic_operator.storage.job_storage import open_job_storage
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
    JobController(kube, open_job_storage).reconcile_named(NS, "wc")
    order = [
        call[0]
        for call in kube.calls
        if call[0] in ("create_secret", "apply_config_map", "create_pod")
    ]
    [pod] = kube.pods.values()
    control = (NS, "wc-gic-control")
    if master is not None:
        assert order == ["create_secret", "create_pod"]
        assert list(kube.secrets) == [control] and not kube.config_maps
        return
    assert order == ["create_secret", "create_secret", "apply_config_map", "create_pod"]
    assert control in kube.secrets
    volumes = {v["name"]: v for v in pod["spec"]["volumes"]}
    assert (NS, volumes["spark-auth"]["secret"]["secretName"]) in kube.secrets
    assert (NS, volumes["executor-template"]["configMap"]["name"]) in kube.config_maps
