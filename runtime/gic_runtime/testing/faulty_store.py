"""An in-process fault-injecting object store, for tests and benchmarks.

:class:`TestingFaultyStore` is a seam fake: it wraps any
:class:`~gic_runtime.storage.object_store.ObjectStore` and, per call, applies the rules added
with :meth:`TestingFaultyStore.add_rule`: block on a gate, sleep, then raise an error
(before or after the real operation runs, the latter modelling a request that succeeded
on the server but whose answer was lost). Randomness comes from one seeded
:class:`random.Random`, so a run is reproducible for a given call order.
"""

from __future__ import annotations

import random
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import BinaryIO, TypeVar

from gic_runtime.storage.object_store import ObjectInfo, ObjectStore

_T = TypeVar("_T")


@dataclass(frozen=True, slots=True)
class FaultRule:
    """One fault to inject.

    Applies to calls of ``methods`` (all methods when empty) whose key starts with
    ``key_prefix``; fires for the next ``times`` matching calls (forever when ``None``),
    each with ``probability``. When it fires: wait for ``gate`` (if any) to be set, sleep
    ``delay_s`` plus a uniform ``[0, jitter_s)``, then raise ``error()`` (if any) before
    the real call, or after it when ``after`` is true.
    """

    methods: frozenset[str] = frozenset()
    error: Callable[[], Exception] | None = None
    delay_s: float = 0.0
    jitter_s: float = 0.0
    times: int | None = None
    probability: float = 1.0
    gate: threading.Event | None = None
    after: bool = False
    key_prefix: str = ""


@dataclass(slots=True)
class _Armed:
    rule: FaultRule
    remaining: int | None
    fired: int = 0


@dataclass(frozen=True, slots=True)
class _Effect:
    gates: tuple[threading.Event, ...] = ()
    delay_s: float = 0.0
    before: Exception | None = None
    after: Exception | None = None


class TestingFaultyStore:
    """ObjectStore wrapper that injects faults and latency and counts calls. Thread-safe.

    Rules are checked in the order they were added; every rule that fires contributes
    its gate and delay, and the first error among them is raised.
    """

    __test__ = False  # not a pytest test class

    def __init__(
        self,
        inner: ObjectStore,
        *,
        seed: int = 0,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self._inner = inner
        self._random = random.Random(seed)
        self._sleep = sleep
        self._rules: list[_Armed] = []
        self._calls: Counter[str] = Counter()
        self._cond = threading.Condition()

    # --- configuration and observation ---------------------------------------------

    def add_rule(self, rule: FaultRule) -> FaultRule:
        """Arm ``rule`` (after those already armed); return it for :meth:`remove_rule`."""
        with self._cond:
            self._rules.append(_Armed(rule, rule.times))
        return rule

    def remove_rule(self, rule: FaultRule) -> None:
        with self._cond:
            self._rules = [armed for armed in self._rules if armed.rule is not rule]

    def clear_rules(self) -> None:
        with self._cond:
            self._rules.clear()

    def fired(self, rule: FaultRule) -> int:
        """How often ``rule`` has fired."""
        with self._cond:
            return sum(armed.fired for armed in self._rules if armed.rule is rule)

    def calls(self, method: str) -> int:
        """How many calls of ``method`` have started."""
        with self._cond:
            return self._calls[method]

    def wait_for_calls(self, method: str, count: int, timeout: float = 10.0) -> bool:
        """Block until ``count`` calls of ``method`` have started; False on timeout."""
        with self._cond:
            return self._cond.wait_for(lambda: self._calls[method] >= count, timeout)

    # --- the fault machinery --------------------------------------------------------

    def _plan(self, method: str, key: str) -> _Effect:
        gates: list[threading.Event] = []
        delay = 0.0
        errors: list[tuple[bool, Exception]] = []
        with self._cond:
            self._calls[method] += 1
            self._cond.notify_all()
            for armed in self._rules:
                rule = armed.rule
                if rule.methods and method not in rule.methods:
                    continue
                if not key.startswith(rule.key_prefix):
                    continue
                if armed.remaining is not None and armed.remaining <= 0:
                    continue
                if rule.probability < 1.0 and self._random.random() >= rule.probability:
                    continue
                if armed.remaining is not None:
                    armed.remaining -= 1
                armed.fired += 1
                if rule.gate is not None:
                    gates.append(rule.gate)
                delay += rule.delay_s
                if rule.jitter_s:
                    delay += self._random.uniform(0.0, rule.jitter_s)
                if rule.error is not None:
                    errors.append((rule.after, rule.error()))
        before = next((err for is_after, err in errors if not is_after), None)
        after = next((err for is_after, err in errors if is_after), None)
        return _Effect(tuple(gates), delay, before, after)

    def _run(self, method: str, key: str, call: Callable[[], _T]) -> _T:
        effect = self._plan(method, key)
        for gate in effect.gates:
            gate.wait()
        if effect.delay_s > 0:
            self._sleep(effect.delay_s)
        if effect.before is not None:
            raise effect.before
        result = call()
        if effect.after is not None:
            raise effect.after
        return result

    # --- ObjectStore ----------------------------------------------------------------

    @property
    def root_uri(self) -> str:
        return self._inner.root_uri

    def uri_for(self, key: str) -> str:
        return self._inner.uri_for(key)

    def put(self, key: str, data: bytes, *, if_absent: bool = False) -> None:
        self._run("put", key, lambda: self._inner.put(key, data, if_absent=if_absent))

    def put_file(self, key: str, file: BinaryIO, size: int, *, if_absent: bool = False) -> None:
        """A PUT as :meth:`put` is: the same rules (method ``put``) apply to it."""
        self._run("put", key, lambda: self._inner.put_file(key, file, size, if_absent=if_absent))

    def get(self, key: str, *, start: int = 0, length: int | None = None) -> bytes:
        return self._run("get", key, lambda: self._inner.get(key, start=start, length=length))

    def size(self, key: str) -> int:
        return self._run("size", key, lambda: self._inner.size(key))

    def exists(self, key: str) -> bool:
        return self._run("exists", key, lambda: self._inner.exists(key))

    def list(self, prefix: str = "") -> Iterator[ObjectInfo]:
        return self._run("list", prefix, lambda: iter(list(self._inner.list(prefix))))

    def delete_many(self, keys: Iterable[str]) -> int:
        keys = list(keys)
        return self._run(
            "delete_many", keys[0] if keys else "", lambda: self._inner.delete_many(keys)
        )

    def copy(self, src_key: str, dst_key: str) -> None:
        self._run("copy", src_key, lambda: self._inner.copy(src_key, dst_key))
