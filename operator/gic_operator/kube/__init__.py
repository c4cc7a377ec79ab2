"""The Kubernetes seam: the ``KubeApi`` protocol and its client, Events, typed access to
resource bodies, conditions, deterministic names and labels, and the RBAC table."""
