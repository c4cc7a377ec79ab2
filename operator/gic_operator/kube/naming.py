"""Names the operator gives things: job ids, pods, services, labels, request ids.

Every function here is pure and deterministic: the same inputs always give the same
name, so a reconciler that crashed and restarted finds what it created before (pods by
name, control requests by id) instead of creating duplicates.

Invariants (checked by property tests):

* :func:`job_id` and :func:`request_id` pass :func:`gic_runtime.layout.validate_id`;
* :func:`driver_pod_name` is a DNS-1123 label (it is also the pod's hostname) and
  :func:`driver_service_name` a DNS-1035 label, both at most 63 characters;
* :func:`savepoint_resource_name` is a DNS-1123 subdomain of at most 253 characters;
* :func:`savepoint_dir` of one job never lies under another job's: the directory is
  ``<root>/savepoints/<namespace>.<job>/<request id>``, both parts validated ids;
* label values are valid Kubernetes label values (at most 63 characters);
* a name is shortened or sanitized only together with a hash of the original input, so
  two different inputs never share a name because of truncation or sanitizing;
* names derived from GICJob names are injective per kind: a name kept as it is never
  looks like a hashed one (a GICJob name that ends like a hash, ``-<8 hex digits>``, is
  hashed too), so ``wc.v2`` (hashed: ``wc-v2-<hash>``) and a GICJob literally named
  ``wc-v2-<hash>`` (hashed again: ``wc-v2-<hash>-<hash>``) get different pods, services,
  Secrets and ConfigMaps; label values made from a hash carry ``_``, which no GICJob
  name has. Distinct names can then share a derived name only if their 32-bit hashes
  collide; the operator still adopts no object another GICJob owns
  (:mod:`gic_operator.kube.ownership`), so even that is a refused conflict, not a takeover.

Thread-safety: stateless functions.
"""

from __future__ import annotations

import hashlib
import re

from gic_operator.operator_errors import InvalidSpecError
from gic_runtime.errors import ConfigurationError
from gic_runtime.layout import validate_id

LABEL_JOB = "gic.io/job"
LABEL_ROLE = "gic.io/role"
LABEL_EPOCH = "gic.io/epoch"
#: On Savepoints the operator creates: ``annotation`` or ``periodic`` (absent: a user made it).
LABEL_CREATED_BY = "gic.io/created-by"
ANNOTATION_SAVEPOINT = "gic.io/savepoint"
ANNOTATION_GENERATION = "gic.io/generation"
MANAGED_BY = "gic-operator"
ROLE_DRIVER = "driver"

#: Longest DNS label (pod hostnames, service names, label values).
DNS_LABEL_MAX = 63
#: Longest DNS subdomain (most resource names).
DNS_SUBDOMAIN_MAX = 253
#: Longest control request id this module makes (the runtime accepts 128).
REQUEST_ID_MAX = 100
#: Longest job id the runtime accepts.
JOB_ID_MAX = 128

_HASH_LEN = 8
_LABEL_VALUE = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?$")
#: What a hashed name ends with (``-<hash>``, or is: ``h<hash>``): a name kept as it is
#: never matches it, so kept and hashed names never meet.
_HASHED = re.compile(rf"(^h|-)[0-9a-f]{{{_HASH_LEN}}}$")


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:_HASH_LEN]


def _shorten(head: str, tail: str, limit: int, original: str, strip: str, *, sep: str = "-") -> str:
    """``head`` cut so that ``head<sep><hash of original>tail`` fits in ``limit``."""
    room = limit - len(tail) - _HASH_LEN - 1
    cut = head[: max(room, 0)].rstrip(strip)
    if cut:
        return f"{cut}{sep}{_digest(original)}{tail}"
    return f"h{_digest(original)}{tail}" if sep == "-" else f"h{sep}{_digest(original)}{tail}"


def _kept(text: str) -> bool:
    """Whether a clean ``text`` may stay as it is: it does not look like a hashed name."""
    return _HASHED.search(text) is None


def _dns_label(text: str, suffix: str, *, letter_start: bool) -> str:
    """``text + suffix`` as a DNS label (DNS-1035 when ``letter_start``)."""
    base = re.sub(r"[^a-z0-9-]+", "-", text.lower()).strip("-")
    if letter_start and base and not base[0].isalpha():
        base = "g" + base
    if base == text and base and len(base) + len(suffix) <= DNS_LABEL_MAX and _kept(base):
        return base + suffix
    return _shorten(base, suffix, DNS_LABEL_MAX, text, "-")


def object_name(name: str, suffix: str) -> str:
    """``<name><suffix>`` as a DNS subdomain (Secrets, ConfigMaps of GICJob ``name``);
    shortened with a hash when too long, hashed too when ``name`` looks hashed."""
    if len(name) + len(suffix) <= DNS_SUBDOMAIN_MAX and _kept(name):
        return name + suffix
    return _shorten(name, suffix, DNS_SUBDOMAIN_MAX, name, ".-")


def label_value(text: str) -> str:
    """``text`` as a Kubernetes label value (itself when it already is one). A value that
    had to change is ``<start>_<hash>``: ``_`` never occurs in a GICJob name, so the
    label values of distinct GICJob names differ."""
    if len(text) <= DNS_LABEL_MAX and _LABEL_VALUE.match(text):
        return text
    base = re.sub(r"[^A-Za-z0-9._-]+", "-", text).strip("-_.")
    return _shorten(base, "", DNS_LABEL_MAX, text, "-_.", sep="_")


def job_id(namespace: str, name: str, lineage: int = 0) -> str:
    """The job's id in checkpoint storage: ``<namespace>.<name>``, and for a lineage
    above 0 (a job restarted with fresh state) ``<namespace>.<name>_l<lineage>``
    (``_`` never occurs in Kubernetes names, so no job name collides with a lineage).

    An id longer than the runtime's 128 characters keeps its start and the lineage
    suffix, with a hash of the full id in between.
    """
    if lineage < 0:
        raise InvalidSpecError(f"lineage must not be negative, got {lineage}")
    suffix = f"_l{lineage}" if lineage > 0 else ""
    full = f"{namespace}.{name}{suffix}"
    if len(full) > JOB_ID_MAX:
        full = _shorten(f"{namespace}.{name}", suffix, JOB_ID_MAX, full, "._-")
    try:
        return validate_id("job id", full)
    except ConfigurationError as exc:
        raise InvalidSpecError(
            f"namespace {namespace!r} and name {name!r} do not make a valid job id: {exc}"
        ) from None


def driver_pod_name(name: str, epoch: int) -> str:
    """``<name>-driver-<epoch>``: a DNS label (it is the pod's hostname too); a long or
    dotted name is shortened with a hash, the ``-driver-<epoch>`` suffix always kept."""
    return _dns_label(name, f"-driver-{epoch}", letter_start=False)


def driver_service_name(name: str) -> str:
    """``<name>-driver``: the headless service of the job's driver (DNS-1035 label)."""
    return _dns_label(name, "-driver", letter_start=True)


def job_selector(name: str) -> dict[str, str]:
    """Labels that select the driver pods of GICJob ``name`` (every epoch)."""
    return {LABEL_JOB: label_value(name), LABEL_ROLE: ROLE_DRIVER}


def driver_labels(name: str, epoch: int) -> dict[str, str]:
    """Labels of the driver pod of GICJob ``name`` at ``epoch``."""
    return {
        "app.kubernetes.io/name": "gic-job",
        "app.kubernetes.io/instance": label_value(name),
        "app.kubernetes.io/managed-by": MANAGED_BY,
        **job_selector(name),
        LABEL_EPOCH: str(epoch),
    }


def request_id(prefix: str, *parts: str) -> str:
    """A deterministic control request id: ``prefix`` and ``parts`` joined with ``-``,
    lower case, characters outside ``[a-z0-9._-]`` replaced, at most 100 characters.
    Whenever that changed the text (or it is too long), a hash of the original is added,
    so distinct inputs give distinct ids."""
    raw = "-".join((prefix, *parts))
    text = re.sub(r"[^a-z0-9._-]+", "-", raw.lower()).strip("._-")
    if text != raw or len(text) > REQUEST_ID_MAX:
        text = _shorten(text, "", REQUEST_ID_MAX, raw, "._-")
    return validate_id("request id", text)


def savepoint_resource_name(job: str, nonce: str) -> str:
    """``<job>-sp-<nonce>`` as a DNS-1123 subdomain (at most 253 characters): the name of
    the Savepoint made for annotation ``gic.io/savepoint=<nonce>`` on GICJob ``job``."""
    clean = re.sub(r"-+", "-", re.sub(r"[^a-z0-9-]+", "-", nonce.lower())).strip("-")
    if not clean or clean != nonce:
        clean = f"{clean}-{_digest(nonce)}" if clean else _digest(nonce)
    full = f"{job}-sp-{clean}"
    if len(full) <= DNS_SUBDOMAIN_MAX:
        return full
    return _shorten(full, "", DNS_SUBDOMAIN_MAX, f"{job}\n{nonce}", "-.")


def savepoint_request_id(savepoint: str, uid: str) -> str:
    """``gsp-<savepoint>-<uid8>``: the control request id of Savepoint resource
    ``savepoint`` with uid ``uid`` (derived, never read back from its status)."""
    return request_id("gsp", savepoint, uid[:8])


def savepoint_dir(root: str, namespace: str, job: str, request: str) -> str:
    """``<root>/savepoints/<namespace>.<job>/<request>``: where the operator asks the
    driver of GICJob ``namespace/job`` to write the savepoint of control request
    ``request``. ``root`` is the job's normalized storage URI. The job part is the
    lineage-0 job id, so a savepoint's place does not change with stateless upgrades."""
    rid = validate_id("request id", request)
    return f"{root.rstrip('/')}/savepoints/{job_id(namespace, job)}/{rid}"
