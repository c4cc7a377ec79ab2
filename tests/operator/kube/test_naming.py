"""Names the operator makes are valid Kubernetes names / runtime ids, deterministic and
distinct for distinct inputs."""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gic_operator.kube import naming
from gic_operator.operator_errors import InvalidSpecError
from gic_runtime.layout import validate_id

DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
DNS_1035 = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
SEGMENT = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
DNS_SUBDOMAIN = re.compile(rf"^{SEGMENT}(\.{SEGMENT})*$")
LABEL_VALUE = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?$")

_alnum = st.sampled_from("abcdefghijklmnopqrstuvwxyz0123456789")
_inner = st.sampled_from("abcdefghijklmnopqrstuvwxyz0123456789-")


@st.composite
def dns_labels(draw: st.DrawFn, max_size: int = 63) -> str:
    first = draw(_alnum)
    if max_size == 1 or draw(st.booleans()):
        return first
    middle = draw(st.text(_inner, max_size=max_size - 2))
    return first + middle + draw(_alnum)


@st.composite
def subdomains(draw: st.DrawFn) -> str:
    """Valid GICJob names: DNS-1123 subdomains up to 253 characters."""
    parts = draw(st.lists(dns_labels(), min_size=1, max_size=5))
    return ".".join(parts)[:253].rstrip(".-") or "a"


names = subdomains().filter(lambda n: DNS_SUBDOMAIN.match(n) is not None)
namespaces = dns_labels()


def valid_label_value(value: str) -> bool:
    return len(value) <= 63 and LABEL_VALUE.match(value) is not None


@settings(max_examples=150)
@given(namespace=namespaces, name=names, lineage=st.integers(0, 10**6))
def test_job_id_always_passes_the_runtime_check(namespace: str, name: str, lineage: int) -> None:
    job = naming.job_id(namespace, name, lineage)
    assert validate_id("job id", job) == job
    assert job == naming.job_id(namespace, name, lineage)
    if lineage:
        assert job.endswith(f"_l{lineage}")


def test_job_id_examples() -> None:
    assert naming.job_id("prod", "wordcount") == "prod.wordcount"
    assert naming.job_id("prod", "wordcount", 2) == "prod.wordcount_l2"
    long_name = "x" * 200
    a, b = naming.job_id("ns", long_name), naming.job_id("ns", long_name + "y")
    assert len(a) <= 128 and a != b
    with pytest.raises(InvalidSpecError, match="valid job id"):
        naming.job_id("Bad_NS", "job")
    with pytest.raises(InvalidSpecError, match="lineage"):
        naming.job_id("ns", "job", -1)


@settings(max_examples=150)
@given(name=names, epoch=st.integers(0, 10**9))
def test_pod_and_service_names_are_dns_labels(name: str, epoch: int) -> None:
    pod = naming.driver_pod_name(name, epoch)
    service = naming.driver_service_name(name)
    assert len(pod) <= 63 and DNS_LABEL.match(pod)
    assert pod.endswith(f"-driver-{epoch}")
    assert len(service) <= 63 and DNS_1035.match(service)
    for value in naming.driver_labels(name, epoch).values():
        assert valid_label_value(value)


def test_pod_names_examples_and_distinctness() -> None:
    assert naming.driver_pod_name("wordcount", 3) == "wordcount-driver-3"
    assert naming.driver_service_name("wordcount") == "wordcount-driver"
    # dots are not allowed in a hostname; the replacement never collides with the
    # name that already has a dash there
    assert naming.driver_pod_name("a.b", 1) != naming.driver_pod_name("a-b", 1)
    long_a, long_b = "j" * 70 + "a", "j" * 70 + "b"
    assert naming.driver_pod_name(long_a, 1) != naming.driver_pod_name(long_b, 1)
    assert naming.driver_service_name(long_a) != naming.driver_service_name(long_b)
    # a service name must start with a letter
    assert DNS_1035.match(naming.driver_service_name("1job"))


def test_driver_labels() -> None:
    labels = naming.driver_labels("wordcount", 7)
    assert labels == {
        "app.kubernetes.io/name": "gic-job",
        "app.kubernetes.io/instance": "wordcount",
        "app.kubernetes.io/managed-by": "gic-operator",
        "gic.io/job": "wordcount",
        "gic.io/role": "driver",
        "gic.io/epoch": "7",
    }
    assert naming.job_selector("wordcount").items() <= labels.items()


@settings(max_examples=150)
@given(prefix=st.text(min_size=1, max_size=30), parts=st.lists(st.text(max_size=120), max_size=4))
def test_request_ids_are_valid_and_deterministic(prefix: str, parts: list[str]) -> None:
    rid = naming.request_id(prefix, *parts)
    assert len(rid) <= 100
    assert validate_id("request id", rid) == rid
    assert rid == naming.request_id(prefix, *parts)


def test_request_id_examples() -> None:
    assert naming.request_id("upgrade", "ns.job", "3") == "upgrade-ns.job-3"
    # sanitizing never merges distinct inputs
    assert naming.request_id("sp", "Before") != naming.request_id("sp", "before")
    assert naming.request_id("sp", "a b") != naming.request_id("sp", "a-b")
    long_a, long_b = "x" * 150 + "a", "x" * 150 + "b"
    assert naming.request_id("sp", long_a) != naming.request_id("sp", long_b)


@settings(max_examples=150)
@given(job=names, nonce=st.text(max_size=300))
def test_savepoint_resource_names_are_subdomains(job: str, nonce: str) -> None:
    name = naming.savepoint_resource_name(job, nonce)
    assert len(name) <= 253 and DNS_SUBDOMAIN.match(name), name
    assert name == naming.savepoint_resource_name(job, nonce)


def test_savepoint_resource_name_examples() -> None:
    assert naming.savepoint_resource_name("wc", "nightly-1") == "wc-sp-nightly-1"
    assert naming.savepoint_resource_name("wc", "Nightly 1") != naming.savepoint_resource_name(
        "wc", "nightly-1"
    )
    assert naming.savepoint_resource_name("wc", "").startswith("wc-sp-")


@given(text=st.text(max_size=120))
def test_label_value_is_always_valid(text: str) -> None:
    value = naming.label_value(text)
    assert valid_label_value(value)
    if valid_label_value(text):
        assert value == text
