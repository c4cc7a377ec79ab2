"""Temporary S3 credentials reach every client, and never show.

Temporary (STS) credentials are an access key id, a secret and a session token. A
client built with the key pair alone is refused by S3 (``InvalidToken``), so the token
must travel the same way as the keys: from the environment (a GICJob's
``credentialsSecret`` puts ``AWS_SESSION_TOKEN`` there, as the operator's own Secret
does) into :class:`S3Settings` and into the boto3 client the runtime and the operator
build. Checked on the client's own credentials, offline. The token, like the keys,
never appears in a settings ``repr``/``str`` or in an error message.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import replace
from typing import Any

import pytest
from botocore.stub import Stubber

from gic_operator.storage import job_storage
from gic_runtime.errors import StoragePermissionError
from gic_runtime.storage import StoreResolver
from gic_runtime.storage.s3 import S3ObjectStore, create_s3_client
from gic_runtime.storage.s3_settings import S3Settings

KEY_ID = "ASIATESTKEYID0000001"
SECRET = "secret-7f3a9c0e-never-shown"
TOKEN = "token-IQoJb3JpZ2luX2VjE-never-shown"
ENDPOINT = "http://127.0.0.1:9"

STS = S3Settings(
    endpoint_url=ENDPOINT,
    region="us-east-1",
    access_key_id=KEY_ID,
    secret_access_key=SECRET,
    session_token=TOKEN,
    max_attempts=1,
)


def credentials(client: Any) -> tuple[str | None, str | None, str | None]:
    """What the client signs its requests with: ``(key id, secret, token)``."""
    frozen = client._request_signer._credentials.get_frozen_credentials()
    return frozen.access_key, frozen.secret_key, frozen.token


def s3_client_of(store: object) -> Any:
    assert isinstance(store, S3ObjectStore)
    return store._client


@pytest.fixture
def sts_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("GIC_S3_ENDPOINT_URL", "AWS_PROFILE", "AWS_CONFIG_FILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_ENDPOINT_URL", ENDPOINT)
    monkeypatch.setenv("AWS_REGION", "us-east-1")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", KEY_ID)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", SECRET)
    monkeypatch.setenv("AWS_SESSION_TOKEN", TOKEN)


def test_settings_from_the_environment_carry_the_token() -> None:
    env = {"AWS_ACCESS_KEY_ID": KEY_ID, "AWS_SECRET_ACCESS_KEY": SECRET}
    assert S3Settings.from_env(env).session_token is None
    assert S3Settings.from_env({**env, "AWS_SESSION_TOKEN": ""}).session_token is None
    assert S3Settings.from_env({**env, "AWS_SESSION_TOKEN": TOKEN}).session_token == TOKEN


def test_the_client_signs_with_all_three_parts() -> None:
    assert credentials(create_s3_client(STS)) == (KEY_ID, SECRET, TOKEN)
    long_lived = replace(STS, session_token=None)
    assert credentials(create_s3_client(long_lived)) == (KEY_ID, SECRET, None)


def test_a_store_and_the_runtime_resolver_use_the_token(sts_env: None) -> None:
    assert credentials(s3_client_of(S3ObjectStore("bkt", "gic", settings=STS)))[2] == TOKEN
    store, key = StoreResolver().resolve("s3://bkt/jobs/a/status.json")
    assert key == "jobs/a/status.json"
    assert credentials(s3_client_of(store)) == (KEY_ID, SECRET, TOKEN)


def test_the_operator_resolver_uses_the_token(
    sts_env: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(job_storage, "_resolvers", OrderedDict())
    for endpoint in (None, "https://minio.storage.svc:9000"):
        store, _ = job_storage.resolver_for(endpoint).resolve("s3://bkt/jobs/a/status.json")
        assert credentials(s3_client_of(store)) == (KEY_ID, SECRET, TOKEN)


def test_settings_never_show_a_credential() -> None:
    for text in (repr(STS), str(STS)):
        for secret in (KEY_ID, SECRET, TOKEN):
            assert secret not in text
    assert "us-east-1" in repr(STS)


def test_an_expired_token_is_named_but_never_shown() -> None:
    store = S3ObjectStore("bkt", "gic", settings=STS)
    client = s3_client_of(store)
    with Stubber(client) as stub:
        stub.add_client_error(
            "get_object",
            service_error_code="ExpiredToken",
            service_message="The provided token has expired.",
            http_status_code=400,
        )
        with pytest.raises(StoragePermissionError) as info:
            store.get("jobs/a/status.json")
    message = str(info.value)
    assert "AWS_SESSION_TOKEN" in message and "ExpiredToken" in message
    for secret in (KEY_ID, SECRET, TOKEN):
        assert secret not in message
