"""The gateway's OpenAPI document states what the app serves and answers."""

from __future__ import annotations

from typing import Any

from proxy.gateway.app import create_app
from proxy.records import OPENAI_PATHS
from proxy.settings import Settings


def _document() -> dict[str, Any]:
    document: dict[str, Any] = create_app(Settings()).openapi()
    return document


def test_the_routed_endpoints_are_described_with_their_bodies() -> None:
    paths = _document()["paths"]
    for path in OPENAI_PATHS.values():
        operation = paths[path]["post"]
        body = operation["requestBody"]["content"]["application/json"]["schema"]
        assert "model" in body["required"]
        assert {"200", "400", "401", "404", "429", "503"} <= set(operation["responses"])


def test_every_error_is_the_openai_error_and_none_is_fastapis_422() -> None:
    document = _document()
    assert "OpenAIError" in document["components"]["schemas"]
    for path, item in document["paths"].items():
        for method, operation in item.items():
            responses = operation["responses"]
            assert "422" not in responses, (method, path)
            for status, response in responses.items():
                if int(status) >= 400:
                    schema = response["content"]["application/json"]["schema"]
                    assert schema == {"$ref": "#/components/schemas/OpenAIError"}, (method, path)


def test_admin_operations_state_the_guard_and_bodies_read_raw_have_a_schema() -> None:
    paths = _document()["paths"]
    for path, item in paths.items():
        if path.startswith(("/admin", "/ui")):
            for operation in item.values():
                assert {"401", "403"} <= set(operation["responses"]), path
    assert "Policy" in str(paths["/admin/policy"]["put"]["requestBody"])
    label = paths["/admin/shadow/review/{record_id}/label"]["post"]["requestBody"]
    assert "LabelBody" in str(label)
    assert (
        "multipart/form-data" in paths["/v1/audio/transcriptions"]["post"]["requestBody"]["content"]
    )


def test_the_document_is_served_and_built_once() -> None:
    app = create_app(Settings())
    assert app.openapi() is app.openapi()
