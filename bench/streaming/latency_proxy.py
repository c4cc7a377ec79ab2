"""Request latency in front of an S3 server on loopback, as a remote object store has it.

SeaweedFS on loopback answers a request in well under a millisecond; S3 takes tens of
milliseconds per request (time to first byte). :class:`LatencyProxy` is an HTTP reverse
proxy on 127.0.0.1 that holds every request ``latency_s`` once its headers and body have
arrived, then forwards it to the upstream byte for byte (the client's ``Host`` header is
kept, so SigV4 signatures stay valid) and relays the answer. Every request pays the
latency once: a client that sends ``Expect: 100-continue`` gets its ``100 Continue`` at
once, as from a nearby endpoint, and the latency after its body. The relaying itself is
:class:`bench.http_relay.HttpRelay`'s.

:func:`measure_added_latency` times HEAD and GET requests of one small object directly
and through the proxy; the difference of the medians is the latency the benchmark
actually added (recorded beside the configured one).

Thread-safety: one thread per client connection; :meth:`LatencyProxy.stop` may be called
from any thread and cuts delays short.
"""

from __future__ import annotations

import dataclasses
import statistics
import threading
import time
from typing import Any, ClassVar

from bench.http_relay import HttpRelay, RelayHandler
from bench.streaming.records import BenchmarkError

UPSTREAM_TIMEOUT_S = 300.0


class LatencyProxy(HttpRelay):
    """Reverse proxy to ``upstream_url`` (``http://host:port``) adding ``latency_s`` to
    every request. Use as a context manager, or :meth:`start` / :meth:`stop`."""

    error: ClassVar[type[Exception]] = BenchmarkError
    not_started_error: ClassVar[type[Exception]] = BenchmarkError
    thread_name: ClassVar[str] = "latency-proxy"
    timeout_s: ClassVar[float] = UPSTREAM_TIMEOUT_S
    request_queue_size: ClassVar[int] = 128

    def __init__(self, upstream_url: str, latency_s: float) -> None:
        super().__init__(upstream_url)
        if latency_s < 0:
            raise BenchmarkError(f"latency must be >= 0 s, got {latency_s}")
        self.latency_s = latency_s
        self._lock = threading.Lock()
        self._requests: dict[str, int] = {}

    def requests_by_method(self) -> dict[str, int]:
        """Requests forwarded so far, per HTTP method."""
        with self._lock:
            return dict(self._requests)

    def handle(self, request: RelayHandler, body: bytes) -> None:
        with self._lock:
            self._requests[request.command] = self._requests.get(request.command, 0) + 1
        if self.latency_s > 0 and self.stopping.wait(self.latency_s):
            request.drop()
        else:
            request.relay(body)


# --- measuring what it adds ------------------------------------------------------------


def _timed_ms(fn: Any, samples: int) -> list[float]:
    out = []
    for _ in range(samples):
        began = time.perf_counter()
        fn()
        out.append((time.perf_counter() - began) * 1000)
    return out


def measure_added_latency(
    direct_url: str, proxied_url: str, bucket: str, *, samples: int = 20
) -> dict[str, Any]:
    """Median HEAD and GET times of one small object, directly and through the proxy,
    and the differences (ms): the latency a request actually gained. Uses the S3
    credentials of the environment; writes and deletes one object in ``bucket``."""
    from gic_runtime.storage.s3 import create_s3_client
    from gic_runtime.storage.s3_settings import S3Settings

    key = "latency-probe/object"
    base = S3Settings.from_env()
    direct = create_s3_client(dataclasses.replace(base, endpoint_url=direct_url))
    proxied = create_s3_client(dataclasses.replace(base, endpoint_url=proxied_url))
    try:
        direct.put_object(Bucket=bucket, Key=key, Body=b"x" * 1024)
        out: dict[str, Any] = {"samples": samples, "object_bytes": 1024}
        added, added_min = [], []
        for op in ("head", "get"):
            times, fastest = {}, {}
            for name, client in (("direct", direct), ("proxied", proxied)):
                if op == "head":

                    def call(c: Any = client) -> None:
                        c.head_object(Bucket=bucket, Key=key)
                else:

                    def call(c: Any = client) -> None:
                        c.get_object(Bucket=bucket, Key=key)["Body"].read()

                call()  # a connection in the pool first
                measured = _timed_ms(call, samples)
                times[name], fastest[name] = statistics.median(measured), min(measured)
            out[f"{op}_ms_direct_p50"] = round(times["direct"], 3)
            out[f"{op}_ms_proxied_p50"] = round(times["proxied"], 3)
            added.append(times["proxied"] - times["direct"])
            added_min.append(fastest["proxied"] - fastest["direct"])
        out["added_ms_p50"] = round(statistics.fmean(added), 3)
        out["added_ms_min"] = round(statistics.fmean(added_min), 3)
        out["how"] = (
            "added_ms_p50: mean over HEAD and GET of the median time through the proxy minus "
            "the median time direct; added_ms_min: the same with the fastest of each"
        )
        direct.delete_object(Bucket=bucket, Key=key)
        return out
    finally:
        direct.close()
        proxied.close()
