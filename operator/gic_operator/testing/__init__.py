"""Test support for the operator: :mod:`.fake_kube`, an in-memory implementation of the
operator's Kubernetes seam (:class:`gic_operator.kube.kube_api.KubeApi`) for unit tests of the
reconcilers.

Nothing here is imported by the operator itself. Tests that need a real Kubernetes API
use the control plane of ``tests/controlplane`` (etcd, kube-apiserver, controller
manager, scheduler and a process kubelet).
"""
