"""Where a server of a pod listens: its pod IP, not every interface.

On Kubernetes each pod has a network namespace of its own, so a server bound to
``0.0.0.0`` there is alone on its port. Where pods share one network namespace (the
project's process kubelet runs every pod as a local process, each with a loopback
address of its own as its pod IP), only a server bound to its pod IP is: two operator
replicas, or several drivers, serve the same port side by side. Binding the pod IP (from
``status.podIP`` through the downward API) works on any cluster, since probes, Services
and Prometheus all reach a pod at its IP.

:func:`listen_addresses` adds the pod's loopback address when the pod IP is not itself a
loopback address: in a pod's own network namespace nobody else listens there, and
``kubectl port-forward`` connects to the loopback address inside the pod. When the pod
IP is a loopback address (pods sharing one network namespace) it is the only address,
since the shared loopback address would collide.

Pure functions; thread-safe.
"""

from __future__ import annotations

import ipaddress

from gic_runtime.errors import ConfigurationError

#: Every interface (the default when no address is given).
ALL_INTERFACES = "0.0.0.0"


def listen_addresses(address: str | None) -> tuple[str, ...]:
    """The addresses to bind for ``address`` (a pod IP; None or empty: every interface).

    Invariants: the first entry is ``address`` itself (or ``0.0.0.0``); a second entry,
    the loopback address of the same IP version, is there exactly when ``address`` is
    neither a loopback nor an unspecified address. ConfigurationError for anything but
    an IPv4 or IPv6 address.
    """
    if not address:
        return (ALL_INTERFACES,)
    try:
        ip = ipaddress.ip_address(address.strip())
    except ValueError as exc:
        raise ConfigurationError(
            f"{address!r} is not an IP address to listen on: give an IPv4 or IPv6 "
            "address (a pod's status.podIP), or leave it unset for every interface"
        ) from exc
    if ip.is_loopback or ip.is_unspecified:
        return (str(ip),)
    return (str(ip), "::1" if ip.version == 6 else "127.0.0.1")


def host_port(address: str, port: int) -> str:
    """``address:port`` as in a URL (IPv6 addresses in brackets)."""
    return f"[{address}]:{port}" if ":" in address else f"{address}:{port}"
