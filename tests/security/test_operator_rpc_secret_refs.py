"""A GICJob cannot name another job's Spark RPC Secret (``<job>-spark-rpc``).

A Secret is readable by every pod of its namespace that names it; a GICJob naming
another job's RPC Secret in a variable, a volume or as its credentials would give its own
code that job's key, and with it that job's driver RPC and block transfers. Every way a
spec can make a pod read a Secret is refused at validation, with the field and the fix.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError
from tests.operator.jobs.test_job_lifecycle import NS, World

from gic_operator.launch.launch_plan import auth_secret_name
from gic_operator.models import GICJobSpec
from gic_operator.validation import describe_validation_error

VICTIM = auth_secret_name("victim")
LONG_VICTIM = auth_secret_name("v" * 250)  # shortened with a hash, same suffix


def _spec(**application: Any) -> dict[str, Any]:
    return {
        "application": {"image": "gic:1", "mainFile": "/opt/job.py", **application},
        "checkpointing": {"storage": "s3://bucket/gic"},
    }


def _env(secret: str) -> dict[str, Any]:
    ref = {"secretKeyRef": {"name": secret, "key": "executor-key"}}
    return _spec(env=[{"name": "STOLEN", "valueFrom": ref}])


def _volume(source: dict[str, Any], role: str = "executor") -> dict[str, Any]:
    template = {"volumes": [{"name": "loot", **source}]}
    return _spec(**{role: {"podTemplate": template}})


def _credentials(secret: str) -> dict[str, Any]:
    spec = _spec()
    spec["checkpointing"]["credentialsSecret"] = secret
    return spec


WAYS: dict[str, Any] = {
    "env valueFrom": _env,
    "secret volume": lambda s: _volume({"secret": {"secretName": s}}),
    "driver secret volume": lambda s: _volume({"secret": {"secretName": s}}, "driver"),
    "projected volume": lambda s: _volume(
        {"projected": {"sources": [{"configMap": {"name": "x"}}, {"secret": {"name": s}}]}}
    ),
    "csi volume": lambda s: _volume(
        {"csi": {"driver": "secrets-store.csi.k8s.io", "nodePublishSecretRef": {"name": s}}}
    ),
    "image pull secret": lambda s: _spec(
        driver={"podTemplate": {"imagePullSecrets": [{"name": s}]}}
    ),
    "credentialsSecret": _credentials,
}


@pytest.mark.parametrize("way", sorted(WAYS))
@pytest.mark.parametrize("secret", [VICTIM, LONG_VICTIM, "victim-spark-auth", "victim-gic-control"])
def test_another_jobs_rpc_secret_is_refused(way: str, secret: str) -> None:
    with pytest.raises(ValidationError) as info:
        GICJobSpec.model_validate(WAYS[way](secret))
    message = describe_validation_error(info.value, "spec")
    assert f"Secret {secret!r} is a GIC job's Spark RPC or control secret" in message
    assert "reference another Secret" in message


@pytest.mark.parametrize("way", sorted(WAYS))
def test_other_secrets_are_accepted(way: str) -> None:
    GICJobSpec.model_validate(WAYS[way]("s3-credentials"))


def test_a_job_naming_another_jobs_rpc_secret_is_invalid_and_gets_no_pod(tmp_path: Path) -> None:
    world = World(tmp_path / "store")
    ref = {"secretKeyRef": {"name": VICTIM, "key": "executor-key"}}
    app = {**world.spec()["application"], "env": [{"name": "STOLEN", "valueFrom": ref}]}
    world.apply_job("thief", application=app)
    status = world.reconcile("thief")
    assert status["phase"] == "Invalid"
    assert "spec.application.env[0].valueFrom.secretKeyRef.name" in status["message"]
    assert VICTIM in status["message"]
    assert world.kube.list_pods(NS, {}) == []
