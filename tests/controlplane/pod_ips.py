"""Pod IPs of the process kubelet: one loopback address of 127.128.0.0/9 per pod.

The process kubelet runs every pod in this machine's network namespace, where a real
kubelet gives each pod a network namespace and an IP of its own. What makes several pods
that serve the same port work side by side (two operator replicas with their probe and
metrics ports, several drivers with their metrics port) is the pod IP: a server that binds
its pod's IP (``status.podIP`` through the downward API), as it may on any cluster, does
not collide with the same port of another pod. Linux routes all of 127.0.0.0/8 to the
loopback interface, so every address of it can be bound without any set-up.

Addresses are drawn at random from 127.128.0.0/9 (last octet 1-254), never one this pool
holds; several control planes on one machine (test sessions side by side) draw from the
same range, where two live pods meet the same address with a probability of about
n^2 / 2^24 for n pods in all. The node's own address stays 127.0.0.1.

Thread-safety: :class:`LoopbackPool` is safe to use from any thread.
"""

from __future__ import annotations

import ipaddress
import random
import threading

#: Where pod IPs come from.
POD_NETWORK = ipaddress.IPv4Network("127.128.0.0/9")


class LoopbackPool:
    """Hands out distinct loopback addresses of :data:`POD_NETWORK` until released."""

    def __init__(self, rng: random.Random | None = None) -> None:
        self._rng = rng or random.Random()
        self._lock = threading.Lock()
        self._held: set[str] = set()

    def allocate(self) -> str:
        """A loopback address no pod of this pool holds (held until :meth:`release`)."""
        base = int(POD_NETWORK.network_address)
        with self._lock:
            while True:
                offset = self._rng.randrange(POD_NETWORK.num_addresses)
                address = ipaddress.IPv4Address(base + offset)
                if address.packed[-1] in (0, 255) or str(address) in self._held:
                    continue
                self._held.add(str(address))
                return str(address)

    def release(self, address: str) -> None:
        """Give ``address`` back (idempotent)."""
        with self._lock:
            self._held.discard(address)

    def held(self) -> frozenset[str]:
        """The addresses handed out and not released."""
        with self._lock:
            return frozenset(self._held)
