"""The CRDs generated from the pydantic models: no drift, structural, defaults that agree with
the models, printer columns that point at real fields, examples that validate."""

from __future__ import annotations

from collections.abc import Iterator
from enum import StrEnum
from pathlib import Path
from typing import Any, Literal

import pytest
import yaml
from pydantic import BaseModel, Field, ValidationError

from gic_operator import crdgen
from gic_operator.crd_schema import (
    CrdSchemaError,
    apply_defaults,
    schema_errors,
    structural_schema,
)
from gic_operator.models import (
    API_VERSION,
    GICJobSpec,
    GICJobStatus,
    SavepointSpec,
    SavepointStatus,
)

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples" / "k8s"
MODELS: dict[str, tuple[type[BaseModel], type[BaseModel]]] = {
    "GICJob": (GICJobSpec, GICJobStatus),
    "Savepoint": (SavepointSpec, SavepointStatus),
}
MINIMAL_SPECS: dict[str, dict[str, Any]] = {
    "GICJob": {
        "application": {"image": "gic-spark:0.1.0", "mainFile": "local:///opt/app/job.py"},
        "checkpointing": {"storage": "s3://bucket/prefix"},
    },
    "Savepoint": {"job": "word-count"},
}


def _crds() -> dict[str, dict[str, Any]]:
    return {crd["spec"]["names"]["kind"]: crd for crd in crdgen.build_crds()}


def _schema(kind: str) -> dict[str, Any]:
    schema: dict[str, Any] = _crds()[kind]["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    return schema


def _nodes(schema: dict[str, Any], path: str = "") -> Iterator[tuple[str, dict[str, Any]]]:
    yield path, schema
    for name, sub in schema.get("properties", {}).items():
        yield from _nodes(sub, f"{path}.{name}")
    if isinstance(schema.get("items"), dict):
        yield from _nodes(schema["items"], f"{path}[]")
    if isinstance(schema.get("additionalProperties"), dict):
        yield from _nodes(schema["additionalProperties"], f"{path}.*")


# --- generated files ---------------------------------------------------------------------


def test_committed_files_equal_the_models_output() -> None:
    stale = crdgen.drifted(ROOT)
    assert stale == [], f"stale CRD files {stale}; regenerate with: {crdgen.REGENERATE}"


def test_generated_files_cover_both_folders() -> None:
    names = sorted(crdgen.generated_files())
    expected = sorted(
        f"{folder}/{name}"
        for folder in ("crds", "charts/gic-operator/crds")
        for name in ("gicjobs.gic.io.yaml", "savepoints.gic.io.yaml", "kopf-peering.yaml")
    )
    assert names == expected
    for text in crdgen.generated_files().values():
        assert text.startswith(crdgen.HEADER)


def test_check_passes_after_write_and_names_each_drifted_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    written = crdgen.write_all(tmp_path)
    assert len(written) == 6
    assert crdgen.main(["--check", "--root", str(tmp_path)]) == 0

    (tmp_path / "crds" / "savepoints.gic.io.yaml").write_text("# edited by hand\n")
    (tmp_path / "charts/gic-operator/crds/kopf-peering.yaml").unlink()
    capsys.readouterr()
    assert crdgen.main(["--check", "--root", str(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert "crds/savepoints.gic.io.yaml is out of date" in err
    assert "charts/gic-operator/crds/kopf-peering.yaml is out of date" in err
    assert "python -m gic_operator.crdgen" in err
    assert "gicjobs" not in err

    assert crdgen.main(["--root", str(tmp_path)]) == 0
    assert crdgen.drifted(tmp_path) == []


def test_rendered_yaml_round_trips() -> None:
    for crd in crdgen.build_crds():
        assert yaml.safe_load(crdgen.render(crd)) == crd
    peering = list(yaml.safe_load_all(crdgen.render_all(crdgen.build_peering_crds())))
    assert peering == crdgen.build_peering_crds()


# --- names, versions, columns --------------------------------------------------------------


@pytest.mark.parametrize(
    ("kind", "plural", "short", "categories"),
    [
        ("GICJob", "gicjobs", ["gj"], ["gic", "all"]),
        ("Savepoint", "savepoints", ["gsp"], ["gic"]),
    ],
)
def test_names_scope_and_version(
    kind: str, plural: str, short: list[str], categories: list[str]
) -> None:
    crd = _crds()[kind]
    assert crd["metadata"]["name"] == f"{plural}.gic.io"
    spec = crd["spec"]
    assert spec["group"] == "gic.io"
    assert spec["scope"] == "Namespaced"
    names = spec["names"]
    assert (names["kind"], names["plural"], names["singular"]) == (kind, plural, kind.lower())
    assert names["shortNames"] == short
    assert names["categories"] == categories
    [version] = spec["versions"]
    assert f"gic.io/{version['name']}" == API_VERSION
    assert version["served"] is True
    assert version["storage"] is True
    assert version["subresources"] == {"status": {}}


def _field_at(schema: dict[str, Any], json_path: str) -> dict[str, Any] | None:
    node: dict[str, Any] | None = schema
    for part in json_path.strip(".").split("."):
        node = (node or {}).get("properties", {}).get(part)
    return node


@pytest.mark.parametrize(
    ("kind", "columns"),
    [
        (
            "GICJob",
            [
                ("Phase", ".status.phase", "string"),
                ("Checkpoint", ".status.lastCheckpoint.id", "integer"),
                ("Checkpoint-Age", ".status.lastCheckpoint.time", "date"),
                ("Restored-From", ".status.restoredFrom.path", "string"),
                ("Restarts", ".status.restarts", "integer"),
                ("Age", ".metadata.creationTimestamp", "date"),
            ],
        ),
        (
            "Savepoint",
            [
                ("Job", ".spec.job", "string"),
                ("State", ".status.state", "string"),
                ("Format", ".spec.format", "string"),
                ("Path", ".status.path", "string"),
                ("Claimed-By", ".status.claimedBy", "string"),
                ("Age", ".metadata.creationTimestamp", "date"),
            ],
        ),
    ],
)
def test_printer_columns_point_at_declared_fields(
    kind: str, columns: list[tuple[str, str, str]]
) -> None:
    declared = _crds()[kind]["spec"]["versions"][0]["additionalPrinterColumns"]
    assert [(c["name"], c["jsonPath"], c["type"]) for c in declared] == columns
    schema = _schema(kind)
    for _, path, column_type in columns:
        if path.startswith(".metadata."):
            continue
        field = _field_at(schema, path)
        assert field is not None, f"{kind} column {path} names no field"
        expected = {"integer": "integer", "date": "string", "string": "string"}[column_type]
        assert field["type"] == expected, path
    wide_only = {c["name"] for c in declared if c.get("priority", 0) > 0}
    assert wide_only == ({"Restored-From"} if kind == "GICJob" else set())


def test_peering_crds_are_where_kopf_looks() -> None:
    from kopf._cogs.structs import references

    crds = {crd["spec"]["names"]["kind"]: crd for crd in crdgen.build_peering_crds()}
    for kind, selector, scope in [
        ("ClusterKopfPeering", references.CLUSTER_PEERINGS_K, "Cluster"),
        ("KopfPeering", references.NAMESPACED_PEERINGS_K, "Namespaced"),
    ]:
        spec = crds[kind]["spec"]
        [version] = spec["versions"]
        assert (spec["group"], version["name"]) == (selector.group, selector.version)
        assert spec["names"]["plural"] == selector.any_name
        assert spec["scope"] == scope
        # kopf patches status on the object itself: a status subresource would drop it.
        assert "subresources" not in version
        status = version["schema"]["openAPIV3Schema"]["properties"]["status"]
        assert status == {"type": "object", "x-kubernetes-preserve-unknown-fields": True}


# --- structural schema rules ---------------------------------------------------------------


@pytest.mark.parametrize("kind", sorted(MODELS))
def test_schema_is_structural(kind: str) -> None:
    schema = _schema(kind)
    assert schema["required"] == ["spec"]
    # Kubernetes refuses anything else on the root metadata (a description included).
    assert schema["properties"]["metadata"] == {"type": "object"}
    for path, node in _nodes(schema):
        for keyword in ("$ref", "$defs", "anyOf", "allOf", "oneOf", "not", "title", "const"):
            assert keyword not in node, f"{kind}{path} has {keyword}"
        # an untyped node must keep unknown fields, or be int-or-string (quantities)
        untyped = node.get("x-kubernetes-preserve-unknown-fields") or node.get(
            "x-kubernetes-int-or-string"
        )
        assert "type" in node or untyped, path
        if node.get("x-kubernetes-int-or-string"):
            assert "type" not in node, path
        assert not ("properties" in node and "additionalProperties" in node), path
        if node.get("nullable"):
            assert "type" in node, path
        if "exclusiveMinimum" in node:
            assert node["exclusiveMinimum"] is True and "minimum" in node, path
        if "enum" in node:
            assert all(schema_errors({"type": node["type"]}, v) == [] for v in node["enum"])
        if "default" in node:
            assert node["default"] is not None, path
            assert schema_errors(node, node["default"], path) == [], path
        for name, sub in node.get("properties", {}).items():
            if (path, name) != ("", "metadata"):
                assert sub.get("description"), f"{kind}{path}.{name} has no description"


@pytest.mark.parametrize("kind", sorted(MODELS))
def test_status_keeps_unknown_fields_at_every_level(kind: str) -> None:
    status = _schema(kind)["properties"]["status"]
    for path, node in _nodes(status, ".status"):
        if node.get("type") == "object" and "additionalProperties" not in node:
            assert node.get("x-kubernetes-preserve-unknown-fields") is True, path
    spec = _schema(kind)["properties"]["spec"]
    # The spec prunes unknown fields, except in the Kubernetes objects a pod template
    # passes through (affinity, volume sources) or refuses by name.
    kept = {path for path, node in _nodes(spec) if "x-kubernetes-preserve-unknown-fields" in node}
    free = {"affinity", "volumes[]", "volumes[].hostPath", "securityContext"}
    templates = {
        f".application.{role}.podTemplate.{name}"
        for role in ("driver", "executor")
        for name in free
    }
    assert kept <= templates, kept - templates


def test_translations_of_json_schema_constructs() -> None:
    spec = _schema("GICJob")["properties"]["spec"]["properties"]
    checkpointing = spec["checkpointing"]["properties"]
    assert checkpointing["credentialsSecret"]["nullable"] is True
    assert checkpointing["credentialsSecret"]["type"] == "string"
    assert "default" not in checkpointing["credentialsSecret"]
    assert checkpointing["buckets"]["minimum"] == 1
    assert checkpointing["buckets"]["maximum"] == 32768
    interval = checkpointing["materializationIntervalSeconds"]
    assert (interval["minimum"], interval["exclusiveMinimum"]) == (0, True)
    assert checkpointing["changelog"]["default"] == {}
    application = spec["application"]["properties"]
    assert application["sparkConf"]["additionalProperties"] == {"type": "string", "maxLength": 4096}
    assert application["sparkConf"]["default"] == {}
    assert application["sparkConf"]["maxProperties"] == 256
    assert application["env"]["maxItems"] == 128
    value_from = application["env"]["items"]["properties"]["valueFrom"]["properties"]
    assert sorted(value_from) == ["configMapKeyRef", "fieldRef", "secretKeyRef"]
    assert "serviceAccount" not in application  # drivers always run as gic-spark
    assert application["imagePullPolicy"]["enum"] == ["Always", "IfNotPresent", "Never"]
    assert application["imagePullPolicy"]["description"] == "Pull policy for the image."
    assert application["driver"]["properties"]["memory"]["pattern"] == r"^[0-9]{1,9}[kmgtKMGT]?$"
    assert application["image"]["minLength"] == 1
    assert spec["restore"]["nullable"] is True
    assert "default" not in spec["restore"]  # an empty restore would be invalid
    retention = spec["savepoints"]["properties"]["retention"]["properties"]
    assert retention["maxCount"] == {
        "description": retention["maxCount"]["description"],
        "type": "integer",
        "nullable": True,
        "minimum": 1,
        "maximum": 10_000,
    }
    assert _schema("GICJob")["properties"]["spec"]["required"] == ["application", "checkpointing"]


# --- defaults agree with the models --------------------------------------------------------


@pytest.mark.parametrize("kind", sorted(MODELS))
def test_crd_defaults_equal_model_defaults(kind: str) -> None:
    spec_model, status_model = MODELS[kind]
    properties = _schema(kind)["properties"]
    minimal = MINIMAL_SPECS[kind]
    by_server = apply_defaults(properties["spec"], minimal)
    assert by_server == spec_model.model_validate(minimal).model_dump(
        mode="json", by_alias=True, exclude_none=True
    )
    assert apply_defaults(properties["status"], {}) == status_model.model_validate({}).model_dump(
        mode="json", by_alias=True, exclude_none=True
    )


def test_nested_defaults_fill_around_given_values() -> None:
    spec = {
        **MINIMAL_SPECS["GICJob"],
        "application": {
            **MINIMAL_SPECS["GICJob"]["application"],
            "driver": {"cores": 4},
            "env": [{"name": "A"}],
        },
        "savepoints": {"retention": {"maxCount": 2}},
    }
    by_server = apply_defaults(_schema("GICJob")["properties"]["spec"], spec)
    by_model = GICJobSpec.model_validate(spec).to_kube()
    assert by_server == by_model
    assert by_server["application"]["driver"] == {
        "cores": 4,
        "memory": "1g",
        "memoryOverhead": "512m",
    }
    assert by_server["application"]["env"] == [{"name": "A", "value": ""}]


# --- examples and validation ---------------------------------------------------------------


def _example_objects() -> list[tuple[str, dict[str, Any]]]:
    objects: list[tuple[str, dict[str, Any]]] = []
    for path in sorted(EXAMPLES.glob("*.yaml")):
        objects.extend((path.name, doc) for doc in yaml.safe_load_all(path.read_text()) if doc)
    return objects


def test_examples_exist() -> None:
    kinds = [doc["kind"] for _, doc in _example_objects()]
    assert kinds.count("GICJob") >= 2
    assert kinds.count("Savepoint") >= 1
    assert "Secret" in kinds


@pytest.mark.parametrize(
    ("name", "doc"),
    [(name, doc) for name, doc in _example_objects() if doc["kind"] in MODELS],
    ids=lambda value: value if isinstance(value, str) else value["metadata"]["name"],
)
def test_example_validates_with_model_and_crd(name: str, doc: dict[str, Any]) -> None:
    assert doc["apiVersion"] == API_VERSION, name
    spec_model, _ = MODELS[doc["kind"]]
    spec_model.model_validate(doc["spec"])
    assert schema_errors(_schema(doc["kind"]), doc) == []


def test_examples_refer_to_each_other() -> None:
    objects = [doc for _, doc in _example_objects()]
    secrets = {d["metadata"]["name"] for d in objects if d["kind"] == "Secret"}
    savepoints = {d["metadata"]["name"]: d for d in objects if d["kind"] == "Savepoint"}
    jobs = {d["metadata"]["name"]: d for d in objects if d["kind"] == "GICJob"}
    for job in jobs.values():
        secret = job["spec"]["checkpointing"].get("credentialsSecret")
        assert secret is None or secret in secrets
    restoring = [j for j in jobs.values() if "restore" in j["spec"]]
    assert restoring
    for job in restoring:
        assert job["spec"]["restore"]["savepoint"] in savepoints
    for savepoint in savepoints.values():
        assert savepoint["spec"]["job"] in jobs
    for secret in (d for d in objects if d["kind"] == "Secret"):
        assert {"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"} <= set(secret["stringData"])


def test_typo_in_spec_is_named_by_model_and_crd() -> None:
    spec = {**MINIMAL_SPECS["GICJob"], "upgradeMod": "stateless"}
    with pytest.raises(ValidationError, match="upgradeMod"):
        GICJobSpec.model_validate(spec)
    nested = {
        **MINIMAL_SPECS["GICJob"],
        "checkpointing": {"storage": "s3://b", "retainedCheckpionts": 2},
    }
    with pytest.raises(ValidationError, match="retainedCheckpionts"):
        GICJobSpec.model_validate(nested)
    errors = schema_errors(_schema("GICJob")["properties"]["spec"], nested, ".spec")
    assert errors == [".spec.checkpointing.retainedCheckpionts: unknown field"]


def test_crd_validation_catches_bad_values() -> None:
    spec_schema = _schema("GICJob")["properties"]["spec"]
    bad = {
        "application": {"image": "", "mainFile": "x", "imagePullPolicy": "Sometimes"},
        "checkpointing": {"storage": "s3://b", "buckets": 0, "materializationIntervalSeconds": 0},
    }
    errors = schema_errors(spec_schema, bad, ".spec")
    assert ".spec.application.image: shorter than 1" in errors
    assert any(e.startswith(".spec.application.imagePullPolicy: 'Sometimes'") for e in errors)
    assert ".spec.checkpointing.buckets: 0 is below the minimum 1" in errors
    assert ".spec.checkpointing.materializationIntervalSeconds: 0 is below the minimum 0" in errors
    assert schema_errors(spec_schema, {}, ".spec") == [
        ".spec.application: required",
        ".spec.checkpointing: required",
    ]
    huge = {
        "application": {"image": "i", "mainFile": "m", "sparkConf": {"spark.x": "v" * 5000}},
        "checkpointing": {"storage": "s3://b"},
        "restartPolicy": {"backoffSeconds": 1e300},
    }
    errors = schema_errors(spec_schema, huge, ".spec")
    assert ".spec.application.sparkConf.spark.x: longer than 4096" in errors
    assert ".spec.restartPolicy.backoffSeconds: 1e+300 is above the maximum 3600" in errors


def test_every_number_in_the_spec_is_bounded() -> None:
    """Each integer and number of a spec has a minimum and a maximum in the CRD, so the API
    server refuses out-of-range values before the operator computes with them."""
    for kind in MODELS:
        spec = _schema(kind)["properties"]["spec"]
        for path, node in _nodes(spec, ".spec"):
            if node.get("type") in ("integer", "number"):
                assert "minimum" in node and "maximum" in node, f"{kind} {path}"


# --- the converter on small models ---------------------------------------------------------


class _Color(StrEnum):
    """A color."""

    RED = "red"
    BLUE = "blue"


class _Inner(BaseModel):
    """Inner part."""

    size: int = Field(3, gt=0, le=9, description="Size.")


class _Sample(BaseModel):
    """A sample."""

    color: _Color = Field(_Color.RED, description="Color.")
    inner: _Inner = Field(default_factory=lambda: _Inner.model_validate({}), description="Inner.")
    maybe: _Inner | None = Field(None, description="Optional inner.")
    fixed: Literal["x"] = Field("x", description="Constant.")
    labels: dict[str, str] = Field(default_factory=dict, description="Labels.")
    tags: list[str] = Field(default_factory=lambda: ["a"], description="Tags.")


def test_converter_on_a_small_model() -> None:
    schema = structural_schema(_Sample)
    assert schema["description"] == "A sample."
    props = schema["properties"]
    assert props["color"] == {
        "description": "Color.",
        "type": "string",
        "enum": ["red", "blue"],
        "default": "red",
    }
    assert props["inner"]["default"] == {}
    assert props["inner"]["properties"]["size"] == {
        "description": "Size.",
        "type": "integer",
        "default": 3,
        "minimum": 0,
        "exclusiveMinimum": True,
        "maximum": 9,
    }
    assert props["maybe"]["nullable"] is True
    assert props["maybe"]["type"] == "object"
    assert props["fixed"]["enum"] == ["x"]
    assert props["labels"] == {
        "description": "Labels.",
        "type": "object",
        "default": {},
        "additionalProperties": {"type": "string"},
    }
    assert props["tags"]["default"] == ["a"]
    assert apply_defaults(schema, {}) == _Sample.model_validate({}).model_dump(
        mode="json", exclude_none=True
    )


class _Union(BaseModel):
    """Not structural."""

    value: int | str = Field(description="Either.")


class _Undocumented(BaseModel):
    """A field without a description."""

    value: int = 1


def test_converter_refuses_what_kubernetes_cannot_express() -> None:
    with pytest.raises(CrdSchemaError, match="unions"):
        structural_schema(_Union)
    with pytest.raises(CrdSchemaError, match=r"_Undocumented\.value: no description"):
        structural_schema(_Undocumented)


@pytest.mark.parametrize("kind", sorted(MODELS))
def test_conditions_are_a_list_keyed_by_type(kind: str) -> None:
    conditions = _schema(kind)["properties"]["status"]["properties"]["conditions"]
    assert conditions["x-kubernetes-list-type"] == "map"
    assert conditions["x-kubernetes-list-map-keys"] == ["type"]
    assert "type" in conditions["items"]["required"]
    assert conditions["items"]["properties"]["type"]["type"] == "string"
    for crd in crdgen.generated_files().values():
        if f"kind: {kind}\n" in crd:
            assert "x-kubernetes-list-map-keys:\n" in crd


def test_a_list_map_must_key_on_required_scalars() -> None:
    class Item(BaseModel):
        name: str = Field(description="Key.")
        size: int = Field(0, description="Not a key.")

    class Keyed(BaseModel):
        items: list[Item] = Field(
            description="Items.",
            json_schema_extra={
                "x-kubernetes-list-type": "map",
                "x-kubernetes-list-map-keys": ["name"],
            },
        )

    class BadKey(BaseModel):
        items: list[Item] = Field(
            description="Items.",
            json_schema_extra={
                "x-kubernetes-list-type": "map",
                "x-kubernetes-list-map-keys": ["size"],
            },
        )

    schema = structural_schema(Keyed)["properties"]["items"]
    assert schema["x-kubernetes-list-map-keys"] == ["name"]
    with pytest.raises(CrdSchemaError, match="map key 'size' must be a required scalar"):
        structural_schema(BadKey)
