"""Names derived from GICJob names are distinct for distinct GICJobs of a namespace.

Were two GICJobs to share a derived name, one would create (or find) the other's driver
pod, service, RPC Secret or executor template, and pods of one would carry the other's
``gic.io/job`` label, which selects its drivers and admits its peers through the job's
NetworkPolicy. ``wc.v2`` is sanitized with a hash (``wc-v2-13b7a78a``); a GICJob
literally named so got the very same driver pod and service names.
"""

from __future__ import annotations

from collections.abc import Callable

from hypothesis import given, settings
from hypothesis import strategies as st
from tests.operator.kube.test_naming import DNS_SUBDOMAIN, names

from gic_operator.kube import naming
from gic_operator.launch import launch_plan
from gic_operator.launch.network_policy import network_policy_name

#: Every name the operator derives from a GICJob name (at one epoch for pods).
DERIVED: dict[str, Callable[[str], str]] = {
    "driver pod": lambda name: naming.driver_pod_name(name, 3),
    "driver service": naming.driver_service_name,
    "RPC Secret": launch_plan.auth_secret_name,
    "executor template": launch_plan.executor_template_name,
    "NetworkPolicy": network_policy_name,
    "gic.io/job label": naming.label_value,
}


def test_a_name_that_looks_like_a_sanitized_one_gets_its_own_names() -> None:
    dotted, lookalike = "wc.v2", "wc-v2-13b7a78a"
    assert naming.driver_pod_name(dotted, 1) == "wc-v2-13b7a78a-driver-1"  # unchanged
    for kind, derive in DERIVED.items():
        assert derive(dotted) != derive(lookalike), kind
    assert naming.driver_pod_name(lookalike, 1) != naming.driver_pod_name(dotted, 1)
    assert naming.driver_service_name(lookalike) != naming.driver_service_name(dotted)


def test_clean_names_keep_their_names() -> None:
    assert naming.driver_pod_name("wordcount", 2) == "wordcount-driver-2"
    assert naming.driver_service_name("wordcount") == "wordcount-driver"
    assert launch_plan.auth_secret_name("wordcount") == "wordcount-spark-rpc"
    assert naming.label_value("wc.v2") == "wc.v2"


def _lookalikes(name: str) -> list[str]:
    """GICJob names chosen to meet ``name``'s derived names: each derived name without
    its suffix (what a tenant would name a job to take another's names)."""
    out = [
        naming.driver_pod_name(name, 3).removesuffix("-driver-3"),
        naming.driver_service_name(name).removesuffix("-driver"),
        launch_plan.auth_secret_name(name).removesuffix("-spark-rpc"),
        naming.label_value(name),
    ]
    return [n for n in out if n != name and DNS_SUBDOMAIN.match(n) and len(n) <= 253]


@st.composite
def name_pairs(draw: st.DrawFn) -> tuple[str, str]:
    first = draw(names)
    candidates = _lookalikes(first)
    if candidates and draw(st.booleans()):
        return first, draw(st.sampled_from(candidates))
    return first, draw(names)


@settings(max_examples=400)
@given(pair=name_pairs())
def test_distinct_gicjob_names_never_share_a_derived_name(pair: tuple[str, str]) -> None:
    first, second = pair
    if first == second:
        return
    for kind, derive in DERIVED.items():
        assert derive(first) != derive(second), (kind, first, second)
