"""Nothing reaches a Spark pod through the values of ``sparkConf`` or a ``podTemplate``
that the operator refuses by name.

* JVM options are judged as Spark splits them: ``-D"spark.kubernetes...volumes.hostPath..."``
  is the hostPath setting and ``-X'mx64g'`` a heap size once quotes are gone;
* secrets are not written in plain text into the pod's command, whether as a Hadoop
  setting (``spark.hadoop.fs.s3a.encryption.key``) or a JVM property
  (``-Djavax.net.ssl.keyStorePassword``); the message says where secrets go instead and
  never quotes the value.

Pod templates that would mount a token: ``test_pods_token_volumes.py``.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest
from pydantic import ValidationError

from gic_operator.launch import launch_config
from gic_operator.launch.launch_plan import LaunchPlan
from gic_operator.models import GICJobSpec
from gic_operator.validation import describe_validation_error

BASE: dict[str, Any] = {
    "application": {"image": "registry.example/gic:1", "mainFile": "/opt/app/job.py"},
    "checkpointing": {"storage": "s3://bucket/gic", "credentialsSecret": "s3-creds"},
}
HOST_PATH = "spark.kubernetes.executor.volumes.hostPath.host.mount.path"
SECRET_VALUE = "hunter2-do-not-print"


def spec(**application: Any) -> dict[str, Any]:
    body = copy.deepcopy(BASE)
    body["application"].update(application)
    return body


def refusal(body: dict[str, Any]) -> str:
    with pytest.raises(ValidationError) as caught:
        GICJobSpec.model_validate(body)
    return describe_validation_error(caught.value, "spec")


@pytest.mark.parametrize("side", ["driver", "executor"])
@pytest.mark.parametrize(
    ("value", "why"),
    [
        (f'-D"{HOST_PATH}=/"', f"sets the Spark setting {HOST_PATH}"),
        (f"-D'{HOST_PATH}'=/", f"sets the Spark setting {HOST_PATH}"),
        (f"-XX:+UseG1GC -D{HOST_PATH[:6]}\\{HOST_PATH[6:]}=/", "sets the Spark setting"),
        (f'"-D{HOST_PATH}=/"', "sets the Spark setting"),
        ("-X'mx64g'", "-Xmx64g sizes the heap"),
        ('-"Xms"8g', "-Xms8g sizes the heap"),
        ("-XX:MaxHeapSize=64g", "sizes the heap"),
        ("-XX:MaxRAMPercentage=100", "sizes the heap"),
        ("@/tmp/more-options", "reads more options from a file"),
        ("-XX:VMOptionsFile=/tmp/x", "reads more options from a file"),
        (f"-Da='1\n-D{HOST_PATH}=/'", "control character"),
        ("-Dx='unterminated", "unterminated quote"),
    ],
)
def test_java_options_are_judged_as_spark_splits_them(side: str, value: str, why: str) -> None:
    key = f"spark.{side}.extraJavaOptions"
    text = refusal(spec(sparkConf={key: value}))
    assert f'spec.application.sparkConf["{key}"]: is refused' in text
    assert why in text


@pytest.mark.parametrize(
    "option",
    [
        "-Djavax.net.ssl.keyStorePassword",
        "-Djavax.net.ssl.trustStorePassword",
        "-Daws.secretAccessKey",
        "-Daws.accessKeyId",
        "-Daws.sessionToken",
        "-Dfs.s3a.secret.key",
        '-D"javax.net.ssl.keyStorePassword"',
    ],
)
def test_secret_java_properties_are_refused_without_echo(option: str) -> None:
    key = "spark.driver.extraJavaOptions"
    text = refusal(spec(sparkConf={key: f"-XX:+UseG1GC {option}={SECRET_VALUE}"}))
    assert "holds a secret" in text
    assert "valueFrom.secretKeyRef" in text and "credentialsSecret" in text
    assert SECRET_VALUE not in text


@pytest.mark.parametrize(
    "key",
    [
        "spark.hadoop.fs.s3a.encryption.key",
        "spark.hadoop.fs.s3a.server-side-encryption.key",
        "spark.hadoop.fs.s3a.bucket.data.secret.key",
        "spark.hadoop.fs.azure.account.key.acct.dfs.core.windows.net",
        "spark.hadoop.fs.gs.auth.service.account.private.key",
        "spark.hadoop.fs.s3a.session.token",
        "spark.hadoop.fs.azure.account.oauth2.client.secret",
        "spark.sql.catalog.c.passphrase",
        "spark.sql.catalog.c.credential",
    ],
)
def test_secret_settings_are_refused_without_echo(key: str) -> None:
    text = refusal(spec(sparkConf={key: SECRET_VALUE}))
    assert f'sparkConf["{key}"]: looks like it holds a secret' in text
    assert "valueFrom.secretKeyRef" in text and "credentialsSecret" in text
    assert SECRET_VALUE not in text


def test_ordinary_options_and_secret_locators_pass_into_the_command() -> None:
    conf = {
        "spark.driver.extraJavaOptions": "-XX:+UseG1GC -verbose:gc '-Dlog4j2.level=warn'",
        "spark.executor.extraJavaOptions": '-XX:+PreserveFramePointer -Dapp.name="word count"',
        "spark.hadoop.fs.s3a.aws.credentials.provider": "x.Provider",
        "spark.hadoop.hadoop.security.credential.provider.path": "jceks://file/opt/c.jceks",
        "spark.hadoop.fs.s3a.delegation.token.binding": "x.Binding",
        "spark.io.encryption.keySizeBits": "256",
    }
    plan = LaunchPlan(
        namespace="prod",
        name="wordcount",
        uid="uid-1",
        spec=GICJobSpec.model_validate(spec(sparkConf=conf)),
        job_id="prod.wordcount",
        epoch=3,
    )
    command = launch_config.driver_command(plan)
    for key, value in conf.items():
        assert f"{key}={value}" in command


@pytest.mark.parametrize(
    "name",
    [
        "JAVA_TOOL_OPTIONS",
        "JDK_JAVA_OPTIONS",
        "_JAVA_OPTIONS",
        "SPARK_SUBMIT_OPTS",
        "SPARK_JAVA_OPTS",
        "SPARK_CONF_DIR",
    ],
)
@pytest.mark.parametrize("how", ["value", "valueFrom"])
def test_variables_the_jvm_reads_as_options_are_refused(name: str, how: str) -> None:
    """``JAVA_TOOL_OPTIONS=-Dspark.kubernetes...`` would be the same smuggle through the
    environment, and a ``valueFrom`` cannot be judged at all."""
    source = {"configMapKeyRef": {"name": "opts", "key": "k"}}
    var = {"name": name, "value": f"-D{HOST_PATH}=/"} if how == "value" else {"name": name}
    if how == "valueFrom":
        var["valueFrom"] = source
    text = refusal(spec(env=[{"name": "TZ", "value": "UTC"}, var]))
    assert f"spec.application.env[1].name: env {name} is not allowed" in text
    assert "spark.driver.extraJavaOptions" in text
