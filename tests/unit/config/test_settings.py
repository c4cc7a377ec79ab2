"""GICSettings: sources and precedence, normalization, clear errors, env round trip."""

from __future__ import annotations

import getpass
import json
import sys
import tempfile
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gic_runtime.changelog.segment import Codec
from gic_runtime.checkpoint.manifest import RestoreMode
from gic_runtime.config import ACCEPTED, GICSettings, default_local_dir, env_var
from gic_runtime.errors import ConfigurationError


def test_defaults_resolve_storage_against_the_working_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    s = GICSettings.load(env={})
    assert s.storage == (tmp_path / "gic-data").as_uri()
    assert (s.job_id, s.num_buckets, s.num_tasks, s.retained_checkpoints) == (
        "gic-job",
        128,
        None,
        2,
    )
    assert s.restore_mode is RestoreMode.NO_CLAIM
    assert s.epoch is None and s.metrics_port is None and s.max_batches is None
    assert s.local_dir is None  # executor scratch on a cluster, beside the storage locally
    assert s.resolved_local_dir == str(tmp_path / "gic-data-local")
    assert s.changelog_preemptive_upload_bytes == 4 * 1024 * 1024


def test_local_state_goes_beside_a_local_root_and_to_a_per_user_temp_dir_otherwise(
    tmp_path: Path,
) -> None:
    root = tmp_path / "data"
    beside = default_local_dir(root.as_uri())
    assert beside == str(tmp_path / "data-local")
    assert not Path(beside).is_relative_to(root)  # the sweep of the root never sees it
    per_user = default_local_dir("s3://bucket/gic")
    assert Path(per_user).parent == Path(tempfile.gettempdir())
    assert Path(per_user).name == f"gic-local-{getpass.getuser()}"
    assert default_local_dir("file:///") == per_user == default_local_dir()
    # beside a root not created yet; the per-user default where nothing can be created
    assert default_local_dir((tmp_path / "new" / "data").as_uri()) == str(
        tmp_path / "new" / "data-local"
    )
    (tmp_path / "a-file").write_text("")
    assert default_local_dir((tmp_path / "a-file" / "data").as_uri()) == per_user
    chosen = GICSettings.load(env={}, storage=root.as_uri(), local_dir=str(tmp_path / "x"))
    assert chosen.resolved_local_dir == str(tmp_path / "x")


def test_every_setting_documents_itself_and_what_it_accepts() -> None:
    for name, info in GICSettings.model_fields.items():
        assert info.description, name
        assert name in ACCEPTED, name


def test_overrides_beat_env_which_beats_the_file(tmp_path: Path) -> None:
    file = tmp_path / "gic.json"
    file.write_text(json.dumps({"num_buckets": 16, "job_id": "from-file", "max_hedges": 3}))
    env = {"GIC_NUM_BUCKETS": "32", "GIC_JOB_ID": "from-env"}
    s = GICSettings.load(str(file), env=env, job_id="from-arg", max_batches=None)
    assert s.job_id == "from-arg"  # override
    assert s.num_buckets == 32  # env over file
    assert s.max_hedges == 3  # file over default
    assert s.max_batches is None  # a None override counts as not given


def test_config_file_is_named_by_env_unless_given(tmp_path: Path) -> None:
    named = tmp_path / "named.json"
    named.write_text('{"num_buckets": 8}')
    given_file = tmp_path / "given.json"
    given_file.write_text('{"num_buckets": 4}')
    env = {"GIC_CONFIG_FILE": str(named)}
    assert GICSettings.load(env=env).num_buckets == 8
    assert GICSettings.load(given_file, env=env).num_buckets == 4


def test_a_none_override_does_not_hide_env() -> None:
    s = GICSettings.load(env={"GIC_EPOCH": "7"}, epoch=None)
    assert s.epoch == 7


def test_storage_and_restore_source_become_full_uris(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    s = GICSettings(storage="data/", restore_source="sp/one")
    assert s.storage == (tmp_path / "data").as_uri()
    assert s.restore_source == (tmp_path / "sp" / "one").as_uri()
    assert GICSettings(storage="s3://bucket/some/prefix/").storage == "s3://bucket/some/prefix"
    assert GICSettings(storage="file:///var/gic").storage == "file:///var/gic"


@pytest.mark.parametrize(
    ("text", "mode"),
    [
        ("claim", RestoreMode.CLAIM),
        ("Claim", RestoreMode.CLAIM),
        ("CLAIM", RestoreMode.CLAIM),
        ("no-claim", RestoreMode.NO_CLAIM),
        ("NoClaim", RestoreMode.NO_CLAIM),
        ("no_claim", RestoreMode.NO_CLAIM),
        ("NOCLAIM", RestoreMode.NO_CLAIM),
    ],
)
def test_restore_mode_spellings(text: str, mode: RestoreMode) -> None:
    assert GICSettings.from_env({"GIC_RESTORE_MODE": text}).restore_mode is mode


def test_empty_env_value_of_an_optional_setting_means_unset() -> None:
    s = GICSettings.from_env({"GIC_EPOCH": "", "GIC_NUM_TASKS": " ", "GIC_HEDGE_AFTER_S": ""})
    assert (s.epoch, s.num_tasks, s.hedge_after_s) == (None, None, None)


def test_unrelated_gic_variables_are_ignored() -> None:
    s = GICSettings.from_env(
        {"GIC_S3_ENDPOINT_URL": "http://x", "GIC_CONFIG_FILE": "", "PATH": "/"}
    )
    assert s.job_id == "gic-job"


def test_bad_values_give_one_error_with_a_line_per_setting(tmp_path: Path) -> None:
    file = tmp_path / "gic.json"
    file.write_text(json.dumps({"retained_checkpoints": 0, "colour": "blue"}))
    env = {
        "GIC_NUM_BUCKETS": "0",
        "GIC_RESTORE_MODE": "sometimes",
        "GIC_STORAGE": "ftp://host/x",
        "GIC_CHANGELOG_CODEC": "lz4",
    }
    with pytest.raises(ConfigurationError) as info:
        GICSettings.load(file, env=env, job_id="Not Valid", materialization_jitter=1.5)
    lines = str(info.value).splitlines()
    assert lines[0] == "invalid GIC settings (8 problems):"
    body = lines[1:]
    assert len(body) == 8
    joined = "\n".join(body)
    assert "environment variable GIC_NUM_BUCKETS = '0'" in joined
    assert "accepted: an integer from 1 to 32768" in joined
    assert "environment variable GIC_RESTORE_MODE" in joined and "'no-claim'" in joined
    assert "environment variable GIC_STORAGE" in joined and "s3://bucket/prefix" in joined
    assert "environment variable GIC_CHANGELOG_CODEC" in joined and "'zstd' or 'none'" in joined
    assert f"file {file} key 'retained_checkpoints' = 0" in joined
    assert f"file {file} key 'colour': not a setting" in joined
    assert "argument job_id = 'Not Valid'" in joined
    assert "argument materialization_jitter = 1.5" in joined


def test_direct_construction_raises_configuration_error_too() -> None:
    with pytest.raises(ConfigurationError, match="argument num_buckets = 40000"):
        GICSettings(num_buckets=40000)
    with pytest.raises(ConfigurationError, match="argument control_poll_s = inf"):
        GICSettings(control_poll_s=float("inf"))
    with pytest.raises(ConfigurationError, match="argument surprise: not a setting"):
        GICSettings(surprise=1)


def test_yaml_file(tmp_path: Path) -> None:
    pytest.importorskip("yaml")
    file = tmp_path / "gic.yaml"
    file.write_text("job_id: yaml-job\nnum_buckets: 64\nrestore_mode: Claim\n")
    s = GICSettings.from_file(file)
    assert (s.job_id, s.num_buckets, s.restore_mode) == ("yaml-job", 64, RestoreMode.CLAIM)


def test_yaml_without_pyyaml_says_what_to_do(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    file = tmp_path / "gic.yml"
    file.write_text("num_buckets: 64\n")
    monkeypatch.setitem(sys.modules, "yaml", None)  # import yaml -> ImportError
    with pytest.raises(ConfigurationError, match=r"pyyaml is not installed.*JSON"):
        GICSettings.from_file(file)


@pytest.mark.parametrize(
    ("name", "text", "message"),
    [
        ("gic.toml", "x = 1", "unknown extension '.toml'"),
        ("gic.json", "{not json", "is not valid JSON"),
        ("gic.json", "[1, 2]", "must hold a mapping"),
    ],
)
def test_bad_files(tmp_path: Path, name: str, text: str, message: str) -> None:
    file = tmp_path / name
    file.write_text(text)
    with pytest.raises(ConfigurationError, match=message):
        GICSettings.from_file(file)


def test_missing_file_names_the_path(tmp_path: Path) -> None:
    missing = tmp_path / "absent.json"
    with pytest.raises(ConfigurationError, match=r"cannot read settings file .*absent\.json"):
        GICSettings.load(env={"GIC_CONFIG_FILE": str(missing)})


def test_empty_json_object_file_means_defaults(tmp_path: Path) -> None:
    file = tmp_path / "gic.json"
    file.write_text("{}")
    assert GICSettings.from_file(file).num_buckets == 128


def test_task_settings_carry_the_tuning() -> None:
    s = GICSettings(
        changelog_preemptive_upload_bytes=1024,
        changelog_codec="none",
        max_hedges=0,
        hedge_after_s=0.25,
        hedge_budget_ratio=0.1,
        materialization_interval_s=30.0,
        materialization_jitter=0.0,
        materialization_max_in_flight=2,
        materialization_growth_turns=False,
        checkpoint_timeout_s=12.0,
    )
    t = s.task_settings()
    assert (t.writer.preemptive_upload_bytes, t.writer.codec) == (1024, Codec.NONE)
    assert (t.uploader.max_hedges, t.uploader.hedge_after_s) == (0, 0.25)
    assert t.uploader.hedge_budget_ratio == 0.1
    m = t.materialization
    assert (m.interval_s, m.jitter, m.max_in_flight, m.growth_turns) == (30.0, 0.0, 2, False)
    assert GICSettings().task_settings().materialization.growth_turns
    assert not GICSettings.from_env(
        {"GIC_MATERIALIZATION_GROWTH_TURNS": "off"}
    ).materialization_growth_turns
    assert t.checkpoint_timeout_s == 12.0
    assert GICSettings(changelog_codec="ZSTD").task_settings().writer.codec is Codec.ZSTD


def test_to_env_leaves_unset_settings_out() -> None:
    env = GICSettings(job_id="j1").to_env()
    assert env["GIC_JOB_ID"] == "j1"
    assert "GIC_EPOCH" not in env and "GIC_RESTORE_SOURCE" not in env
    assert env["GIC_RESTORE_MODE"] == "no-claim"
    assert env["GIC_FULL_SNAPSHOTS"] == "false"
    assert all(key == env_var(key[4:].lower()) for key in env)


_ids = st.from_regex(r"[a-z0-9]([a-z0-9._-]{0,20}[a-z0-9])?", fullmatch=True)
_pos_float = st.floats(min_value=1e-6, max_value=1e9, allow_nan=False, allow_infinity=False)
_settings = st.builds(
    GICSettings,
    job_id=_ids,
    storage=st.one_of(
        _ids.map(lambda p: f"s3://bucket-{p}/pre/{p}"), _ids.map(lambda p: f"file:///data/{p}")
    ),
    num_buckets=st.integers(1, 32768),
    num_tasks=st.none() | st.integers(1, 10_000),
    retained_checkpoints=st.integers(1, 100),
    materialization_interval_s=_pos_float,
    materialization_jitter=st.floats(0, 0.999, allow_nan=False),
    materialization_max_in_flight=st.integers(1, 64),
    materialization_growth_turns=st.booleans(),
    changelog_preemptive_upload_bytes=st.integers(1, 2**40),
    changelog_codec=st.sampled_from(["zstd", "none"]),
    max_hedges=st.integers(0, 5),
    hedge_after_s=st.none() | _pos_float,
    hedge_budget_ratio=st.floats(0, 1, allow_nan=False),
    full_snapshots=st.booleans(),
    checkpoint_timeout_s=_pos_float,
    restore_source=st.none() | _ids.map(lambda p: f"s3://b/savepoints/{p}"),
    restore_mode=st.sampled_from(list(RestoreMode)),
    epoch=st.none() | st.integers(1, 2**40),
    local_dir=_ids.map(lambda p: f"/var/tmp/{p}"),
    max_batches=st.none() | st.integers(1, 10**9),
    metrics_port=st.none() | st.integers(0, 65535),
    control_poll_s=_pos_float,
)


@settings(max_examples=150, deadline=None)
@given(_settings)
def test_env_round_trip(s: GICSettings) -> None:
    env = s.to_env()
    assert all(isinstance(v, str) for v in env.values())
    assert GICSettings.from_env(env) == s
    assert GICSettings.load(env=env) == s


def test_retained_checkpoints_are_bounded_like_the_crd() -> None:
    assert GICSettings.from_env({"GIC_RETAINED_CHECKPOINTS": "1000"}).retained_checkpoints == 1000
    with pytest.raises(ConfigurationError) as info:
        GICSettings.from_env({"GIC_RETAINED_CHECKPOINTS": "1001"})
    assert "accepted: an integer from 1 to 1000" in str(info.value)
