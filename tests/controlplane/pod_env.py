"""A container's environment and command line, resolved the way a kubelet does.

* ``envFrom`` first (each ``secretRef``/``configMapRef`` adds all its keys, with the
  optional ``prefix``), then ``env`` in order, later entries winning;
* ``env[].value`` expands ``$(NAME)`` from the variables defined before it (``$$`` is a
  literal ``$``; unknown references stay as written);
* ``valueFrom``: ``secretKeyRef`` and ``configMapKeyRef`` (read through the API as the
  node, which the Node authorizer allows only for pods bound to it; ``optional: true``
  skips a missing source or key), ``fieldRef`` to ``metadata.name|namespace|uid``,
  ``spec.nodeName|serviceAccountName``, ``status.podIP|hostIP`` (both 127.0.0.1),
  ``status.podIPs|hostIPs`` and ``metadata.labels['k']``/``metadata.annotations['k']``;
  ``resourceFieldRef`` is not supported (the container is not started);
* the command line is ``command`` + ``args``, both with ``$(NAME)`` expansion; a
  container without ``command`` cannot run (image entrypoints are not known here).

A missing required source raises :class:`EnvError` (the kubelet reports
``CreateContainerConfigError`` and tries again later).

Thread-safety: pure functions, apart from the API reads through the given client.
"""

from __future__ import annotations

import base64
import re
from collections.abc import Mapping
from typing import Any

from .api import ApiClient, ApiError

_REFERENCE = re.compile(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_.-]*)\)")
_BRACKETED = re.compile(r"^metadata\.(labels|annotations)\['(.+)'\]$")
#: The node's address (``status.hostIP``; also where the API server listens).
HOST_IP = "127.0.0.1"


class EnvError(Exception):
    """The environment cannot be built (a required secret, configmap or key is missing)."""


def expand(text: str, env: Mapping[str, str]) -> str:
    """Expand ``$(NAME)`` references as Kubernetes does."""

    def replace(match: re.Match[str]) -> str:
        if match.group(0) == "$$":
            return "$"
        name = match.group(1)
        return env[name] if name in env else match.group(0)

    return _REFERENCE.sub(replace, text)


def _source(
    client: ApiClient, namespace: str, kind: str, name: str, optional: bool
) -> dict[str, str]:
    plural = "secrets" if kind == "secret" else "configmaps"
    try:
        obj = client.get(f"/api/v1/namespaces/{namespace}/{plural}/{name}")
    except ApiError as exc:
        if exc.status == 404 and optional:
            return {}
        if exc.status == 404:
            raise EnvError(f'{kind} "{name}" not found') from exc
        raise EnvError(f'{kind} "{name}" cannot be read: {exc}') from exc
    if kind == "secret":
        data = obj.get("data") or {}
        return {k: base64.b64decode(v).decode("utf-8", "replace") for k, v in data.items()}
    return dict(obj.get("data") or {})


def _field(pod: dict[str, Any], path: str, pod_ip: str) -> str:
    meta, spec = pod.get("metadata") or {}, pod.get("spec") or {}
    simple = {
        "metadata.name": meta.get("name", ""),
        "metadata.namespace": meta.get("namespace", ""),
        "metadata.uid": meta.get("uid", ""),
        "spec.nodeName": spec.get("nodeName", ""),
        "spec.serviceAccountName": spec.get("serviceAccountName", "default"),
        "status.podIP": pod_ip,
        "status.podIPs": pod_ip,
        "status.hostIP": HOST_IP,
        "status.hostIPs": HOST_IP,
    }
    if path in simple:
        return str(simple[path])
    if match := _BRACKETED.match(path):
        return str((meta.get(match.group(1)) or {}).get(match.group(2), ""))
    raise EnvError(f"unsupported fieldRef: {path}")


def resolve_env(
    client: ApiClient, pod: dict[str, Any], container: dict[str, Any], pod_ip: str = HOST_IP
) -> dict[str, str]:
    """The variables a container's spec defines (not including the inherited ones);
    ``pod_ip`` is what ``status.podIP`` gives."""
    namespace = pod["metadata"]["namespace"]
    env: dict[str, str] = {}
    for source in container.get("envFrom") or []:
        for kind, key in (("secret", "secretRef"), ("configmap", "configMapRef")):
            if key in source:
                ref = source[key]
                values = _source(client, namespace, kind, ref["name"], bool(ref.get("optional")))
                prefix = source.get("prefix", "")
                env.update({prefix + k: v for k, v in values.items()})
    for var in container.get("env") or []:
        name = var["name"]
        if "valueFrom" not in var:
            env[name] = expand(str(var.get("value", "")), env)
            continue
        source = var["valueFrom"]
        if "fieldRef" in source:
            env[name] = _field(pod, source["fieldRef"]["fieldPath"], pod_ip)
            continue
        if "resourceFieldRef" in source:
            raise EnvError(f"env {name}: resourceFieldRef is not supported by this kubelet")
        for kind, key in (("secret", "secretKeyRef"), ("configmap", "configMapKeyRef")):
            if key in source:
                ref = source[key]
                optional = bool(ref.get("optional"))
                values = _source(client, namespace, kind, ref["name"], optional)
                if ref["key"] in values:
                    env[name] = values[ref["key"]]
                elif not optional:
                    raise EnvError(f'key "{ref["key"]}" not found in {kind} "{ref["name"]}"')
    return env


def resolve_command(container: dict[str, Any], env: Mapping[str, str]) -> list[str]:
    """``command`` + ``args`` with ``$(NAME)`` expanded; EnvError if there is no command."""
    command = [str(part) for part in container.get("command") or []]
    if not command:
        raise EnvError("the container has no command (image entrypoints are not known here)")
    args = [str(part) for part in container.get("args") or []]
    return [expand(part, env) for part in command + args]
