"""The served /openapi.json is the contract: schemathesis, with every check, against the API
running as a server.

Every operation is tested through its edge cases and a bounded number of generated
requests (schemathesis' coverage and fuzzing phases, which also send the methods a path does
not take), then the API is driven as a state machine along the links schemathesis infers
(a submitted job's Location), so real jobs are read, halted, resumed and deleted. A
submission's parts are YAML and a zip, which a JSON schema cannot describe: schemathesis is
given generators of valid ones for those media types, so that valid submissions (and plans,
which take the same YAML) are accepted.
"""

from __future__ import annotations

import os
import uuid
from collections import Counter
from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import run_state_machine_as_test
from schemathesis.specs.openapi.schemas import OpenApiSchema

from api.schemas import NAME
from tests.integration.api_harness import MODEL_ZIP

# Bounded so the whole module takes about half a minute here: each operation gets 25
# generated requests. A longer hunt: DLAAS_CONTRACT_EXAMPLES=500 pytest tests/contract
EXAMPLES_PER_OPERATION = int(os.environ.get("DLAAS_CONTRACT_EXAMPLES", "25"))
STATEFUL_RUNS = max(20, EXAMPLES_PER_OPERATION * 4 // 5)
STEPS_PER_RUN = 6

# with what a step costs, so that a plan (POST /v2/plan) of one is answered too
MANIFESTS = st.builds(
    "name: {}\nlearners: {}\nframework:\n  name: pytorch\n  command: python train.py\n"
    "performance: {{sample_seconds: {}, batch_size: {}}}\n".format,
    st.from_regex(r"[a-z][a-z0-9-]{0,30}", fullmatch=True),
    st.integers(min_value=1, max_value=4),
    st.sampled_from([0.001, 0.01, 0.5]),
    st.integers(min_value=4, max_value=1024),
).map(str.encode)
schemathesis.openapi.media_type("application/yaml", MANIFESTS)
schemathesis.openapi.media_type("application/zip", st.just(MODEL_ZIP))

schema = schemathesis.pytest.from_fixture("contract_schema")


_NAMED_CREATIONS = ("/v2/users", "/v2/teams", "/v2/tokens")


@schemathesis.hook
def before_call(context: Any, case: schemathesis.Case, kwargs: dict[str, Any]) -> None:
    """Two values no schema can make valid by construction: a cursor is only ever one the
    API handed out (a generated one is refused, 422), and an Idempotency-Key used again for
    another request is refused (422) as it should be. Generated cursors are left out and
    every request gets a key of its own; the integration tests page with real cursors and
    reuse keys on purpose.

    Names are the same kind of value: a user, team or token name made once is taken (409)
    when hypothesis replays the request, which changes which calls the state machine can
    make next. A valid name in such a creation gets a unique suffix. And one request would
    end the run: revoking the token it signs in with (the admin's "default", an id as small
    as generated ids are); a revocation naming a token by id or "default" names one that
    does not exist instead (tests/integration/test_teams_and_tokens.py revokes by id and by
    name)."""
    if case.query and "cursor" in case.query:
        case.query = {k: v for k, v in case.query.items() if k != "cursor"}
    if case.headers and "Idempotency-Key" in case.headers:
        case.headers["Idempotency-Key"] = uuid.uuid4().hex
    body = case.body
    name = body.get("name") if isinstance(body, dict) else None
    creates = case.method.upper() == "POST" and case.path in _NAMED_CREATIONS
    if creates and isinstance(name, str) and NAME.fullmatch(name):
        case.body = {**body, "name": f"{name[:40]}-{uuid.uuid4().hex[:12]}"}
    token = (case.path_parameters or {}).get("name_or_id")
    ours = isinstance(token, str) and (token == "default" or token.isdigit())
    if case.method.upper() == "DELETE" and ours:
        case.path_parameters = {**(case.path_parameters or {}), "name_or_id": "no-such-token"}


@pytest.fixture(autouse=True)
def _node_id_for_schemathesis(request: pytest.FixtureRequest) -> None:
    # schemathesis 4.32's from_fixture renames each operation's subtest through the node's
    # `_nodeid`, an attribute pytest 9 nodes no longer have.
    if not hasattr(request.node, "_nodeid"):
        request.node._nodeid = request.node.nodeid


@pytest.fixture(scope="module")
def requests_sent() -> Counter[str]:
    """How many requests the fuzzing test sent to each operation."""
    return Counter()


@schema.parametrize()
@settings(
    max_examples=EXAMPLES_PER_OPERATION, deadline=None, suppress_health_check=list(HealthCheck)
)
def test_every_answer_keeps_the_contract(
    case: schemathesis.Case, requests_sent: Counter[str]
) -> None:
    requests_sent[case.operation.label] += 1
    case.call_and_validate()


def test_every_operation_was_exercised(
    contract_schema: OpenApiSchema, requests_sent: Counter[str]
) -> None:
    operations = {result.ok().label for result in contract_schema.get_all_operations()}
    assert len(operations) == 44, sorted(operations)
    assert set(requests_sent) == operations


def test_sequences_of_calls_keep_the_contract(contract_schema: OpenApiSchema) -> None:
    run_state_machine_as_test(
        contract_schema.as_state_machine(),
        settings=settings(
            max_examples=STATEFUL_RUNS,
            stateful_step_count=STEPS_PER_RUN,
            deadline=None,
            suppress_health_check=list(HealthCheck),
        ),
    )
