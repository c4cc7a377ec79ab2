"""GIC Kubernetes operator: runs GIC jobs on Kubernetes through the ``GICJob`` and
``Savepoint`` custom resources.

The public face is small: the entry point :mod:`gic_operator.main` (its ``main()`` is the
``gic-operator`` command, also ``python -m gic_operator``), the process settings
:class:`OperatorSettings` with the storage allowlist :class:`StorageAllowlist`, and the
resources' models
(:class:`GICJobSpec`, :class:`GICJobStatus`, :class:`SavepointSpec`,
:class:`SavepointStatus`; all of them in :mod:`gic_operator.models`, from which the CRDs
are generated: ``python -m gic_operator.crdgen``). The rest is internal, grouped by role:
one controller per resource kind (:mod:`gic_operator.jobs`,
:mod:`gic_operator.savepoints`: observer, reconciler, status recorder), what their passes
share (:mod:`gic_operator.reconcile`), the seams (:mod:`gic_operator.kube`,
:mod:`gic_operator.storage`), the driver launch (:mod:`gic_operator.launch`), the kopf
adapters (:mod:`gic_operator.handlers`) and the in-memory ``KubeApi`` fake for tests
(:mod:`gic_operator.testing`).

The names here are loaded on first use, so importing a submodule (the models, say) never
imports kopf or the Kubernetes client.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from gic_operator.models import GICJobSpec, GICJobStatus, SavepointSpec, SavepointStatus
    from gic_operator.operator_settings import OperatorSettings, StorageAllowlist

__all__ = [
    "GICJobSpec",
    "GICJobStatus",
    "OperatorSettings",
    "SavepointSpec",
    "SavepointStatus",
    "StorageAllowlist",
]

_HOMES = {
    "GICJobSpec": "gic_operator.models",
    "GICJobStatus": "gic_operator.models",
    "SavepointSpec": "gic_operator.models",
    "SavepointStatus": "gic_operator.models",
    "OperatorSettings": "gic_operator.operator_settings",
    "StorageAllowlist": "gic_operator.operator_settings",
}


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'gic_operator' has no attribute {name!r}")
    return getattr(importlib.import_module(home), name)
