"""A real Kubernetes control plane for tests: etcd, kube-apiserver,
kube-controller-manager, kube-scheduler (built from Kubernetes' Go modules by
``controlplane/build.sh``) and a process kubelet that runs pods as local processes.

* :class:`~tests.controlplane.cluster.ControlPlane` starts and stops it;
* :mod:`tests.controlplane.fixtures` has the pytest fixtures (``control_plane``,
  ``kube_namespace``);
* ``python -m tests.controlplane`` (``make cluster``) starts one for a person.
"""
