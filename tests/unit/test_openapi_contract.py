"""The OpenAPI the app serves, as `api.openapi_contract` states it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from api.app import create_app
from storage.settings import Settings


@pytest.fixture
def document(tmp_path: Path) -> dict[str, Any]:
    return create_app(Settings(home=tmp_path)).openapi()


def _operations(document: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {
        f"{method.upper()} {path}": operation
        for path, item in document["paths"].items()
        for method, operation in item.items()
    }


def test_errors_are_documented_in_dlaas_shape_only(document: dict[str, Any]) -> None:
    schemas = document["components"]["schemas"]
    assert "HTTPValidationError" not in schemas
    assert schemas["Error"]["required"] == ["error", "detail"]
    for label, operation in _operations(document).items():
        for status, response in operation["responses"].items():
            if status.startswith(("4", "5")):
                content = response["content"]["application/json"]["schema"]
                assert content == {"$ref": "#/components/schemas/Error"}, (label, status)


def test_each_operation_declares_the_statuses_it_can_give(document: dict[str, Any]) -> None:
    operations = _operations(document)
    declared = {label: set(op["responses"]) for label, op in operations.items()}
    assert declared["GET /healthz"] == {"200", "413", "503"}
    assert declared["GET /v2/jobs"] == {"200", "401", "413", "422", "429", "503"}
    assert {"400", "401", "411", "413", "422"} <= declared["POST /v2/jobs"]
    assert {"401", "404", "409", "422"} <= declared["POST /v2/jobs/{job_id}/halt"]
    assert {"401", "404", "409", "422"} <= declared["POST /v2/jobs/{job_id}/resume"]
    assert {"400", "404"} <= declared["GET /v2/jobs/{job_id}/logs"]
    assert {"400", "403", "409"} <= declared["POST /v2/users"]
    assert "404" not in declared["GET /v2/jobs"]
    # a plan reads and writes nothing: only its body, its token and its key can be refused
    assert declared["POST /v2/plan"] == {
        "200",
        "400",
        "401",
        "404",
        "409",
        "413",
        "422",
        "429",
        "503",
    }
    # a 403 where the permission table lets a caller who sees the job or team be too weak
    assert "403" in declared["POST /v2/jobs/{job_id}/halt"]
    assert "403" in declared["POST /v2/teams/{team}/members"]
    assert "403" in declared["POST /v2/jobs"] and "404" in declared["POST /v2/jobs"]
    assert "403" not in declared["GET /v2/jobs/{job_id}"]
    assert "403" not in declared["GET /v2/tokens"]
    assert {"404", "409"} <= declared["DELETE /v2/teams/{team}/members/{user}"]
    retry_after = operations["GET /v2/jobs"]["responses"]["429"]["headers"]["Retry-After"]
    assert retry_after["required"] is True


def test_every_post_declares_its_idempotency_key(document: dict[str, Any]) -> None:
    for label, operation in _operations(document).items():
        names = {p["name"] for p in operation.get("parameters", ())}
        assert ("Idempotency-Key" in names) == label.startswith("POST "), label


def test_a_token_is_required_everywhere_but_healthz(document: dict[str, Any]) -> None:
    for label, operation in _operations(document).items():
        expected = None if label == "GET /healthz" else [{"bearer": []}]
        assert operation.get("security") == expected, label
    assert document["components"]["securitySchemes"]["bearer"]["scheme"] == "bearer"


def test_optional_parameters_are_never_null(document: dict[str, Any]) -> None:
    parameters = _operations(document)["GET /v2/jobs/{job_id}/logs"]["parameters"]
    by_name = {p["name"]: p["schema"] for p in parameters}
    assert by_name["learner"]["type"] == "integer"
    assert by_name["Last-Event-ID"]["type"] == "string"
    assert "anyOf" not in by_name["Last-Event-ID"]


def test_constraints_the_routes_enforce_are_stated(document: dict[str, Any]) -> None:
    operations = _operations(document)
    job_id = operations["GET /v2/jobs/{job_id}"]["parameters"][0]["schema"]
    assert (job_id["pattern"], job_id["maxLength"]) == ("^[a-z0-9][a-z0-9-]{0,39}$", 40)
    upload = {
        p["name"]: p["schema"] for p in operations["PUT /v2/data/{container}/{path}"]["parameters"]
    }
    assert "pattern" in upload["container"] and "pattern" in upload["path"]
    user = document["components"]["schemas"]["UserCreate"]["properties"]["name"]
    assert user["pattern"] == "^[a-z][a-z0-9._-]{0,62}$"


def test_ffdls_v1_is_left_to_its_own_specification(document: dict[str, Any]) -> None:
    """/v1 answers as FfDL's specification says (tests/ffdl_v1), errors in FfDL's shape:
    /openapi.json states /v2's contract and does not describe it."""
    assert not [path for path in document["paths"] if path.startswith("/v1/")]
