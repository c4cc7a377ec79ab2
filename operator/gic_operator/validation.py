"""Readable messages for invalid custom resources, and the Spark settings a GICJob may set.

A pydantic :class:`~pydantic.ValidationError` lists every problem with its location in
Python names; users wrote camelCase YAML, so the message names each field the way it
appears in their manifest (``spec.checkpointing.storage``, and a map key as
``spec.application.sparkConf["spark.x"]``) and says what is wrong.

``spec.application.sparkConf`` is checked against an allowlist (:func:`check_spark_conf`,
used by the GICJob model): whoever writes a GICJob chooses the code its driver runs, but
not the shape of the pods Spark creates, their service account, image, volumes and
secrets, nor Spark's RPC authentication; those are the operator's. A key is accepted
when it is in :data:`ALLOWED_SPARK_CONF` (exactly, or under one of its prefixes ending in
``.``), matches none of the refusals (:data:`OPERATOR_SPARK_CONF`,
:data:`FORBIDDEN_SPARK_CONF`, secret-looking names) and, when a prefix allowed it, is a
setting Spark defines (:mod:`gic_operator.spark_settings`: Spark's own list, generated from
the pinned PySpark, plus open-ended families such as ``spark.hadoop.*``); a misspelled key
is refused with the closest known key suggested. Values are judged too: JVM options as
Spark splits them, and secrets under secret-looking names
(:mod:`gic_operator.spark_conf_values`). Every refused key is reported, each
under its own location, in the one message of the invalid spec. A ``podTemplate``'s
refusals (security settings, host namespaces, ``hostPath`` and other volume types,
the operator's labels, volumes and mount paths) are checked by its model
(:mod:`gic_operator.models.pod_template`) and reported here the same way, each at its
field (``spec.application.driver.podTemplate.volumes[0].hostPath``).

Pure functions over immutable tables; thread-safe.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping

from pydantic import ValidationError
from pydantic.alias_generators import to_camel
from pydantic_core import InitErrorDetails, PydanticCustomError

from gic_operator import spark_conf_values, spark_settings

#: Longest value of one sparkConf entry.
SPARK_CONF_VALUE_MAX = 4096
#: Problems listed in one message at most (the rest are counted).
MAX_LISTED_PROBLEMS = 20
#: pydantic error type of a refused sparkConf key (its location ends with the key).
SPARK_CONF_ERROR = "spark_conf"
#: The master a GICJob gets by default: the API server of its own cluster.
IN_CLUSTER_MASTER = "k8s://https://kubernetes.default.svc"

#: Spark settings a GICJob may set: exact keys, and prefixes (ending in ``.``) whose keys
#: may all be set. Nothing here changes the pods Spark creates beyond CPU, scheduling,
#: labels and annotations, or weakens authentication.
ALLOWED_SPARK_CONF: tuple[str, ...] = (
    # SQL, Structured Streaming and the state store
    "spark.sql.",
    "spark.default.parallelism",
    # memory, serialization, compression, shuffle, storage
    "spark.memory.",
    "spark.executor.memoryOverhead",
    "spark.executor.memoryOverheadFactor",
    "spark.executor.pyspark.memory",
    "spark.kubernetes.memoryOverheadFactor",
    "spark.driver.maxResultSize",
    "spark.serializer",
    "spark.kryo.",
    "spark.kryoserializer.",
    "spark.io.compression.",
    "spark.io.encryption.",
    "spark.broadcast.",
    "spark.shuffle.",
    "spark.storage.",
    "spark.cleaner.",
    # scheduling, placement, fault tolerance
    "spark.locality.",
    "spark.scheduler.",
    "spark.speculation",
    "spark.speculation.",
    "spark.task.",
    "spark.stage.",
    "spark.excludeOnFailure.",
    "spark.executor.heartbeatInterval",
    "spark.network.timeout",
    "spark.network.timeoutInterval",
    "spark.network.crypto.",
    "spark.rpc.",
    # JVM options (never Spark settings or heap sizes: checked below)
    "spark.driver.extraJavaOptions",
    "spark.executor.extraJavaOptions",
    # Python workers
    "spark.python.",
    # code shipped with the job
    "spark.jars",
    "spark.jars.packages",
    "spark.jars.repositories",
    "spark.jars.excludes",
    "spark.submit.pyFiles",
    "spark.files",
    # observability
    "spark.ui.",
    "spark.eventLog.",
    "spark.metrics.",
    "spark.log.",
    # Hadoop file systems used by the job's own sources and sinks
    "spark.hadoop.",
    # executor pods: CPU, placement, bookkeeping (pod security stays the operator's)
    "spark.kubernetes.executor.request.cores",
    "spark.kubernetes.executor.limit.cores",
    "spark.kubernetes.executor.scheduler.name",
    "spark.kubernetes.executor.deleteOnTermination",
    "spark.kubernetes.executor.podNamePrefix",
    "spark.kubernetes.executor.apiPollingInterval",
    "spark.kubernetes.executor.missingPodDetectDelta",
    "spark.kubernetes.executor.node.selector.",
    "spark.kubernetes.node.selector.",
    "spark.kubernetes.executor.label.",
    "spark.kubernetes.executor.annotation.",
    "spark.kubernetes.allocation.",
    # the master: local[...] or the cluster's API server (value checked below)
    "spark.master",
)

#: Settings the operator sets itself, with what decides them.
OPERATOR_SPARK_CONF: Mapping[str, str] = {
    "spark.app.name": "the GICJob's name",
    "spark.executor.instances": "spec.application.executor.instances",
    "spark.executor.cores": "spec.application.executor.cores",
    "spark.executor.memory": "spec.application.executor.memory",
    "spark.driver.cores": "spec.application.driver.cores",
    "spark.driver.memory": "spec.application.driver.memory",
    "spark.driver.memoryOverhead": "spec.application.driver.memoryOverhead",
    "spark.kubernetes.container.image": "spec.application.image",
    "spark.kubernetes.driver.container.image": "spec.application.image",
    "spark.kubernetes.executor.container.image": "spec.application.image",
    "spark.kubernetes.container.image.pullPolicy": "spec.application.imagePullPolicy",
    "spark.kubernetes.namespace": "the GICJob's namespace",
    "spark.kubernetes.driver.pod.name": "each launch",
    "spark.driver.host": "each launch",
    "spark.driver.port": "each launch",
    "spark.driver.bindAddress": "each launch",
    "spark.kubernetes.executor.useDriverPodIP": "the operator (executors use the Service)",
    "spark.driver.blockManager.port": "each launch",
    "spark.blockManager.port": "each launch",
    "spark.kubernetes.executor.disableConfigMap": "the operator (no ConfigMaps from drivers)",
    "spark.kubernetes.driver.service.deleteOnTermination": "the operator (it owns the service)",
    "spark.kubernetes.driver.ownPersistentVolumeClaim": "the operator (no volume claims)",
    "spark.kubernetes.driver.reusePersistentVolumeClaim": "the operator (no volume claims)",
}

#: Refusals with their reason, checked before the allowlist (some refused keys lie under an
#: allowed prefix).
FORBIDDEN_SPARK_CONF: tuple[tuple[re.Pattern[str], str], ...] = tuple(
    (re.compile(pattern), reason)
    for pattern, reason in (
        (
            r"^spark\.kubernetes\.(driver|executor)\.volumes\.",
            "mounts volumes (hostPath, claims, ...) into Spark pods; Spark pods get no "
            "volumes but the operator's",
        ),
        (
            r"^spark\.kubernetes\.(driver|executor)\.podTemplate",
            "pod templates are the operator's: it keeps every Spark pod restricted",
        ),
        (
            r"^spark\.kubernetes\.authenticate\.|serviceAccountName$",
            "Spark's Kubernetes identity is the operator's: drivers run as service account "
            "gic-spark and executors without a token",
        ),
        (
            r"^spark\.authenticate",
            "RPC authentication is always on, with a secret of the job's own",
        ),
        (
            r"^spark\.kubernetes\.(driver|executor)\.(secrets|secretKeyRef)\.",
            "mounts Secrets; give variables from Secrets with spec.application.env "
            "valueFrom.secretKeyRef",
        ),
        (
            r"^spark\.kubernetes\.((driver|executor)\.)?securityContext\.",
            "pod security is the operator's",
        ),
        (
            r"^spark\.kubernetes\.(driver|executor)\.pod\.(featureSteps|excludedFeatureSteps)$",
            "changes how Spark builds its pods",
        ),
        (
            r"^spark\.executorEnv\.|^spark\.kubernetes\.driverEnv\.",
            "use spec.application.env (valueFrom for anything secret), which reaches the "
            "driver and the executors",
        ),
        (
            r"^spark\.kubernetes\.executor\.label\.(gic\.io/|app\.kubernetes\.io/managed-by$)",
            "the operator's labels select the job's pods (network policy, recovery)",
        ),
        (
            r"^spark\.kubernetes\.executor\.annotation\.([^/]*\.)?kubernetes\.io/",
            "annotations under kubernetes.io/ change how Kubernetes runs the pod",
        ),
    )
)

_KEY = re.compile(r"^spark\.[A-Za-z0-9_.:/-]+$")
_LOCAL_MASTER = re.compile(r"^local(\[(\*|[1-9][0-9]{0,3})(,[1-9][0-9]{0,3})?\])?$")
_JAVA_OPTIONS = ("spark.driver.extraJavaOptions", "spark.executor.extraJavaOptions")
_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def _allowed(key: str) -> bool:
    return any(
        key.startswith(entry) if entry.endswith(".") else key == entry
        for entry in ALLOWED_SPARK_CONF
    )


def _unknown(key: str) -> str | None:
    """Why an allowed ``key`` is not a Spark setting, or ``None`` when Spark knows it (keys
    listed exactly in :data:`ALLOWED_SPARK_CONF` are known by construction)."""
    if key in ALLOWED_SPARK_CONF or spark_settings.is_known(key):
        return None
    suggestion = spark_settings.closest(key)
    hint = f"did you mean {suggestion}?" if suggestion else "check the spelling"
    return (
        f"is not a setting Spark {spark_settings.pyspark_version()} defines ({hint} Spark "
        "ignores unknown keys, so a misspelled one would silently do nothing)"
    )


def spark_conf_problem(key: str, value: str) -> str | None:
    """Why a GICJob may not set Spark setting ``key`` to ``value``, or ``None``."""
    if not _KEY.match(key):
        return "is not a Spark setting (spark.<name>, letters, digits and . _ - / : only)"
    if key in OPERATOR_SPARK_CONF:
        return f"is set by the operator from {OPERATOR_SPARK_CONF[key]}; remove it"
    for pattern, reason in FORBIDDEN_SPARK_CONF:
        if pattern.search(key):
            return f"is not allowed: {reason}"
    if not _allowed(key):
        return (
            "is not a Spark setting a GICJob may set (see the sparkConf allowlist in "
            "docs/operations.md)"
        )
    if spark_conf_values.secret_name(key):
        return (
            "looks like it holds a secret, and sparkConf values are plain text in the pod's "
            f"command; {spark_conf_values.SECRET_ADVICE}"
        )
    unknown = _unknown(key)
    if unknown is not None:
        return unknown
    if key == "spark.master" and not (value == IN_CLUSTER_MASTER or _LOCAL_MASTER.match(value)):
        return (
            f"must be local, local[N], local[*] or {IN_CLUSTER_MASTER} (the driver's "
            f"service account token is only ever sent to its own cluster), not {value!r}"
        )
    if key in _JAVA_OPTIONS:
        return spark_conf_values.java_options_problem(value)
    return None


def check_spark_conf(conf: dict[str, str]) -> dict[str, str]:
    """``conf`` unchanged when every key may be set; else raise a
    :class:`~pydantic.ValidationError` with one error per refused key, located at the key
    (so the message names ``sparkConf["<key>"]``)."""
    errors: list[InitErrorDetails] = []
    for key in sorted(conf):
        problem = spark_conf_problem(key, conf[key])
        if problem is not None:
            errors.append(
                InitErrorDetails(
                    type=PydanticCustomError(SPARK_CONF_ERROR, problem),
                    loc=(key,),
                    input=key,
                )
            )
    if errors:
        raise ValidationError.from_exception_data("sparkConf", errors)
    return conf


def _location(prefix: str, loc: tuple[int | str, ...], keys_at_end: int = 0) -> str:
    """``prefix`` and ``loc`` as a manifest path: camelCase fields, ``[i]`` for list items,
    ``["key"]`` for map keys (the last ``keys_at_end`` items, and any item that is not a
    plain name)."""
    out = prefix
    for index, item in enumerate(loc):
        as_key = index >= len(loc) - keys_at_end
        if isinstance(item, int):
            out += f"[{item}]"
        elif as_key or not _IDENTIFIER.match(item):
            out += f"[{json.dumps(item)}]"
        else:
            out += "." + (to_camel(item) if "_" in item else item)
    return out


def describe_validation_error(exc: ValidationError, prefix: str) -> str:
    """One line per problem: ``<field>: <what is wrong>``; fix hint at the end."""
    lines = []
    for error in exc.errors():
        kind = error.get("type", "")
        keys = 1 if kind == SPARK_CONF_ERROR else 0
        where = _location(prefix, tuple(error.get("loc", ())), keys)
        if kind == "missing":
            text = "is required"
        elif kind == "extra_forbidden":
            text = "is not a known field (check the spelling; kubectl explain gicjob.spec)"
        else:
            text = str(error.get("msg", "is invalid"))
            text = text.removeprefix("Value error, ")
        lines.append(f"{where}: {text}")
    if len(lines) > MAX_LISTED_PROBLEMS:
        rest = len(lines) - MAX_LISTED_PROBLEMS
        lines = [*lines[:MAX_LISTED_PROBLEMS], f"and {rest} more"]
    return "invalid spec: " + "; ".join(lines) + ". Fix the manifest and apply it again."
