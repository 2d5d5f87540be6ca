"""The dlaas API as a real server process, and its served OpenAPI loaded by schemathesis.

contract_api    -> ContractApi   `python -m api` on a free port, on a database of its own
                                 (its admin token must not fight other tests' for "admin"),
                                 the run's Redis and a temporary object store
contract_schema -> OpenApiSchema the served /openapi.json, sending the admin's token
"""

from __future__ import annotations

import os
import secrets
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
import redis
import schemathesis
from schemathesis.config import SchemathesisConfig
from schemathesis.specs.openapi.schemas import OpenApiSchema

from storage import cluster_nodes, queue_view
from tests import services
from tests.postgres import PostgresServer

REPO = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class ContractApi:
    url: str
    admin_token: str


# The contract holds on every database: SQLite (the embedded default) keeps no offsets and
# hands back what PostgreSQL would not.
@pytest.fixture(scope="module", params=["postgresql", "sqlite"])
def contract_api(
    request: pytest.FixtureRequest,
    postgres_server: PostgresServer,
    redis_url: str,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[ContractApi]:
    workdir = tmp_path_factory.mktemp("contract-api")
    on_postgres = request.param == "postgresql"
    database = postgres_server.create_database("dlaas_contract") if on_postgres else ""
    database_url = (
        postgres_server.url(database)
        if on_postgres
        else f"sqlite+aiosqlite:///{workdir / 'contract.db'}"
    )
    token = secrets.token_urlsafe(24)
    url = f"http://127.0.0.1:{services.free_port()}"
    env = {
        **os.environ,
        "PYTHONPATH": str(REPO),  # this checkout's code, whatever the venv installed
        "DLAAS_HOME": str(workdir / "home"),
        "DLAAS_DATABASE_URL": database_url,
        "DLAAS_REDIS_URL": redis_url,
        "DLAAS_OBJECT_STORE": "local",
        "DLAAS_OBJECTS_DIR": str(workdir / "objects"),
        "DLAAS_ADMIN_TOKEN": token,
        # The run sends hundreds of requests a second from one token and one address: limits
        # it never reaches keep the rate limiter on every request without refusing any.
        "DLAAS_RATE_LIMIT_PER_S": "1000000",
        "DLAAS_RATE_LIMIT_BURST": "1000000",
        "DLAAS_ADDRESS_RATE_LIMIT_PER_S": "1000000",
        "DLAAS_ADDRESS_RATE_LIMIT_BURST": "1000000",
    }
    # what a scheduling pass of an earlier test published in the run's shared Redis (its
    # nodes refuse bigger jobs at submission) is not this platform's
    with redis.Redis.from_url(redis_url) as shared:
        shared.delete(cluster_nodes.NODES_KEY, queue_view.QUEUE_KEY)
    argv = [sys.executable, "-m", "api", "--port", url.rsplit(":", 1)[1]]
    server = services.start_process("api", argv, workdir, env=env)
    try:
        services.wait_until(
            lambda: httpx.get(f"{url}/healthz", timeout=5).status_code == 200,
            server,
            timeout=90,
            what="GET /healthz answering 200",
        )
        yield ContractApi(url, token)
    finally:
        server.stop()
        if on_postgres:
            postgres_server.drop_database(database)


@pytest.fixture(scope="module")
def contract_schema(contract_api: ContractApi) -> OpenApiSchema:
    # the admin's token for the document's `bearer` scheme: schemathesis then knows the
    # credentials are real, and checks that requests without them, or with others, are refused
    config = SchemathesisConfig.from_dict(
        {
            "checks": {"enabled": True},
            "auth": {"openapi": {"bearer": {"bearer": contract_api.admin_token}}},
        }
    )
    return schemathesis.openapi.from_url(f"{contract_api.url}/openapi.json", config=config)
