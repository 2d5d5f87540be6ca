"""Object storage for dlaas: job archives, data, checkpoints, logs and results.

Two backends share one interface (`ObjectStore`): `LocalObjectStore` keeps objects as files
under a directory, `S3ObjectStore` keeps them in an S3 bucket. `open_object_store(settings)`
picks one from `settings.object_store`. Keys are '/'-separated paths with no leading '/', no
'.' or '..' components and no backslashes.

boto3 is imported only when the S3 backend is used, so importing this package stays cheap.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from storage.object_store.base import (
    CHUNK_SIZE,
    BadContinuation,
    ObjectInfo,
    ObjectNotFound,
    ObjectPage,
    ObjectStore,
    ProgressCallback,
    validate_key,
    validate_prefix,
)
from storage.object_store.local import LocalObjectStore

if TYPE_CHECKING:
    from storage.object_store.s3 import S3ObjectStore, make_s3_client
    from storage.settings import Settings

__all__ = [
    "CHUNK_SIZE",
    "JOB_OBJECTS_URL_ENV",
    "JOB_TOKEN_ENV",
    "BadContinuation",
    "LocalObjectStore",
    "ObjectInfo",
    "ObjectNotFound",
    "ObjectPage",
    "ObjectStore",
    "ProgressCallback",
    "S3ObjectStore",
    "make_s3_client",
    "open_learner_object_store",
    "open_object_store",
    "validate_key",
    "validate_prefix",
]


def open_object_store(settings: Settings) -> ObjectStore:
    """The object store `settings` describe (`DLAAS_OBJECT_STORE` = local | s3)."""
    if settings.object_store == "s3":
        from storage.object_store.s3 import S3ObjectStore, make_s3_client

        client = make_s3_client(
            settings.s3_endpoint_url,
            settings.s3_access_key,
            settings.s3_secret_key,
            settings.s3_region,
        )
        return S3ObjectStore(client, settings.s3_bucket)
    if settings.objects_dir is None:
        raise ValueError("objects_dir is not set; set DLAAS_OBJECTS_DIR or DLAAS_HOME")
    return LocalObjectStore(settings.objects_dir)


JOB_OBJECTS_URL_ENV = "DLAAS_JOB_OBJECTS_URL"
JOB_TOKEN_ENV = "DLAAS_JOB_TOKEN"


def open_learner_object_store(settings: Settings, environ: Mapping[str, str]) -> ObjectStore:
    """The store a learner's runner uses: the API's object gateway with its job's token
    (`DLAAS_JOB_OBJECTS_URL`, `DLAAS_JOB_TOKEN`, as the lifecycle manager sets them), or,
    for a runner started by hand without them, the store `settings` describe."""
    url = environ.get(JOB_OBJECTS_URL_ENV, "").strip()
    token = environ.get(JOB_TOKEN_ENV, "").strip()
    if url or token:
        if not (url and token):
            missing = JOB_OBJECTS_URL_ENV if not url else JOB_TOKEN_ENV
            raise ValueError(
                f"{missing} is not set: a learner reaches its job's objects through the API's "
                "object gateway with its job's token (the lifecycle manager needs "
                "DLAAS_API_URL to tell learners where the API is)"
            )
        from storage.object_store.gateway import GatewayObjectStore

        return GatewayObjectStore(url, token)
    return open_object_store(settings)


def __getattr__(name: str) -> Any:
    if name in {"S3ObjectStore", "make_s3_client"}:
        from storage.object_store import s3

        return getattr(s3, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
