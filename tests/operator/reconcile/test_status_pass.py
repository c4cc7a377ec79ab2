"""Typed status: tolerant reads, the merge patch of a pass, the pending actions, one enum
per concept and the checkpoint tuning defaults taken from the runtime."""

from __future__ import annotations

from typing import Any, Literal

import pytest
from pydantic import BaseModel, Field, ValidationError

from gic_operator.crd_schema import CrdSchemaError, structural_schema
from gic_operator.launch import launch_config
from gic_operator.launch.launch_plan import LaunchPlan
from gic_operator.models import (
    CheckpointInfo,
    GICJobSpec,
    GICJobStatus,
    JobPhase,
    RecoverAction,
    RestoredFrom,
    RestoreMode,
    SavepointMode,
    SavepointRef,
    SavepointState,
    SavepointStatus,
    SuspendAction,
    UpgradeAction,
    UpgradeMode,
)
from gic_operator.models.base import MAX_STATUS_NUMBER, read_tolerantly
from gic_operator.models.gicjob import runtime_default
from gic_operator.reconcile.status_pass import Pass, status_patch
from gic_operator.testing.fake_kube import TestingKubeApi
from gic_runtime.checkpoint.manifest import RestoreMode as RuntimeRestoreMode
from gic_runtime.checkpoint.manifest import SavepointType
from gic_runtime.config import GICSettings

NS = "team"


# --- tolerant reads -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "field", "expected"),
    [
        ({"restarts": "abc"}, "restarts", 0),
        ({"restarts": -1}, "restarts", 0),
        ({"restarts": MAX_STATUS_NUMBER + 1}, "restarts", 0),
        ({"restarts": True}, "restarts", 0),
        ({"restarts": [1]}, "restarts", 0),
        ({"restarts": "4"}, "restarts", 4),
        ({"lineage": 1e300}, "lineage", 0),
        ({"epoch": {"x": 1}}, "epoch", None),
        ({"phase": "Bogus"}, "phase", JobPhase.PENDING),
        ({"phase": "Running"}, "phase", JobPhase.RUNNING),
        ({"driverPod": 7}, "driver_pod", None),
        ({"lastCheckpoint": {"id": "x"}}, "last_checkpoint", None),
        ({"lastCheckpoint": "x"}, "last_checkpoint", None),
        ({"restoredFrom": {"path": "s3://b/x", "mode": "Bogus"}}, "restored_from", None),
        ({"pending": {"kind": "rescale", "started": "t"}}, "pending", None),
        ({"pending": "recover"}, "pending", None),
        ({"pending": {"kind": "recover", "due": "t", "reason": "r"}}, "pending", None),
        ({"conditions": "Ready"}, "conditions", []),
    ],
)
def test_an_invalid_field_reads_as_its_default(
    raw: dict[str, Any], field: str, expected: Any
) -> None:
    status = GICJobStatus.read({"message": "kept", **raw})
    assert getattr(status, field) == expected
    assert status.message == "kept", "the rest of the status is read"


def test_an_invalid_value_inside_a_part_drops_only_that_value() -> None:
    status, dropped = read_tolerantly(
        GICJobStatus,
        {
            "lastCheckpoint": {"id": 3, "time": 5, "bytes": -1},
            "pending": {
                "kind": "upgrade",
                "started": "2026-01-01T00:00:00Z",
                "mode": "savepoint",
                "targetGeneration": 2,
                "requested": "perhaps",
            },
        },
    )
    assert status.last_checkpoint == CheckpointInfo(id=3)
    assert isinstance(status.pending, UpgradeAction)
    assert status.pending.requested is None and status.pending.target_generation == 2
    assert sorted(dropped) == ["lastCheckpoint.bytes", "lastCheckpoint.time", "pending.requested"]


def test_invalid_conditions_are_dropped_one_by_one() -> None:
    ready = {"type": "Ready", "status": "True", "reason": "Running", "message": "ok"}
    status, dropped = read_tolerantly(
        GICJobStatus,
        {"conditions": [{"type": "A", "status": "maybe"}, "garbage", ready, {"status": "True"}]},
    )
    assert [c.type for c in status.conditions] == ["Ready"]
    assert sorted(dropped) == [
        "conditions[0]",
        "conditions[0].status",
        "conditions[1]",
        "conditions[3]",
    ]


@pytest.mark.parametrize(
    "raw", [None, "status", 7, [], {"phase": {"a": [[[[[[[[[[[[[[[[[[1]]]]]]]]]]]]]]]]]]}}]
)
def test_anything_reads_as_a_status(raw: Any) -> None:
    assert GICJobStatus.read(raw).phase is JobPhase.PENDING
    assert SavepointStatus.read(raw).state is SavepointState.TRIGGER_PENDING


def test_unknown_fields_are_ignored() -> None:
    status = GICJobStatus.read(
        {"phase": "Running", "futureField": 1, "lastSavepoint": {"path": "p", "name": "x"}}
    )
    assert status.phase is JobPhase.RUNNING
    assert status.last_savepoint == SavepointRef(path="p")


def test_pending_is_told_apart_by_kind() -> None:
    base = {"started": "2026-01-01T00:00:00Z"}
    recover = GICJobStatus.read({"pending": {**base, "kind": "recover", "due": "d", "reason": "r"}})
    upgrade = GICJobStatus.read(
        {"pending": {**base, "kind": "upgrade", "mode": "last-state", "targetGeneration": 3}}
    )
    suspend = GICJobStatus.read({"pending": {**base, "kind": "suspend", "targetGeneration": 3}})
    assert isinstance(recover.pending, RecoverAction) and recover.pending.epoch is None
    assert isinstance(upgrade.pending, UpgradeAction)
    assert upgrade.pending.mode is UpgradeMode.LAST_STATE
    assert isinstance(suspend.pending, SuspendAction)
    action = RecoverAction(started="s", due="d", reason="r", epoch=4)
    assert action.to_kube() == {
        "kind": "recover",
        "started": "s",
        "due": "d",
        "reason": "r",
        "epoch": 4,
    }


# --- the merge patch ------------------------------------------------------------------------


def _status(**values: Any) -> GICJobStatus:
    return GICJobStatus.read({}).model_copy(update=values)


def test_only_updated_fields_that_differ_are_sent() -> None:
    stored = {"phase": "Running", "restarts": 2, "message": "m"}
    status = GICJobStatus.read(stored)
    assert status_patch(stored, status, {"phase", "restarts", "message"}) == {}
    changed = status.model_copy(update={"restarts": 3, "message": None, "job_id": "a.b"})
    assert status_patch(stored, changed, {"restarts"}) == {"restarts": 3}
    assert status_patch(stored, changed, {"restarts", "message", "job_id"}) == {
        "restarts": 3,
        "message": None,
        "jobId": "a.b",
    }


def test_a_value_equal_to_the_default_is_written_when_the_stored_status_lacks_it() -> None:
    assert status_patch({}, _status(restarts=0), {"restarts"}) == {"restarts": 0}
    assert status_patch({}, _status(driver_pod=None), {"driver_pod"}) == {}


def test_an_invalid_stored_value_is_replaced_or_removed() -> None:
    stored = {"restarts": "abc", "driverPod": 5}
    status = GICJobStatus.read(stored)
    assert status_patch(stored, status, {"restarts", "driver_pod"}) == {
        "restarts": 0,
        "driverPod": None,
    }


def test_a_nested_object_is_sent_whole_with_nulls_for_the_fields_it_lost() -> None:
    stored = {"lastSavepoint": {"path": "p1", "time": "t1", "name": "another version's"}}
    status = _status(last_savepoint=SavepointRef(path="p2"))
    assert status_patch(stored, status, {"last_savepoint"}) == {
        "lastSavepoint": {"path": "p2", "time": None}
    }


def test_fields_of_another_version_inside_a_part_cause_no_patch() -> None:
    stored = {"lastSavepoint": {"path": "p", "time": "t", "name": "another version's"}}
    status = GICJobStatus.read(stored)
    assert status_patch(stored, status, {"last_savepoint"}) == {}


def test_a_pending_action_of_another_kind_drops_the_fields_of_the_first() -> None:
    stored = {
        "pending": {
            "kind": "suspend",
            "started": "s",
            "requestId": "r",
            "targetGeneration": 2,
            "requested": True,
        }
    }
    status = _status(pending=RecoverAction(started="s2", due="d", reason="why"))
    patch = status_patch(stored, status, {"pending"})
    assert patch == {
        "pending": {
            "kind": "recover",
            "started": "s2",
            "due": "d",
            "reason": "why",
            "requestId": None,
            "targetGeneration": None,
            "requested": None,
        }
    }


# --- the pass -------------------------------------------------------------------------------


def _pass(status: dict[str, Any]) -> Pass[GICJobStatus]:
    body = {"metadata": {"name": "wc", "namespace": NS, "generation": 3}, "status": status}
    return Pass(TestingKubeApi(), "gicjobs", body, GICJobStatus, clock=lambda: 1_800_000_000.0)


def test_update_validates_names_and_values() -> None:
    p = _pass({"phase": "Running"})
    with pytest.raises(TypeError, match="driverPod"):
        p.update(driverPod="x")
    with pytest.raises(ValidationError):
        p.update(restarts=-1)
    with pytest.raises(ValidationError):
        p.update(phase="Bogus")
    assert p.changed() == {}
    p.update(
        phase=JobPhase.FAILED, restored_from=RestoredFrom(path="s3://b/p", mode=RestoreMode.CLAIM)
    )
    assert p.status.phase is JobPhase.FAILED
    assert p.changed() == {
        "phase": "Failed",
        "restoredFrom": {"path": "s3://b/p", "mode": "Claim", "released": False},
    }


def test_conditions_are_patched_as_a_whole_list() -> None:
    p = _pass({"conditions": [{"type": "Ready", "status": "Unknown"}, "garbage"]})
    p.condition("Ready", True, "Running", "ok")
    assert p.changed() == {
        "conditions": [
            {
                "type": "Ready",
                "status": "True",
                "reason": "Running",
                "message": "ok",
                "lastTransitionTime": "2027-01-15T08:00:00Z",
                "observedGeneration": 3,
            }
        ]
    }


def test_a_pass_never_raises_on_what_it_reads() -> None:
    p = _pass({"phase": ["x"], "pending": {"kind": 1}, "conditions": {"Ready": True}})
    assert p.status == GICJobStatus()
    assert p.stored("pending") == {"kind": 1} and p.stored("last_sweep") is None
    assert p.changed() == {}


def _stored_pass(kube: TestingKubeApi, status: dict[str, Any]) -> Pass[GICJobStatus]:
    """A pass over a job that exists in ``kube`` with ``status``."""
    kube.put_object("gicjobs", NS, {"kind": "GICJob", "metadata": {"name": "wc"}, "spec": {}})
    kube.patch_status("gicjobs", NS, "wc", status)
    body = kube.get_object("gicjobs", NS, "wc")
    assert body is not None
    return Pass(kube, "gicjobs", body, GICJobStatus, clock=lambda: 1_800_000_000.0)


def test_write_ahead_stores_now_and_the_commit_patches_on_top() -> None:
    kube = TestingKubeApi()
    p = _stored_pass(kube, {"phase": "Running", "restarts": 1})
    read_at = p.resource_version
    p.update(restarts=2)
    assert p.write_ahead()
    stored = kube.get_object("gicjobs", NS, "wc")
    assert stored is not None and stored["status"]["restarts"] == 2
    assert p.resource_version == stored["metadata"]["resourceVersion"] != read_at
    assert p.changed() == {}, "what was written ahead is not sent again"
    p.update(phase=JobPhase.RECOVERING)
    assert p.commit() == {"phase": "Recovering"}
    stored = kube.get_object("gicjobs", NS, "wc")
    assert stored is not None
    assert (stored["status"]["phase"], stored["status"]["restarts"]) == ("Recovering", 2)


def test_a_conflicting_write_ahead_writes_nothing_for_the_rest_of_the_pass() -> None:
    kube = TestingKubeApi()
    p = _stored_pass(kube, {"phase": "Running", "restarts": 1})
    kube.patch_status("gicjobs", NS, "wc", {"message": "someone else"})  # a newer version
    p.update(restarts=2)
    p.event("Normal", "Restarted", "x")
    assert not p.write_ahead() and p.conflicted
    p.update(phase=JobPhase.RECOVERING)
    assert p.commit() == {}
    stored = kube.get_object("gicjobs", NS, "wc")
    assert stored is not None
    assert stored["status"] == {"phase": "Running", "restarts": 1, "message": "someone else"}
    assert "event" not in [c[0] for c in kube.calls]


# --- one enum per concept ---------------------------------------------------------------------


def test_restore_mode_converts_to_the_runtimes_word() -> None:
    assert RestoreMode.CLAIM.to_runtime() is RuntimeRestoreMode.CLAIM
    assert RestoreMode.NO_CLAIM.to_runtime() is RuntimeRestoreMode.NO_CLAIM
    assert {m.to_runtime() for m in RestoreMode} == set(RuntimeRestoreMode)


def test_savepoint_mode_converts_to_the_runtimes_type() -> None:
    assert SavepointMode.STOP.to_runtime() is SavepointType.TERMINAL
    assert SavepointMode.INTERMEDIATE.to_runtime() is SavepointType.INTERMEDIATE


def test_the_plan_carries_the_runtimes_restore_mode() -> None:
    spec = GICJobSpec.model_validate(
        {
            "application": {"image": "i", "mainFile": "/opt/job.py"},
            "checkpointing": {"storage": "s3://b/gic"},
        }
    )
    plan = LaunchPlan(
        namespace=NS,
        name="wc",
        uid="u",
        spec=spec,
        job_id=f"{NS}.wc",
        epoch=1,
        restore_source="s3://b/gic/savepoints/x",
        restore_mode=RestoreMode.CLAIM.to_runtime(),
    )
    env = launch_config.settings_env(plan)
    assert env["GIC_RESTORE_MODE"] == "claim"
    assert GICSettings.from_env(env).restore_mode is RuntimeRestoreMode.CLAIM


# --- tuning defaults are the runtime's -------------------------------------------------------

#: CRD field (JSON path under spec.checkpointing) -> the runtime's setting.
TUNING = {
    "buckets": "num_buckets",
    "retainedCheckpoints": "retained_checkpoints",
    "materializationIntervalSeconds": "materialization_interval_s",
    "changelog.preemptiveUploadBytes": "changelog_preemptive_upload_bytes",
    "changelog.maxHedges": "max_hedges",
}


def test_checkpoint_tuning_defaults_are_the_runtimes() -> None:
    spec = GICJobSpec.model_validate(
        {
            "application": {"image": "i", "mainFile": "/opt/job.py"},
            "checkpointing": {"storage": "s3://b/gic"},
        }
    )
    stored = spec.to_kube()["checkpointing"]
    settings = GICSettings.from_env(
        launch_config.settings_env(
            LaunchPlan(namespace=NS, name="wc", uid="u", spec=spec, job_id=f"{NS}.wc", epoch=1)
        )
    )
    defaults = GICSettings(storage="s3://b/gic")
    for path, setting in TUNING.items():
        value: Any = stored
        for part in path.split("."):
            value = value[part]
        assert value == GICSettings.model_fields[setting].default == runtime_default(setting)
        assert getattr(settings, setting) == getattr(defaults, setting), setting


def test_runtime_default_refuses_a_setting_without_a_numeric_default() -> None:
    with pytest.raises(TypeError):
        runtime_default("changelog_codec")


# --- the CRD of a discriminated union ------------------------------------------------------------


class _A(BaseModel):
    kind: Literal["a"] = Field("a", description="Which.")
    shared: int = Field(description="Shared.")


class _B(BaseModel):
    kind: Literal["b"] = Field("b", description="Which.")
    shared: int = Field(description="Shared.")
    only_b: str = Field(description="B's own.")


class _C(BaseModel):
    kind: Literal["c"] = Field("c", description="Which.")
    shared: str = Field(description="Shared.")


class _Tagged(BaseModel):
    value: _A | _B = Field(discriminator="kind", description="A or B.")


class _Clash(BaseModel):
    value: _A | _C = Field(discriminator="kind", description="A or C.")


def test_a_discriminated_union_becomes_one_object() -> None:
    schema = structural_schema(_Tagged)["properties"]["value"]
    assert schema["type"] == "object" and schema["description"] == "A or B."
    assert schema["properties"]["kind"] == {
        "description": "Which.",
        "type": "string",
        "enum": ["a", "b"],
    }
    assert schema["required"] == ["kind", "shared"]
    assert set(schema["properties"]) == {"kind", "shared", "only_b"}


def test_union_members_must_agree_on_shared_fields() -> None:
    with pytest.raises(CrdSchemaError, match="shared: differs"):
        structural_schema(_Clash)


def test_pending_in_the_crd_names_every_actions_field() -> None:
    pending = structural_schema(GICJobStatus)["properties"]["pending"]
    assert pending["properties"]["kind"]["enum"] == ["recover", "upgrade", "suspend"]
    assert pending["required"] == ["kind", "started"]
    assert pending["nullable"] is True
    fields = set(RecoverAction.model_fields) | set(UpgradeAction.model_fields)
    assert len(pending["properties"]) == len(fields | set(SuspendAction.model_fields))
