"""When a restore source's release is judged again (``release_checks.ReleaseChecks``) and
how much a judgment may list (``release_limit``)."""

from __future__ import annotations

from gic_operator.storage.release_checks import (
    MANIFEST_SLACK,
    MAX_RELEASE_OBJECTS,
    RECHECK_SECONDS,
    ReleaseChecks,
    release_limit,
)


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def test_a_judgment_is_reused_until_its_key_changes_or_not_released_grows_old() -> None:
    clock = Clock()
    checks = ReleaseChecks(clock=clock)
    assert checks.get(("job", 1, 3)) is None
    checks.remember(("job", 1, 3), False)
    clock.t += RECHECK_SECONDS - 1
    assert checks.get(("job", 1, 3)) is False
    assert checks.get(("job", 1, 4)) is None  # the driver reported a new checkpoint
    clock.t += 1
    assert checks.get(("job", 1, 3)) is None  # "not released" is judged again
    checks.remember(("job", 1, 4), True)
    clock.t += 100 * RECHECK_SECONDS
    assert checks.get(("job", 1, 4)) is True  # released is final


def test_judgments_kept_are_bounded() -> None:
    checks = ReleaseChecks(size=2)
    for n in range(3):
        checks.remember(("job", n), False)
    assert checks.get(("job", 0)) is None
    assert checks.get(("job", 2)) is False


def test_a_judgment_lists_what_the_job_keeps() -> None:
    assert release_limit(3) == 3 + MANIFEST_SLACK
    assert release_limit(0) == 1 + MANIFEST_SLACK
    assert release_limit(1000) == 1000 + MANIFEST_SLACK <= MAX_RELEASE_OBJECTS
    assert release_limit(10**9) == MAX_RELEASE_OBJECTS
