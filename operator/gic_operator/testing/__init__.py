"""Test support for the operator: an in-process Kubernetes API and a local kubelet.

Nothing here is imported by the operator itself; these modules exist so that end-to-end
tests can run the operator against something that speaks the Kubernetes API on loopback.
"""
