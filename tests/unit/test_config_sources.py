"""GICSettings on pydantic-settings: caller defaults, which sources count as given, and
that direct construction never reads the environment."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gic_runtime.config import GICSettings
from gic_runtime.errors import ConfigurationError


def test_caller_defaults_rank_below_every_source(tmp_path: Path) -> None:
    defaults = {"job_id": ("from-app", "the app name"), "num_buckets": (8, "the app")}
    file = tmp_path / "gic.json"
    file.write_text(json.dumps({"num_buckets": 16}))

    assert GICSettings.load(env={}, defaults=defaults).job_id == "from-app"
    assert GICSettings.load(env={"GIC_JOB_ID": "env"}, defaults=defaults).job_id == "env"
    assert GICSettings.load(file, env={}, defaults=defaults).num_buckets == 16
    assert GICSettings.load(env={}, defaults=defaults, job_id="arg").job_id == "arg"


def test_a_bad_caller_default_is_named_as_the_caller_says() -> None:
    with pytest.raises(ConfigurationError) as info:
        GICSettings.load(env={}, defaults={"job_id": ("My App", "the app name given to X")})

    assert "the app name given to X = 'My App': invalid job id" in str(info.value)


def test_fields_set_are_exactly_the_ones_a_source_gave(tmp_path: Path) -> None:
    file = tmp_path / "gic.yaml"
    file.write_text("max_hedges: 2\n")

    settings = GICSettings.load(file, env={"GIC_EPOCH": "3"}, num_buckets=4, storage=None)

    assert settings.model_fields_set == {"max_hedges", "epoch", "num_buckets"}
    assert GICSettings.load(env={}).model_fields_set == set()


def test_direct_construction_ignores_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GIC_NUM_BUCKETS", "7")
    monkeypatch.setenv("GIC_JOB_ID", "from-env")

    assert GICSettings(max_hedges=0).num_buckets == 128
    assert GICSettings().job_id == "gic-job"
    assert GICSettings.load().num_buckets == 7  # load() reads os.environ by default


def test_env_names_and_blank_optionals() -> None:
    settings = GICSettings.from_env({"gic_num_buckets": "9", "GIC_EPOCH": " "})

    assert (settings.num_buckets, settings.epoch) == (9, None)
    with pytest.raises(ConfigurationError, match="environment variable GIC_NUM_BUCKETS = ''"):
        GICSettings.from_env({"GIC_NUM_BUCKETS": ""})
