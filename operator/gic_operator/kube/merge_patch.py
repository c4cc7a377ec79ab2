"""JSON merge patch (RFC 7386): what the API server does with a ``merge-patch+json``
body, for the operator's own copy of what it wrote (:meth:`Pass.write_ahead
<gic_operator.reconcile.status_pass.Pass.write_ahead>`) and for the testing API.

Thread-safety: a pure function.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

__all__ = ["merge_patch"]


def merge_patch(target: Mapping[str, Any], patch: Mapping[str, Any]) -> dict[str, Any]:
    """``target`` with the JSON merge patch ``patch`` applied; a new dict (neither
    argument is changed). ``null`` removes a key, an object merges into the object
    there (or into an empty one), anything else replaces."""
    out = copy.deepcopy(dict(target))
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        elif isinstance(value, Mapping):
            current = out.get(key)
            out[key] = merge_patch(current if isinstance(current, Mapping) else {}, value)
        else:
            out[key] = copy.deepcopy(value)
    return out
