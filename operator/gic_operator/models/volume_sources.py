"""What a ``projected`` volume of a GICJob's ``podTemplate`` may project.

The operator's pods carry no API token they do not need: executors never
(``automountServiceAccountToken: false``), a driver only with a ``k8s://`` master. A
``projected`` volume is a type the restricted Pod Security Standard allows, and a
``serviceAccountToken`` source in it mounts a token of the pod's service account (for any
audience) whatever ``automountServiceAccountToken`` says; admission does not stop it. So
a template's projected volume may combine only :data:`ALLOWED_PROJECTIONS` (Secrets,
ConfigMaps, the downward API, cluster trust bundles), and every other source -- a
``serviceAccountToken``, a ``podCertificate`` (a credential for the pod's identity), one
Kubernetes adds later -- is refused with a message naming it.

Not detectable here: a ``secret`` volume naming a Secret of type
``kubernetes.io/service-account-token``. The operator reads no Secrets; whoever can create
such a Secret in the namespace can read it anyway.

Pure functions; thread-safe.
"""

from __future__ import annotations

from typing import Any, Final

#: Sources a template's ``projected`` volume may combine.
ALLOWED_PROJECTIONS: Final = ("clusterTrustBundle", "configMap", "downwardAPI", "secret")
#: Sources refused with a reason of their own.
_CREDENTIALS: Final = {
    "serviceAccountToken": "it mounts a service account token, which the operator keeps "
    "off executors and gives a driver only with a k8s:// master",
    "podCertificate": "it mounts a certificate for the pod's service account, a credential "
    "the operator does not give Spark pods",
}


def projected_problem(volume: str, projected: Any) -> str | None:
    """Why the ``projected`` source ``projected`` of template volume ``volume`` is refused,
    or ``None``."""
    if not isinstance(projected, dict):
        return f"volume {volume!r}: projected must be an object"
    sources = projected.get("sources", [])
    if not isinstance(sources, list) or not all(isinstance(s, dict) for s in sources):
        return f"volume {volume!r}: projected.sources must be a list of objects"
    for index, source in enumerate(sources):
        for kind in sorted(source):
            if kind in _CREDENTIALS:
                return (
                    f"volume {volume!r}: projected.sources[{index}].{kind} is not allowed: "
                    f"{_CREDENTIALS[kind]}; use the service account the operator gives "
                    "the pod, or pass credentials with a secret volume or env valueFrom"
                )
            if kind not in ALLOWED_PROJECTIONS:
                return (
                    f"volume {volume!r}: projected.sources[{index}].{kind} is not allowed "
                    f"(a projected volume may combine {', '.join(ALLOWED_PROJECTIONS)})"
                )
    return None
