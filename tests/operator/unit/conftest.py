"""Fixtures of the operator's unit tests."""

from __future__ import annotations

import socket
from collections.abc import Iterator

import pytest

from gic_operator.kube_client import KubernetesApi


@pytest.fixture
def unreachable() -> Iterator[KubernetesApi]:
    """A KubernetesApi whose server does not exist (nothing may reach it)."""
    from kubernetes.client import ApiClient, Configuration

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    config = Configuration(host=f"http://127.0.0.1:{port}")
    config.retries = 0
    with ApiClient(config) as client:
        yield KubernetesApi(client, request_timeout_s=5)
