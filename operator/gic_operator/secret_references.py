"""Which Secrets a GICJob may reference: never a job's Spark RPC or control secret.

The operator keeps each job's Spark RPC key in a Secret it creates and owns, named
``<job>-spark-rpc`` (``-spark-auth`` before;
:func:`gic_operator.launch.launch_plan.auth_secret_name`), and the job's control-request
key in ``<job>-gic-control`` (:mod:`gic_operator.control_keys`). Only that job's own
pods get them, through volumes and variables the operator writes. A Secret in the namespace can be
read by any pod of the namespace that names it, so a GICJob that named another job's RPC
Secret (``env[].valueFrom.secretKeyRef``, a ``secret`` volume, a ``projected`` volume's
``secret`` source, a ``csi`` volume's ``nodePublishSecretRef``, ``imagePullSecrets`` or
``checkpointing.credentialsSecret``) would hand its own code the other job's key, and
with it that job's driver RPC and block transfers.

Invariant: every Secret name a GICJob's spec can make a pod read is checked by
:func:`check_secret_reference` at validation (the models call it), and a name ending in
one of :data:`RPC_SECRET_SUFFIXES` is refused, whichever job it belongs to (a job's own
pods already get their own key: no job needs to name one). Names derived from GICJob names
always end in the suffix, hashed or not (:func:`gic_operator.kube.naming.object_name`),
so no RPC Secret escapes the check.

What this does not cover: a namespace is the boundary of Kubernetes' own access control.
Whoever may create pods, or read Secrets, in the namespace directly (not through a
GICJob) can read every job's Secret there; run jobs that must not reach each other's
keys in separate namespaces.

Pure functions; thread-safe.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

#: Name endings of the Secrets holding a job's Spark RPC key or control key (the
#: operator's own).
RPC_SECRET_SUFFIXES: Final = ("-spark-rpc", "-spark-auth", "-gic-control")


def check_secret_reference(name: str) -> str:
    """``name`` when a GICJob may reference a Secret so named; else :class:`ValueError`
    saying why and what to do."""
    if name.endswith(RPC_SECRET_SUFFIXES):
        raise ValueError(
            f"Secret {name!r} is a GIC job's Spark RPC or control secret (names ending in "
            f"{' or '.join(RPC_SECRET_SUFFIXES)} are the operator's): a GICJob may not "
            "reference one, its own job's pods get their key without it; reference "
            "another Secret (rename it if it is yours)"
        )
    return name


def _names(value: Any, *path: str) -> list[str]:
    for key in path:
        value = value.get(key) if isinstance(value, Mapping) else None
    return [value] if isinstance(value, str) else []


def volume_secret_names(source_type: str, source: Mapping[str, Any]) -> list[str]:
    """Names of the Secrets a volume source of ``source_type`` makes a pod read."""
    if source_type == "secret":
        return _names(source, "secretName")
    if source_type == "csi":
        return _names(source, "nodePublishSecretRef", "name")
    if source_type == "projected":
        sources = source.get("sources")
        items = sources if isinstance(sources, list) else []
        return [name for item in items for name in _names(item, "secret", "name")]
    return []


def check_volume_secrets(volume: str, source_type: str, source: Mapping[str, Any]) -> None:
    """:class:`ValueError` when volume ``volume`` makes a pod read an RPC Secret."""
    for name in volume_secret_names(source_type, source):
        try:
            check_secret_reference(name)
        except ValueError as exc:
            raise ValueError(f"volume {volume!r} ({source_type}): {exc}") from None
