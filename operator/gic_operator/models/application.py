"""What a GICJob runs: ``spec.application`` (image, main file, arguments, Spark
configuration, environment) and the resources of its driver and executors.

Invariants checked at validation (an invalid spec gets a ``Ready=False`` condition with
the message and nothing is launched):

* cores, executors and memory sizes are bounded (:data:`MAX_CORES`,
  :data:`MAX_EXECUTORS`, :data:`MEMORY_PATTERN`);
* ``sparkConf`` names only allowed Spark settings (:mod:`gic_operator.validation`), and
  ``env`` takes each variable either from a value or from a Secret key, a ConfigMap key
  or a field of the pod (:mod:`gic_operator.models.env`);
* ``driver.podTemplate`` and ``executor.podTemplate`` never weaken pod security nor take
  over the operator's labels, volumes and mounts (:mod:`gic_operator.models.pod_template`).
"""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated

from pydantic import AfterValidator, Field

from gic_operator.models.base import KubeModel
from gic_operator.models.env import EnvVar
from gic_operator.models.pod_template import PodTemplate
from gic_operator.validation import SPARK_CONF_VALUE_MAX, check_spark_conf

#: Upper bounds of the resources in the spec (the lower ones are at each field).
MAX_CORES = 256
MAX_EXECUTORS = 1000
#: Spark memory sizes: a number of at most 9 digits and an optional unit.
MEMORY_PATTERN = r"^[0-9]{1,9}[kmgtKMGT]?$"


class ImagePullPolicy(StrEnum):
    """Kubernetes image pull policy."""

    ALWAYS = "Always"
    IF_NOT_PRESENT = "IfNotPresent"
    NEVER = "Never"


class DriverSpec(KubeModel):
    """Resources of the Spark driver pod."""

    cores: int = Field(1, ge=1, le=MAX_CORES, description="CPU cores requested for the driver.")
    memory: str = Field(
        "1g",
        pattern=MEMORY_PATTERN,
        description="Driver JVM memory (Spark syntax: 512m, 2g).",
    )
    memory_overhead: str = Field(
        "512m",
        pattern=MEMORY_PATTERN,
        description="Memory added to the pod's limit for Python workers and native memory.",
    )
    pod_template: PodTemplate | None = Field(
        None,
        description="Labels, annotations, scheduling, volumes and resources added to the "
        "driver pod, under the operator's own fields (security settings are refused).",
    )


class ExecutorSpec(KubeModel):
    """Spark executors (pods Spark itself creates on Kubernetes)."""

    instances: int = Field(1, ge=1, le=MAX_EXECUTORS, description="Executor pods.")
    cores: int = Field(1, ge=1, le=MAX_CORES, description="CPU cores per executor.")
    memory: str = Field(
        "1g", pattern=MEMORY_PATTERN, description="Executor JVM memory (Spark syntax)."
    )
    pod_template: PodTemplate | None = Field(
        None,
        description="Labels, annotations, scheduling, volumes and resources added to every "
        "executor pod (through the executor pod template), under the operator's and "
        "Spark's own fields (security settings are refused).",
    )


class ApplicationSpec(KubeModel):
    """What to run: the driver's image, its main file and Spark's configuration."""

    image: str = Field(
        min_length=1,
        description="Container image with Spark and the GIC runtime (the Dockerfile's "
        "spark-runtime target), used for the driver and the executors.",
    )
    image_pull_policy: ImagePullPolicy = Field(
        ImagePullPolicy.IF_NOT_PRESENT, description="Pull policy for the image."
    )
    main_file: str = Field(
        min_length=1,
        description="The job's Python file inside the image (local:///opt/app/job.py or an "
        "absolute path); it uses gic_runtime.spark and reads its settings from GIC_* "
        "variables the operator sets.",
    )
    arguments: list[str] = Field(
        default_factory=list, max_length=256, description="Arguments for the main file."
    )
    spark_conf: Annotated[
        dict[str, Annotated[str, Field(max_length=SPARK_CONF_VALUE_MAX)]],
        AfterValidator(check_spark_conf),
    ] = Field(
        default_factory=dict,
        max_length=256,
        description="Extra Spark configuration, from an allowlist of settings (SQL and "
        "streaming tuning, memory, scheduling, serialization, executor CPU requests and node "
        "selectors ...; docs/operations.md lists it). Settings that would change the pods "
        "Spark creates (volumes, pod templates, service accounts, images, secrets) or its "
        "authentication are refused, as are those the operator sets itself, and keys Spark "
        "does not define (misspellings; spark.hadoop.* is open). spark.master may be "
        "local[...] or the cluster's API server (the default); spark.log.level is WARN unless set.",
    )
    driver: DriverSpec = Field(
        default_factory=lambda: DriverSpec.model_validate({}), description="Driver resources."
    )
    executor: ExecutorSpec = Field(
        default_factory=lambda: ExecutorSpec.model_validate({}), description="Executors."
    )
    env: list[EnvVar] = Field(
        default_factory=list,
        max_length=128,
        description="Extra environment variables of the driver and the executors: a value, "
        "or valueFrom a Secret key, a ConfigMap key or a field of the pod.",
    )
