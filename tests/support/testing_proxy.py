"""A fault-injecting HTTP reverse proxy for tests and benchmarks of S3 clients.

:class:`TestingFaultProxy` listens on 127.0.0.1 (a free port) and forwards every request
to an upstream S3 endpoint, byte for byte, keeping the client's ``Host`` header so SigV4
signatures stay valid. Rules added at runtime make it misbehave for matching requests:

* ``slowdown``: answer ``503 SlowDown`` with an S3 XML error body (request not forwarded);
* ``delay``: wait N seconds, before forwarding or after the upstream answered;
* ``drop``: close the connection without a response, before forwarding (the server never
  sees the request) or after the upstream answered (the request took effect, the client
  does not learn it).

A rule fires for the next ``count`` matching requests (``None``: without limit), each
time with ``probability``, optionally only for one HTTP method and/or for paths
containing a substring. Rules are tried in the order they were added; the first that
fires decides. Counters record the requests seen and the faults injected.

The relaying itself (forwarding, hop-by-hop headers, ``100-continue``, the server's
threads) is :class:`bench.http_relay.HttpRelay`'s; this module adds the rules.

Thread-safety: all methods may be called from any thread while requests are in flight.
"""

from __future__ import annotations

import itertools
import random
import threading
from dataclasses import dataclass, replace
from typing import ClassVar, Literal

from bench.http_relay import HttpRelay, RelayHandler

FaultKind = Literal["slowdown", "delay", "drop"]


@dataclass(frozen=True, slots=True)
class FaultRule:
    """One fault: what to do (``kind``), to which requests, how often."""

    kind: FaultKind
    method: str | None = None
    """Only requests with this HTTP method (``PUT``, ``GET``...); ``None`` for all."""
    path_contains: str | None = None
    """Only requests whose path (with query) contains this; ``None`` for all."""
    probability: float = 1.0
    """Chance that a matching request gets the fault."""
    count: int | None = None
    """How many requests get the fault at most; ``None`` for no limit."""
    delay_s: float = 0.0
    """Seconds to wait, for ``delay`` rules."""
    after_upstream: bool = False
    """For ``delay`` and ``drop``: act once the upstream has answered."""


class TestingFaultProxy(HttpRelay):
    """Reverse proxy in front of ``upstream_url`` (``http://host:port``) with fault rules.

    Use as a context manager, or call :meth:`start` / :meth:`stop`. ``seed`` makes the
    probability draws reproducible.
    """

    __test__ = False  # not a pytest test class

    thread_name: ClassVar[str] = "testing-fault-proxy"

    def __init__(self, upstream_url: str, *, seed: int | None = None) -> None:
        super().__init__(upstream_url)
        self._lock = threading.Lock()
        self._rules: list[_ActiveRule] = []
        self._random = random.Random(seed)
        self._seen: dict[str, int] = {}
        self._injected: dict[str, int] = {}
        self._request_ids = itertools.count(1)
        self._seen_changed = threading.Condition(self._lock)

    # --- rules -------------------------------------------------------------------------

    def add_rule(self, rule: FaultRule) -> None:
        """Add a rule after the existing ones."""
        if not 0.0 <= rule.probability <= 1.0:
            raise ValueError(f"probability must be within [0, 1], got {rule.probability}")
        if rule.method is not None:
            rule = replace(rule, method=rule.method.upper())
        with self._lock:
            self._rules.append(_ActiveRule(rule, rule.count))

    def slowdown(
        self,
        *,
        method: str | None = None,
        count: int | None = None,
        probability: float = 1.0,
        path_contains: str | None = None,
    ) -> None:
        """Answer matching requests with ``503 SlowDown``."""
        self.add_rule(FaultRule("slowdown", method, path_contains, probability, count))

    def delay(
        self,
        seconds: float,
        *,
        method: str | None = None,
        count: int | None = None,
        probability: float = 1.0,
        path_contains: str | None = None,
        after_upstream: bool = False,
    ) -> None:
        """Hold matching requests for ``seconds`` (before forwarding, or before answering
        when ``after_upstream``)."""
        self.add_rule(
            FaultRule("delay", method, path_contains, probability, count, seconds, after_upstream)
        )

    def drop(
        self,
        *,
        method: str | None = None,
        count: int | None = None,
        probability: float = 1.0,
        path_contains: str | None = None,
        after_upstream: bool = False,
    ) -> None:
        """Close matching requests' connections without an answer."""
        self.add_rule(
            FaultRule("drop", method, path_contains, probability, count, 0.0, after_upstream)
        )

    def clear(self) -> None:
        """Remove every rule; requests pass through unchanged again."""
        with self._lock:
            self._rules.clear()

    # --- counters ----------------------------------------------------------------------

    @property
    def requests_seen(self) -> int:
        """Requests received so far (faulted or not)."""
        with self._lock:
            return sum(self._seen.values())

    def requests_by_method(self) -> dict[str, int]:
        """Requests received so far per HTTP method."""
        with self._lock:
            return dict(self._seen)

    def wait_for_requests(self, count: int, timeout: float) -> bool:
        """Block until at least ``count`` requests were seen; ``False`` on timeout."""
        with self._seen_changed:
            return self._seen_changed.wait_for(
                lambda: sum(self._seen.values()) >= count, timeout=timeout
            )

    def faults_injected(self) -> dict[str, int]:
        """Faults injected so far per kind (``slowdown``, ``delay``, ``drop``)."""
        with self._lock:
            return dict(self._injected)

    # --- used by the handler -----------------------------------------------------------

    def _choose(self, method: str, path: str) -> FaultRule | None:
        with self._lock:
            self._seen[method] = self._seen.get(method, 0) + 1
            self._seen_changed.notify_all()
            for active in self._rules:
                rule = active.rule
                if active.remaining == 0:
                    continue
                if rule.method is not None and rule.method != method:
                    continue
                if rule.path_contains is not None and rule.path_contains not in path:
                    continue
                if rule.probability < 1.0 and self._random.random() >= rule.probability:
                    continue
                if active.remaining is not None:
                    active.remaining -= 1
                self._injected[rule.kind] = self._injected.get(rule.kind, 0) + 1
                return rule
            return None

    def _next_request_id(self) -> int:
        with self._lock:
            return next(self._request_ids)

    def handle(self, request: RelayHandler, body: bytes) -> None:
        rule = self._choose(request.command, request.path)
        if rule is not None and not rule.after_upstream:
            if rule.kind == "slowdown":
                try:
                    _write_slowdown(request, self._next_request_id())
                except OSError:
                    request.close_connection = True
                return
            if rule.kind == "drop" or self.stopping.wait(rule.delay_s):
                request.drop()
                return
        answer = request.forward(body)
        if answer is None or (  # upstream unreachable: look like a dead server
            rule is not None
            and rule.after_upstream
            and (rule.kind == "drop" or self.stopping.wait(rule.delay_s))
        ):
            request.drop()
            return
        request.answer(answer)


@dataclass(slots=True)
class _ActiveRule:
    """A rule and how many more times it may fire; mutated only under the proxy's lock."""

    rule: FaultRule
    remaining: int | None


def _write_slowdown(request: RelayHandler, request_id: int) -> None:
    body = (
        '<?xml version="1.0" encoding="UTF-8"?>\n'
        "<Error><Code>SlowDown</Code>"
        "<Message>Please reduce your request rate.</Message>"
        f"<Resource>{_xml_escape(request.path)}</Resource>"
        f"<RequestId>testing-fault-proxy-{request_id}</RequestId></Error>"
    ).encode()
    request.send_response_only(503, "Slow Down")
    request.send_header("Content-Type", "application/xml")
    request.send_header("x-amz-request-id", f"testing-fault-proxy-{request_id}")
    request.send_header("Content-Length", "0" if request.command == "HEAD" else str(len(body)))
    request.end_headers()
    if request.command != "HEAD":
        request.wfile.write(body)


def _xml_escape(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
