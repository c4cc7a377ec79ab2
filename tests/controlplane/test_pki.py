"""The control plane's certificates without a control plane: a serving certificate
reissued for more names keeps its key (what a real node does to the API server's)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from .pki import Pki, apiserver_hosts, reissue_server_cert, server_cert

pytestmark = pytest.mark.skipif(shutil.which("openssl") is None, reason="needs openssl")


def _openssl(*args: str) -> str:
    return subprocess.run(
        ["openssl", *args], capture_output=True, text=True, check=True, timeout=30
    ).stdout


def test_a_reissued_serving_certificate_names_more_hosts_with_the_same_key(
    tmp_path: Path,
) -> None:
    pki = Pki(tmp_path)
    _openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256",
             "-nodes", "-subj", "/CN=test-ca", "-days", "1",
             "-addext", "basicConstraints=critical,CA:TRUE",
             "-addext", "keyUsage=critical,keyCertSign",
             "-keyout", str(pki.ca_key), "-out", str(pki.ca_cert))  # fmt: skip
    server_cert(pki, "apiserver", "kube-apiserver", apiserver_hosts("10.0.0.1"), days=1)
    key_before = _openssl("x509", "-in", str(pki.cert("apiserver")), "-noout", "-pubkey")

    reissue_server_cert(
        pki, "apiserver", "kube-apiserver", apiserver_hosts("10.0.0.1", "10.89.3.1"), days=1
    )

    text = _openssl("x509", "-in", str(pki.cert("apiserver")), "-noout", "-text")
    assert "IP Address:10.89.3.1" in text
    assert "IP Address:10.0.0.1" in text
    assert "DNS:kubernetes.default.svc" in text
    assert _openssl("x509", "-in", str(pki.cert("apiserver")), "-noout", "-pubkey") == key_before
    _openssl("verify", "-CAfile", str(pki.ca_cert), str(pki.cert("apiserver")))
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "apiserver.crt", "apiserver.key", "ca.crt", "ca.key",
    ]  # fmt: skip
