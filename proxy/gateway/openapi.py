"""The gateway's OpenAPI document: FastAPI's, completed with what FastAPI cannot see.

FastAPI describes the control plane's routes only by their parameters. The rest is added
here, in one place, so that the document states every answer the gateway can give (a
schema-driven fuzzer holds it to that, ``tests/integration/test_fuzz_openapi.py``):

- the routed OpenAI endpoints, dispatched before FastAPI (``GatewayApp.dispatch``) and so
  without a route, with the fields of their bodies the gateway itself reads (the rest is
  the backend's to judge, passed through unread);
- the bodies the handlers read raw (the policy, a request to explain, a review label, the
  passed-through JSON endpoints);
- every operation's error statuses with the OpenAI error body, and not FastAPI's 422: the
  gateway answers a parameter it cannot read with 400 (``app._validation_error``);
- the two credentials: a client's API key and the admin token, both bearer tokens.
"""

from __future__ import annotations

import copy
from typing import Any

from proxy.gateway.admin_review import LabelBody
from proxy.gateway.passthrough import FORM_ENDPOINTS, JSON_ENDPOINTS
from proxy.policy import Policy
from proxy.records import OPENAI_PATHS, Endpoint

Schema = dict[str, Any]

ERROR_BODY: Schema = {
    "type": "object",
    "required": ["error"],
    "properties": {
        "error": {
            "type": "object",
            "required": ["message", "type", "param", "code"],
            "properties": {
                "message": {"type": "string"},
                "type": {"type": "string"},
                "param": {"type": ["string", "null"]},
                "code": {"type": ["string", "integer", "null"]},
            },
        }
    },
}
_ERROR_REF = {"$ref": "#/components/schemas/OpenAIError"}
_ANY_OBJECT: Schema = {"type": "object", "additionalProperties": True}
# One server-sent event of a streamed answer (the Responses API names its events).
_SSE_EVENT: Schema = {
    "type": "object",
    "required": ["data"],
    "properties": {"data": {"type": "string"}, "event": {"type": "string"}},
}

_WHY = {
    400: "The request cannot be read (OpenAI's invalid_request_error)",
    401: "No credential, or not the right one",
    403: "The admin API without a token configured, from a client that is not loopback",
    404: "No such model, backend, record or action",
    405: "The routed endpoints answer POST only",
    409: "The action conflicts with the current state",
    413: "The body is over the gateway's limit",
    429: "Over the tenant's limits, or every backend refused it as overloaded",
    502: "Every backend failed before answering",
    503: "No healthy backend serves the model right now",
    504: "No backend answered within the first-byte budget",
}
# Statuses answered by the gateway (or relayed from a backend) on the endpoints that
# reach a backend: the request's own faults, the tenant's limits, the fleet's state.
_UPSTREAM = (400, 401, 404, 413, 429, 502, 503)
_ROUTED = (*_UPSTREAM, 405, 504)
# The admin guard's refusals (``admin.require_admin``).
_ADMIN = (401, 403)

# The statuses of each operation besides its success and the admin guard's, by (method, path).
ERROR_STATUSES: dict[tuple[str, str], tuple[int, ...]] = {
    ("get", "/ready"): (503,),
    ("get", "/v1/models"): (401,),
    ("get", "/v1/models/{model}"): (401, 404),
    ("get", "/version"): (502, 503),
    ("put", "/admin/policy"): (400,),
    ("post", "/admin/policy/rollback"): (400,),
    ("post", "/admin/quarantine/{backend}"): (404,),
    ("delete", "/admin/quarantine/{backend}"): (404,),
    ("post", "/admin/canary/{action}"): (404, 409),
    ("post", "/admin/explain"): (400, 404),
    ("get", "/admin/shadow/review/{record_id}"): (404,),
    ("post", "/admin/shadow/review/{record_id}/label"): (400, 404),
}

# Success bodies that are not JSON.
MEDIA_TYPES: dict[tuple[str, str], str] = {
    ("get", "/metrics"): "text/plain",
    ("get", "/admin/shadow/labels.jsonl"): "application/x-ndjson",
}


def _chat_body() -> Schema:
    return {
        "type": "object",
        "required": ["model", "messages"],
        "additionalProperties": True,
        "properties": {
            "model": {"type": "string"},
            "messages": {
                "type": "array",
                "minItems": 1,
                "items": {
                    "type": "object",
                    "required": ["role"],
                    "additionalProperties": True,
                    "properties": {
                        "role": {"type": "string"},
                        "content": {"type": ["string", "null"]},
                    },
                },
            },
            **_sampling(),
        },
    }


def _completion_body() -> Schema:
    return {
        "type": "object",
        "required": ["model", "prompt"],
        "additionalProperties": True,
        "properties": {
            "model": {"type": "string"},
            "prompt": {
                "oneOf": [{"type": "string"}, {"type": "array", "items": {"type": "string"}}]
            },
            **_sampling(),
        },
    }


def _responses_body() -> Schema:
    return {
        "type": "object",
        "required": ["model", "input"],
        "additionalProperties": True,
        "properties": {
            "model": {"type": "string"},
            "input": {"oneOf": [{"type": "string"}, {"type": "array", "items": _ANY_OBJECT}]},
            "instructions": {"type": "string"},
            "max_output_tokens": {"type": "integer", "minimum": 1},
            "stream": {"type": "boolean"},
            "temperature": {"type": "number"},
        },
    }


def _sampling() -> Schema:
    """The fields the gateway reads to route and meter a chat or completion request."""
    return {
        "stream": {"type": "boolean"},
        "stream_options": {"type": "object", "properties": {"include_usage": {"type": "boolean"}}},
        "n": {"type": "integer", "minimum": 1},
        "temperature": {"type": "number"},
        "top_k": {"type": "integer"},
        "max_tokens": {"type": "integer", "minimum": 1},
        "max_completion_tokens": {"type": "integer", "minimum": 1},
    }


_ROUTED_BODIES = {
    Endpoint.CHAT: ("Chat completion", _chat_body),
    Endpoint.COMPLETIONS: ("Completion", _completion_body),
    Endpoint.RESPONSES: ("Response (the Responses API)", _responses_body),
}


def _json(schema: Schema) -> Schema:
    return {"application/json": {"schema": schema}}


def _errors(statuses: tuple[int, ...]) -> dict[str, Schema]:
    return {
        str(status): {"description": _WHY[status], "content": _json(_ERROR_REF)}
        for status in sorted(set(statuses))
    }


def _routed_operation(kind: Endpoint) -> Schema:
    summary, body = _ROUTED_BODIES[kind]
    return {
        "summary": summary,
        "operationId": f"routed_{kind.value}",
        "description": "Routed to a backend by the policy; the answer is the backend's, "
        "streamed (text/event-stream) when the request asks for it.",
        "security": [{"apiKey": []}, {}],
        "requestBody": {"required": True, "content": _json(body())},
        "responses": {
            "200": {
                "description": "The backend's answer",
                "content": {
                    **_json(_ANY_OBJECT),
                    "text/event-stream": {"schema": _SSE_EVENT},
                },
            },
            **_errors(_ROUTED),
        },
    }


def _passthrough_body(operation: Schema, form: bool) -> None:
    if form:
        schema: Schema = {
            "type": "object",
            "required": ["file", "model"],
            "properties": {
                "file": {"type": "string", "format": "binary"},
                "model": {"type": "string"},
            },
        }
        operation["requestBody"] = {"required": True, "content": {"multipart/form-data": {
            "schema": schema}}}  # fmt: skip
        return
    schema = {
        "type": "object",
        "required": ["model"],
        "additionalProperties": True,
        "properties": {"model": {"type": "string"}},
    }
    operation["requestBody"] = {"required": True, "content": _json(schema)}


def _policy_body(components: Schema) -> Schema:
    policy = Policy.model_json_schema(ref_template="#/components/schemas/{model}")
    for name, definition in policy.pop("$defs", {}).items():
        components.setdefault(name, definition)
    components.setdefault("Policy", policy)
    return {
        "required": True,
        "description": "The policy document, YAML or JSON (YAML's subset)",
        "content": {
            "application/json": {"schema": {"$ref": "#/components/schemas/Policy"}},
            "application/yaml": {"schema": {"type": "string"}},
        },
    }


def _explain_body() -> Schema:
    return {
        "required": True,
        "content": _json({"oneOf": [_chat_body(), _completion_body()]}),
    }


def _add_passthrough(paths: Schema) -> None:
    """The passed-through endpoints have a route each, but one handler reading the body raw:
    FastAPI hides them; they are described here."""
    for table, form in ((JSON_ENDPOINTS, False), (FORM_ENDPOINTS, True)):
        for path, name in table.items():
            operation: Schema = {
                "summary": f"Passed through to a backend ({name})",
                "operationId": f"passthrough_{path.strip('/').replace('/', '_')}",
                "security": [{"apiKey": []}, {}],
                "responses": {
                    "200": {"description": "The backend's answer", "content": _json(_ANY_OBJECT)},
                    **_errors(_UPSTREAM),
                },
            }
            _passthrough_body(operation, form)
            paths.setdefault(path, {})["post"] = operation


def complete_openapi(document: Schema) -> Schema:
    """FastAPI's document for the app, completed (see the module docstring)."""
    document = copy.deepcopy(document)
    paths: Schema = document.setdefault("paths", {})
    components: Schema = document.setdefault("components", {})
    schemas: Schema = components.setdefault("schemas", {})
    schemas["OpenAIError"] = ERROR_BODY
    schemas.pop("HTTPValidationError", None)
    schemas.pop("ValidationError", None)
    components["securitySchemes"] = {
        "apiKey": {"type": "http", "scheme": "bearer", "description": "a client's API key"},
        "adminToken": {"type": "http", "scheme": "bearer", "description": "the admin token"},
    }
    for kind, path in OPENAI_PATHS.items():
        paths[path] = {"post": _routed_operation(kind)}
    _add_passthrough(paths)
    for path, item in paths.items():
        for method, operation in item.items():
            responses = operation.setdefault("responses", {})
            responses.pop("422", None)
            media_type = MEDIA_TYPES.get((method, path))
            if media_type is not None:
                responses["200"]["content"] = {media_type: {"schema": {"type": "string"}}}
            statuses = ERROR_STATUSES.get((method, path), ())
            if path.startswith(("/admin", "/ui")):
                statuses = (*_ADMIN, *statuses)
                operation.setdefault("security", [{"adminToken": []}])
            if any(p.get("in") == "query" for p in operation.get("parameters", ())):
                statuses = (*statuses, 400)  # a query value of the wrong type
            for status, response in _errors(statuses).items():
                responses.setdefault(status, response)
    paths["/admin/policy"]["put"]["requestBody"] = _policy_body(schemas)
    paths["/admin/policy"]["put"]["parameters"] = [
        {"name": "dry_run", "in": "query", "required": False,
         "schema": {"type": "string", "enum": ["0", "1", "true", "false"]},
         "description": "1 or true: validate and show the diff, apply nothing"},
    ]  # fmt: skip
    paths["/admin/explain"]["post"]["requestBody"] = _explain_body()
    paths["/admin/explain"]["post"]["parameters"] = [
        {"name": "kind", "in": "query", "required": False,
         "schema": {"type": "string", "enum": ["chat", "completions"]}},
        {"name": "tenant", "in": "query", "required": False, "schema": {"type": "string"}},
    ]  # fmt: skip
    label = LabelBody.model_json_schema(ref_template="#/components/schemas/{model}")
    schemas["LabelBody"] = label
    paths["/admin/shadow/review/{record_id}/label"]["post"]["requestBody"] = {
        "required": True,
        "content": _json({"$ref": "#/components/schemas/LabelBody"}),
    }
    _add_links(paths)
    return document


def _add_links(paths: Schema) -> None:
    """Where one answer names what another operation takes (a model, a backend, a record)."""
    models = paths["/v1/models"]["get"]["responses"]["200"]
    models["links"] = {
        "RetrieveModel": {
            "operationId": paths["/v1/models/{model}"]["get"]["operationId"],
            "parameters": {"model": "$response.body#/data/0/id"},
        }
    }
    fleet = paths["/admin/fleet"]["get"]["responses"]["200"]
    fleet["links"] = {
        "ReleaseBackend": {
            "operationId": paths["/admin/quarantine/{backend}"]["delete"]["operationId"],
            "parameters": {"backend": "$response.body#/backends/0/name"},
        }
    }
    review = paths["/admin/shadow/review"]["get"]["responses"]["200"]
    review["links"] = {
        "ReadMismatch": {
            "operationId": paths["/admin/shadow/review/{record_id}"]["get"]["operationId"],
            "parameters": {"record_id": "$response.body#/mismatches/0/id"},
        }
    }
