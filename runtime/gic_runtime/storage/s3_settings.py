"""Connection settings for S3-compatible stores.

Credentials come only from these settings (filled from a Kubernetes Secret through the
environment) or from boto3's own default chain; they are never logged and ``repr``
(hence ``str``) hides them.

Invariant: the three credential fields travel together. Temporary (STS) credentials
are an access key id, a secret and a session token; a client built with the first two
but not the third is refused by S3 (``InvalidToken``), so whatever reads the key pair
reads the token from the same source.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

#: Where the credentials of a process come from, for the messages of refused requests: the
#: same words in a driver's failure, the operator's status and the CLI's errors.
CREDENTIAL_SOURCES = (
    "AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY in this process's environment, else boto3's "
    "default chain: profile, web identity, instance role. A GICJob's driver and executors "
    "get the variables from the Secret named in spec.checkpointing.credentialsSecret (or "
    "from spec.application.env), the operator from its own environment (the chart's "
    "storageCredentials.secretName)"
)


@dataclass(frozen=True)
class S3Settings:
    """How to reach an S3 endpoint."""

    endpoint_url: str | None = None
    """Custom endpoint (SeaweedFS, MinIO...); ``None`` means AWS. Env: ``GIC_S3_ENDPOINT_URL``
    or ``AWS_ENDPOINT_URL``."""
    region: str | None = None
    """Region name; env ``AWS_REGION`` / ``AWS_DEFAULT_REGION``."""
    access_key_id: str | None = field(default=None, repr=False)
    """Env ``AWS_ACCESS_KEY_ID``; ``None`` lets boto3 use its default credential chain."""
    secret_access_key: str | None = field(default=None, repr=False)
    """Env ``AWS_SECRET_ACCESS_KEY``."""
    session_token: str | None = field(default=None, repr=False)
    """Env ``AWS_SESSION_TOKEN``: the third part of temporary (STS) credentials; ``None``
    for long-lived keys."""
    connect_timeout_s: float = 5.0
    """TCP connect timeout; short so a dead endpoint surfaces quickly."""
    read_timeout_s: float = 30.0
    """Socket read timeout per request; the uploader's hedging handles slow tails."""
    max_pool_connections: int = 32
    """HTTP connection pool size; enough for parallel uploads, hedges and deletes."""
    addressing_style: str = "path"
    """``path`` works with every S3-compatible server; ``virtual`` for AWS-only setups."""
    max_attempts: int = 3
    """Attempts per request, first one included, made by botocore's ``standard`` retry mode
    (503 SlowDown, 5xx, throttling, connection errors, timeouts). ``1`` disables botocore's
    retries, for callers with their own retry policy."""

    @classmethod
    def from_env(cls, env: dict[str, str] | None = None) -> S3Settings:
        """Settings from environment variables (``os.environ`` by default)."""
        e = os.environ if env is None else env
        return cls(
            endpoint_url=e.get("GIC_S3_ENDPOINT_URL") or e.get("AWS_ENDPOINT_URL") or None,
            region=e.get("AWS_REGION") or e.get("AWS_DEFAULT_REGION") or None,
            access_key_id=e.get("AWS_ACCESS_KEY_ID") or None,
            secret_access_key=e.get("AWS_SECRET_ACCESS_KEY") or None,
            session_token=e.get("AWS_SESSION_TOKEN") or None,
        )
