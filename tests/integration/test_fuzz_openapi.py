"""Every operation of the gateway's OpenAPI document fuzzed with schemathesis, against the
gateway over two simulated engines, with a client's key and with the admin token.

Pass: no 5xx, every answer's status, content type and body as the document declares them
(errors: the OpenAI error body), and no traceback in the log. Bodies are fuzzed both
within their schema (positive: most reach the engines) and outside it (negative). The run
is bounded and derandomized: the same examples on every run, ~1 minute.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.stateful import run_state_machine_as_test
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from proxy.gateway.app import create_app
from proxy.settings import Settings
from tests.secured_rig import ADMIN_TOKEN, MODEL, TENANT_KEY, Secured, secured_gateway


def gateway_body_conformance(ctx: Any, response: Any, case: Any) -> bool | None:
    """The body as documented, unless it is a backend's own refusal passed through: that
    is the backend's to shape (vLLM's FastAPI answers a route it lacks with
    ``{"detail": "Not Found"}``); the gateway's own errors are OpenAI-shaped."""
    if response.status_code >= 400 and "x-specroute-backend" in response.headers:
        return None
    return response_schema_conformance(ctx, response, case)


CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    gateway_body_conformance,
]
CREDENTIALS = {"client": TENANT_KEY, "admin": ADMIN_TOKEN}
# Per operation and mode (credentials drawn among them).
EXAMPLES = 40
# The operations, read from the document the app serves (a new route is fuzzed unasked).
DOCUMENT = create_app(Settings()).openapi()
OPERATIONS = sorted(
    (method.upper(), path) for path, item in DOCUMENT["paths"].items() for method in item
)
# Where there is something to send outside the schema: a body or a query parameter.
NEGATABLE = {
    (method.upper(), path)
    for path, item in DOCUMENT["paths"].items()
    for method, operation in item.items()
    if "requestBody" in operation
    or any(p["in"] == "query" for p in operation.get("parameters", ()))
}
# A policy put while fuzzing would point the fleet at made-up URLs: only validated here.
FIXED_QUERY = {("PUT", "/admin/policy"): {"dry_run": "1"}}


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Secured]:
    with secured_gateway(tmp_path_factory.mktemp("fuzz-openapi")) as rig:
        yield rig


@pytest.fixture(scope="module")
def schema(secured: Secured) -> Any:
    import httpx

    served = httpx.get(secured.url + "/openapi.json", timeout=10).json()
    loaded = schemathesis.openapi.from_dict(served)
    loaded.config.update(base_url=secured.url)
    return loaded


def _served_model(case: Any) -> Any:
    """Half the bodies name the model the fleet serves, so that they reach an engine."""
    if isinstance(case.body, dict) and "model" in case.body:
        case.body["model"] = MODEL
    return case


def _exercise(secured: Secured, schema: Any, method: str, path: str, mode: GenerationMode) -> None:
    operation = schema[path][method]
    query = FIXED_QUERY.get((method, path))
    cases = operation.as_strategy(generation_mode=mode, query=query)

    @settings(
        max_examples=EXAMPLES,
        derandomize=True,
        database=None,
        deadline=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(
        case=st.one_of(cases, cases.map(_served_model)), who=st.sampled_from(sorted(CREDENTIALS))
    )
    def run(case: Any, who: str) -> None:
        headers = {"authorization": f"Bearer {CREDENTIALS[who]}"}
        response = case.call(headers=headers, timeout=30)
        case.validate_response(response, checks=CHECKS, headers=headers)

    run()


@pytest.mark.parametrize(("method", "path"), OPERATIONS, ids=[f"{m} {p}" for m, p in OPERATIONS])
def test_every_operation_answers_as_documented(
    secured: Secured, schema: Any, method: str, path: str
) -> None:
    _exercise(secured, schema, method, path, GenerationMode.POSITIVE)
    if (method, path) in NEGATABLE:
        _exercise(secured, schema, method, path, GenerationMode.NEGATIVE)


def test_linked_operations_in_sequence(secured: Secured, schema: Any) -> None:
    """The document's links (a model listed, then read; a backend listed, then released;
    a mismatch listed, then read), walked as a state machine: the admin token for the
    admin API and the console, the client's key for the rest."""
    machine = schema.as_state_machine()
    followed: list[str] = []

    def headers(case: Any) -> dict[str, str]:
        admin = case.path.startswith(("/admin", "/ui"))
        return {"authorization": f"Bearer {ADMIN_TOKEN if admin else TENANT_KEY}"}

    class Walk(machine):  # type: ignore[misc,valid-type]
        def step(self, input: Any) -> Any:
            if input.transition is not None and input.applied_parameters:
                followed.append(f"{input.case.method} {input.case.path}")
            return super().step(input)

        def before_call(self, case: Any) -> None:
            fixed = FIXED_QUERY.get((case.method.upper(), case.path))
            if fixed is not None:
                case.query = {**(case.query or {}), **fixed}

        def get_call_kwargs(self, case: Any) -> dict[str, Any]:
            return {"headers": headers(case), "timeout": 30}

        def validate_response(self, response: Any, case: Any, **kwargs: Any) -> None:
            case.validate_response(response, checks=CHECKS, headers=headers(case))

    run_state_machine_as_test(
        Walk,
        settings=settings(
            max_examples=25,
            stateful_step_count=6,
            derandomize=True,
            database=None,
            deadline=None,
            suppress_health_check=list(HealthCheck),
        ),
    )
    # The links were followed, with the values the first answers gave.
    assert {"GET /v1/models/{model}", "DELETE /admin/quarantine/{backend}"} <= set(followed)


def test_no_traceback_in_the_log(secured: Secured) -> None:
    """Run last in this module: what the fuzzing above left in the gateway's log."""
    assert secured.logs.tracebacks() == []
    assert secured.logs.records, "the log was not captured"
