"""The bundled S3 server (SeaweedFS's `weed mini`), run with the environment
docker-compose.yml gives it (with the keys `dlaas secrets compose` generates), accepts the
credentials dlaas is configured with and refuses every other request."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from botocore.exceptions import ClientError

from storage.object_store import S3ObjectStore
from tests import compose_file, services

ENV = compose_file.generated_env()


def compose_services() -> dict[str, Any]:
    return compose_file.services(ENV)


@pytest.fixture(scope="module")
def bundled_s3(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, tuple[str, str]]]:
    env = compose_services()["s3"]["environment"]
    credentials = (env["AWS_ACCESS_KEY_ID"], env["AWS_SECRET_ACCESS_KEY"])
    server = services.start_seaweedfs(tmp_path_factory.mktemp("s3"), credentials=credentials)
    try:
        yield server.endpoint_url, credentials
    finally:
        server.stop()


def test_compose_gives_the_s3_server_the_credentials_dlaas_uses() -> None:
    compose = compose_services()
    server = compose["s3"]["environment"]
    for name in ("api", "worker", "beat", "monitor"):
        dlaas = compose[name]["environment"]
        assert (dlaas["DLAAS_S3_ACCESS_KEY"], dlaas["DLAAS_S3_SECRET_KEY"]) == (
            server["AWS_ACCESS_KEY_ID"],
            server["AWS_SECRET_ACCESS_KEY"],
        )
    # The node agent holds none: a learner gets what its job needs from its spec.
    assert not {"DLAAS_S3_ACCESS_KEY", "DLAAS_S3_SECRET_KEY"} & set(compose["agent"]["environment"])


def test_dlaas_credentials_work(bundled_s3: tuple[str, tuple[str, str]]) -> None:
    endpoint, credentials = bundled_s3
    store = S3ObjectStore(services.s3_client(endpoint, credentials), "dlaas")
    store.put_bytes("jobs/x/model.zip", b"weights")
    assert store.get_bytes("jobs/x/model.zip") == b"weights"


@pytest.mark.parametrize(
    "wrong",
    [("dlaas", "not-the-secret"), ("someone-else", "whatever")],
    ids=["wrong-secret", "unknown-key"],
)
def test_other_credentials_are_refused(
    bundled_s3: tuple[str, tuple[str, str]], wrong: tuple[str, str]
) -> None:
    endpoint, credentials = bundled_s3
    S3ObjectStore(services.s3_client(endpoint, credentials), "dlaas")
    client = services.s3_client(endpoint, wrong)
    with pytest.raises(ClientError) as refused:
        client.put_object(Bucket="dlaas", Key="intruder", Body=b"x")
    assert refused.value.response["ResponseMetadata"]["HTTPStatusCode"] == 403
    with pytest.raises(ClientError):
        client.list_objects_v2(Bucket="dlaas")
