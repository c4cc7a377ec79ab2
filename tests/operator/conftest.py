"""Fixtures shared by the operator's tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from tests.support.processes import free_port

from gic_operator.kube.kube_client import KubernetesApi


@pytest.fixture
def unreachable() -> Iterator[KubernetesApi]:
    """A KubernetesApi whose server does not exist (nothing may reach it)."""
    from kubernetes.client import ApiClient, Configuration

    config = Configuration(host=f"http://127.0.0.1:{free_port()}")
    config.retries = 0
    with ApiClient(config) as client:
        yield KubernetesApi(client, request_timeout_s=5)
