"""What a driver wrote into the job's storage, trusted only as far as this module says.

A driver (or anyone with write access to the job's storage or a resource's status) may
have written anything, so numbers copied from its reports are bounded
(:func:`status_int`), and a savepoint outcome naming another directory than the one its
request named is refused (:func:`checked_outcome_path`). Both the GICJob and the
Savepoint reconcilers read outcomes through here.
"""

from __future__ import annotations

from gic_operator.models.base import status_number
from gic_operator.operator_errors import UntrustedInputError
from gic_operator.storage.job_storage import normalize_uri
from gic_runtime.control.model import Outcome


def status_int(value: object) -> int:
    """A non-negative integer read from a driver's report or another resource's status
    (a driver or anyone with status access may have written it): anything else reads
    as 0."""
    try:
        return status_number(value)
    except ValueError:
        return 0


def checked_outcome_path(outcome: Outcome, target: str) -> str:
    """The directory of completed ``outcome``: ``target`` (the derived directory the
    request named). An outcome naming another directory is refused."""
    if outcome.path is not None and normalize_uri(outcome.path) != target:
        raise UntrustedInputError(
            f"the driver reported savepoint {outcome.request_id} at {outcome.path}, but it "
            f"was requested at {target}; the outcome is refused (nothing at that path is "
            "used or deleted)"
        )
    return target
