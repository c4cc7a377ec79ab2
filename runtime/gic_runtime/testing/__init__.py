"""Public test support: fakes at the runtime's seams, for tests of this project and of
jobs built on it. Names start with ``Testing`` so a reader always knows a fake is in
play. The runtime itself never imports this package (an import-linter contract).

* :class:`TestingClock`, :class:`TestingManualExecutor` -- time that moves only when
  told to, and an executor that runs submitted work only when told to
  (:mod:`~gic_runtime.testing.time_and_threads`).
* :class:`TestingChangelogWriter`, :class:`TestingChangelogStorage` -- an in-memory
  changelog (:mod:`~gic_runtime.testing.changelog_fakes`).
* :class:`TestingFaultyStore`, :class:`FaultRule` -- an object store wrapper that fails,
  delays or corrupts chosen operations (:mod:`~gic_runtime.testing.faulty_store`).
"""

from gic_runtime.testing.changelog_fakes import TestingChangelogStorage, TestingChangelogWriter
from gic_runtime.testing.faulty_store import FaultRule, TestingFaultyStore
from gic_runtime.testing.time_and_threads import TestingClock, TestingManualExecutor

__all__ = [
    "FaultRule",
    "TestingChangelogStorage",
    "TestingChangelogWriter",
    "TestingClock",
    "TestingFaultyStore",
    "TestingManualExecutor",
]
