"""The certificates and keys of a test control plane, made with the ``openssl`` command.

:func:`make_pki` writes into one directory:

* ``ca.crt``/``ca.key``: a self-signed CA (ECDSA P-256, valid ``days`` days) that signs
  everything below; the API server trusts it for client certificates
  (``--client-ca-file``) and for the kubelet's serving certificate;
* ``apiserver.crt``/``.key``: the API server's serving certificate, for ``127.0.0.1``,
  ``localhost``, the ``kubernetes`` service names and the service's cluster IP;
* one client certificate per identity in :data:`CLIENTS` (``<name>.crt``/``.key``): the
  subject's CN is the user name and its O entries the groups, as Kubernetes' x509
  authenticator reads them;
* ``kubelet-serving.crt``/``.key``: the process kubelet's serving certificate (logs);
* ``sa.key``/``sa.pub``: the key pair that signs and verifies service-account tokens;
* ``front-proxy-ca.crt`` and ``front-proxy-client.crt``/``.key`` (signed by it): the
  request-header authentication of the aggregation layer, which the controller manager's
  and scheduler's delegated authentication read from the API server.

:func:`reissue_server_cert` replaces a serving certificate by one for other names with the
same key (a real node's bridge address is added to the API server's while the node runs;
kube-apiserver reloads the file).

Every leaf has subject and authority key identifiers and the extended key usage of its
role (``serverAuth`` or ``clientAuth``), which Go's and Python's strict verifiers need.

Thread-safety: pure functions over files; one call per directory.
"""

from __future__ import annotations

import concurrent.futures
import functools
import ipaddress
import secrets
import shutil
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Identity:
    """A client certificate: ``user`` (the CN) in ``groups`` (O entries)."""

    user: str
    groups: tuple[str, ...] = ()


#: File stem -> identity, for every client certificate a control plane needs.
CLIENTS: dict[str, Identity] = {
    "admin": Identity("gic-admin", ("system:masters",)),
    "controller-manager": Identity("system:kube-controller-manager"),
    "scheduler": Identity("system:kube-scheduler"),
    "apiserver-kubelet-client": Identity("kube-apiserver-kubelet-client"),
}


#: The CN the API server's aggregation-layer client certificate has, and the only one
#: ``--requestheader-allowed-names`` accepts.
FRONT_PROXY_CLIENT = "front-proxy-client"


def node_identity(node_name: str) -> Identity:
    """The identity a kubelet uses so the Node authorizer and NodeRestriction apply."""
    return Identity(f"system:node:{node_name}", ("system:nodes",))


class PkiError(RuntimeError):
    """``openssl`` is missing or failed."""


def _openssl(*args: str, stdin: bytes | None = None) -> bytes:
    tool = shutil.which("openssl")
    if tool is None:
        raise PkiError("the openssl command is needed to make the control plane's certificates")
    result = subprocess.run(
        [tool, *args], input=stdin, capture_output=True, check=False, timeout=60
    )
    if result.returncode != 0:
        raise PkiError(f"openssl {args[0]} failed: {result.stderr.decode(errors='replace')}")
    return result.stdout


def _ec_key(path: Path) -> None:
    _openssl(
        "genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", str(path)
    )
    path.chmod(0o600)


def _subject(identity: Identity) -> str:
    parts = [f"/O={group}" for group in identity.groups]
    return "".join(parts) + f"/CN={identity.user}"


def _sign(
    directory: Path,
    stem: str,
    subject: str,
    extensions: list[str],
    *,
    days: int,
    ca: str = "ca",
) -> tuple[Path, Path]:
    """A new key ``<stem>.key`` and its certificate ``<stem>.crt``, signed by CA ``<ca>``."""
    key, cert = directory / f"{stem}.key", directory / f"{stem}.crt"
    _ec_key(key)
    csr = _openssl("req", "-new", "-key", str(key), "-subj", subject)
    extfile = directory / f"{stem}.ext"
    extfile.write_text("\n".join(extensions) + "\n")
    _openssl(
        "x509", "-req", "-sha256", "-days", str(days),
        "-CA", str(directory / f"{ca}.crt"), "-CAkey", str(directory / f"{ca}.key"),
        "-set_serial", str(secrets.randbits(127) | 1),
        "-extfile", str(extfile), "-out", str(cert),
        stdin=csr,
    )  # fmt: skip
    extfile.unlink()
    return cert, key


def _alt_names(hosts: list[str]) -> str:
    names = []
    for host in hosts:
        try:
            ipaddress.ip_address(host)
        except ValueError:
            names.append(f"DNS:{host}")
        else:
            names.append(f"IP:{host}")
    return "subjectAltName=" + ",".join(names)


_LEAF = [
    "basicConstraints=critical,CA:FALSE",
    "keyUsage=critical,digitalSignature,keyEncipherment",
    "subjectKeyIdentifier=hash",
    "authorityKeyIdentifier=keyid,issuer",
]


@dataclass(frozen=True)
class Pki:
    """Paths of everything :func:`make_pki` wrote."""

    directory: Path

    @property
    def ca_cert(self) -> Path:
        return self.directory / "ca.crt"

    @property
    def ca_key(self) -> Path:
        return self.directory / "ca.key"

    @property
    def sa_key(self) -> Path:
        return self.directory / "sa.key"

    @property
    def sa_pub(self) -> Path:
        return self.directory / "sa.pub"

    def cert(self, stem: str) -> Path:
        return self.directory / f"{stem}.crt"

    def key(self, stem: str) -> Path:
        return self.directory / f"{stem}.key"


def server_cert(pki: Pki, stem: str, cn: str, hosts: list[str], *, days: int) -> None:
    """A serving certificate ``<stem>.crt`` for ``hosts`` (names or IP addresses)."""
    extensions = [*_LEAF, "extendedKeyUsage=serverAuth", _alt_names(hosts)]
    _sign(pki.directory, stem, f"/CN={cn}", extensions, days=days)


def reissue_server_cert(pki: Pki, stem: str, cn: str, hosts: list[str], *, days: int) -> None:
    """Replace ``<stem>.crt`` by a certificate for ``hosts`` with the same key, in one
    rename: a server reloading its certificate file (kube-apiserver does) never reads a
    certificate that does not match its key."""
    directory = pki.directory
    csr = _openssl("req", "-new", "-key", str(pki.key(stem)), "-subj", f"/CN={cn}")
    extfile = directory / f"{stem}.reissue.ext"
    extensions = [*_LEAF, "extendedKeyUsage=serverAuth", _alt_names(hosts)]
    extfile.write_text("\n".join(extensions) + "\n")
    partial = directory / f"{stem}.crt.partial"
    try:
        _openssl(
            "x509", "-req", "-sha256", "-days", str(days),
            "-CA", str(pki.ca_cert), "-CAkey", str(pki.ca_key),
            "-set_serial", str(secrets.randbits(127) | 1),
            "-extfile", str(extfile), "-out", str(partial),
            stdin=csr,
        )  # fmt: skip
        partial.replace(pki.cert(stem))
    finally:
        extfile.unlink(missing_ok=True)
        partial.unlink(missing_ok=True)


def client_cert(pki: Pki, stem: str, identity: Identity, *, days: int, ca: str = "ca") -> None:
    """A client certificate ``<stem>.crt`` for ``identity``, signed by CA ``<ca>``."""
    extensions = [*_LEAF, "extendedKeyUsage=clientAuth"]
    _sign(pki.directory, stem, _subject(identity), extensions, days=days, ca=ca)


def _make_ca(directory: Path, stem: str, cn: str, days: int) -> None:
    key = directory / f"{stem}.key"
    _ec_key(key)
    extfile = directory / f"{stem}.ext"
    extfile.write_text(
        "[ca]\nbasicConstraints=critical,CA:TRUE\n"
        "keyUsage=critical,keyCertSign,cRLSign,digitalSignature\n"
        "subjectKeyIdentifier=hash\nauthorityKeyIdentifier=keyid:always\n"
    )
    _openssl(
        "req", "-new", "-x509", "-sha256", "-days", str(days), "-key", str(key),
        "-subj", f"/CN={cn}", "-config", str(extfile), "-extensions", "ca",
        "-out", str(directory / f"{stem}.crt"),
    )  # fmt: skip
    extfile.unlink()


def _front_proxy(pki: Pki, days: int) -> None:
    _make_ca(pki.directory, "front-proxy-ca", "gic-test-front-proxy-ca", days)
    identity = Identity(FRONT_PROXY_CLIENT)
    client_cert(pki, "front-proxy-client", identity, days=days, ca="front-proxy-ca")


def apiserver_hosts(service_ip: str, *extra: str) -> list[str]:
    """The names and addresses of the API server's serving certificate: loopback, the
    ``kubernetes`` Service's names and cluster IP, and ``extra`` (a real node's bridge
    address)."""
    return [
        "127.0.0.1",
        "localhost",
        service_ip,
        "kubernetes",
        "kubernetes.default",
        "kubernetes.default.svc",
        "kubernetes.default.svc.cluster.local",
        *extra,
    ]


def make_pki(
    directory: Path,
    *,
    node_name: str,
    service_ip: str,
    days: int = 7,
) -> Pki:
    """Write the CA, serving and client certificates and the service-account key pair."""
    directory.mkdir(parents=True, exist_ok=True)
    pki = Pki(directory)
    _make_ca(directory, "ca", "gic-test-ca", days)
    hosts = apiserver_hosts(service_ip)
    jobs: list[Callable[[], None]] = [
        lambda: server_cert(pki, "apiserver", "kube-apiserver", hosts, days=days),
        lambda: server_cert(pki, "kubelet-serving", node_name, ["127.0.0.1"], days=days),
        lambda: client_cert(pki, "kubelet", node_identity(node_name), days=days),
        lambda: _sa_keys(pki),
        lambda: _front_proxy(pki, days),
    ]
    for stem, identity in CLIENTS.items():
        jobs.append(functools.partial(client_cert, pki, stem, identity, days=days))
    with concurrent.futures.ThreadPoolExecutor(max_workers=4) as pool:
        for future in [pool.submit(job) for job in jobs]:
            future.result()
    return pki


def _sa_keys(pki: Pki) -> None:
    _ec_key(pki.sa_key)
    pki.sa_pub.write_bytes(_openssl("pkey", "-in", str(pki.sa_key), "-pubout"))
