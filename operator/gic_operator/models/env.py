"""Environment variables of a GICJob's driver and executors (``spec.application.env``):
Kubernetes' ``EnvVar`` shape, restricted to what a job may take a value from.

Invariants checked at validation: a variable has a plain ``value`` or one ``valueFrom``
(exactly one of a Secret key, a ConfigMap key or a field of the pod), never both; names
and sizes are bounded; a field reference names only fields of the pod's own downward API;
no variable is one the JVM or Spark's scripts read as options or settings
(:data:`OPTION_VARIABLES`: ``JAVA_TOOL_OPTIONS``, ``SPARK_CONF_DIR``, ...), which would pass
JVM options and Spark settings around the sparkConf checks.
Anything secret comes from a Secret (``valueFrom.secretKeyRef``): a plain value is
readable by whoever may read the GICJob or its pods.
"""

from __future__ import annotations

from collections.abc import Mapping

from pydantic import Field, field_validator, model_validator

from gic_operator.models.base import KubeModel
from gic_operator.secret_references import check_secret_reference


class SecretKeySelector(KubeModel):
    """A key of a Secret in the job's namespace."""

    name: str = Field(min_length=1, max_length=253, description="Name of the Secret.")
    key: str = Field(min_length=1, max_length=253, description="Key in the Secret.")
    optional: bool | None = Field(
        None, description="Start the pod even when the Secret or the key is missing."
    )

    @field_validator("name")
    @classmethod
    def _not_rpc_secret(cls, value: str) -> str:
        return check_secret_reference(value)


class ConfigMapKeySelector(KubeModel):
    """A key of a ConfigMap in the job's namespace."""

    name: str = Field(min_length=1, max_length=253, description="Name of the ConfigMap.")
    key: str = Field(min_length=1, max_length=253, description="Key in the ConfigMap.")
    optional: bool | None = Field(
        None, description="Start the pod even when the ConfigMap or the key is missing."
    )


#: Pod fields a variable may take its value from (Kubernetes' downward API for env).
FIELD_PATH_PATTERN = (
    r"^(metadata\.(name|namespace|uid)"
    r"|metadata\.(labels|annotations)\['[A-Za-z0-9./_-]{1,317}'\]"
    r"|spec\.(nodeName|serviceAccountName)|status\.(hostIP|hostIPs|podIP|podIPs))$"
)


class ObjectFieldSelector(KubeModel):
    """A field of the pod itself (each pod gets its own value)."""

    field_path: str = Field(
        pattern=FIELD_PATH_PATTERN,
        description="metadata.name, metadata.namespace, metadata.uid, "
        "metadata.labels['<key>'], metadata.annotations['<key>'], spec.nodeName, "
        "spec.serviceAccountName, status.hostIP, status.hostIPs, status.podIP or status.podIPs.",
    )
    api_version: str | None = Field(
        None, description="Version of the schema fieldPath is written in (default v1)."
    )


class EnvVarSource(KubeModel):
    """Where a variable's value comes from: exactly one of the three."""

    secret_key_ref: SecretKeySelector | None = Field(
        None, description="A key of a Secret (the value never appears in the pod spec)."
    )
    config_map_key_ref: ConfigMapKeySelector | None = Field(
        None, description="A key of a ConfigMap."
    )
    field_ref: ObjectFieldSelector | None = Field(None, description="A field of the pod.")

    @model_validator(mode="after")
    def _exactly_one(self) -> EnvVarSource:
        given = [self.secret_key_ref, self.config_map_key_ref, self.field_ref]
        if sum(source is not None for source in given) != 1:
            raise ValueError(
                "valueFrom needs exactly one of secretKeyRef, configMapKeyRef or fieldRef"
            )
        return self


#: Variables the JVM or Spark's scripts read as options or settings, with what they do: a
#: job sets JVM options and Spark settings through sparkConf, where they are checked.
OPTION_VARIABLES: Mapping[str, str] = {
    "JAVA_TOOL_OPTIONS": "every JVM in the pod reads it as options",
    "JDK_JAVA_OPTIONS": "the java launcher reads it as options",
    "_JAVA_OPTIONS": "every JVM in the pod reads it as options",
    "SPARK_SUBMIT_OPTS": "spark-submit passes it to the driver's JVM as options",
    "SPARK_JAVA_OPTS": "older Spark scripts pass it to the JVM as options",
    "SPARK_CONF_DIR": "Spark reads spark-defaults.conf from it as settings",
}


class EnvVar(KubeModel):
    """An environment variable of the driver and the executors (secrets: valueFrom)."""

    # A plain value is readable by anyone who may read the GICJob or its pods, so anything
    # secret comes from a Secret through valueFrom.secretKeyRef.

    name: str = Field(
        min_length=1,
        max_length=256,
        pattern=r"^[A-Za-z_][A-Za-z0-9_.-]*$",
        description="Variable name.",
    )
    value: str = Field("", max_length=32768, description="Variable value (plain text).")
    value_from: EnvVarSource | None = Field(
        None, description="Take the value from a Secret, a ConfigMap or the pod (not with value)."
    )

    @field_validator("name")
    @classmethod
    def _not_an_option_channel(cls, value: str) -> str:
        if value in OPTION_VARIABLES:
            raise ValueError(
                f"env {value} is not allowed: {OPTION_VARIABLES[value]}, past the sparkConf "
                "allowlist; set JVM options with sparkConf spark.driver.extraJavaOptions "
                "and spark.executor.extraJavaOptions, Spark settings as sparkConf entries"
            )
        return value

    @model_validator(mode="after")
    def _value_or_source(self) -> EnvVar:
        if self.value and self.value_from is not None:
            raise ValueError(f"env {self.name}: give value or valueFrom, not both")
        return self
