"""Who may call what: every route of the app, taken from its own route table (and from
the table of routed OpenAI paths it dispatches before FastAPI), called with no credential,
a client's key, another tenant's key, a revoked key, a key never issued and the admin
token, against a declared table. A route missing from the table fails the test, so a new
one cannot ship without saying who may call it.

Also: no key or token is ever written to the log, ``/metrics`` or an answer; forwarded-for
headers reach neither the admin API nor more than a tenant's limit; a policy edit (one
pointing a backend at any URL) needs the admin token.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest
from fastapi import FastAPI

from proxy.gateway.app import create_app
from proxy.records import ENDPOINT_BY_PATH
from proxy.settings import Settings
from tests.secured_rig import (
    ADMIN_TOKEN,
    LIMITED_KEY,
    LIMITED_RPM,
    MODEL,
    OTHER_KEY,
    REVOKED_KEY,
    SECRETS,
    TENANT_KEY,
    UNKNOWN_KEY,
    Secured,
    secured_gateway,
)

CREDENTIALS: dict[str, str | None] = {
    "none": None,
    "client": TENANT_KEY,
    "other_tenant": OTHER_KEY,
    "revoked": REVOKED_KEY,
    "unknown": UNKNOWN_KEY,
    "admin": ADMIN_TOKEN,
}
# "backend": let in, and answered by a backend (whatever it says: the sim does not serve
# every vLLM endpoint); an int: that status from the gateway.
Expected = int | str
BACKEND = "backend"


@dataclass(frozen=True)
class Call:
    """One request to a route: its concrete path and body, and the declared answers."""

    path: str
    expect: dict[str, Expected]
    json: Any = None
    content: bytes | None = None
    files: dict[str, Any] | None = None
    data: dict[str, str] | None = None
    params: dict[str, str] = field(default_factory=dict)


def everyone(status: Expected) -> dict[str, Expected]:
    return dict.fromkeys(CREDENTIALS, status)


def clients(let_in: Expected = BACKEND, other_tenant: Expected = 404) -> dict[str, Expected]:
    """A client endpoint: a key of a tenant allowed the model; the model hidden from a
    tenant that may not use it (404, as OpenAI); 401 for the rest, the admin token too
    (it is no client key)."""
    return {**everyone(401), "client": let_in, "other_tenant": other_tenant}


def admin_only(status: Expected = 200) -> dict[str, Expected]:
    """The token is configured: every other credential gets 401, never a 403 or a 200."""
    return {**everyone(401), "admin": status}


CHAT = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
JSON_BODY = {"model": MODEL, "input": "hi", "prompt": "hi", "query": "q", "documents": ["d"],
             "text_1": "a", "text_2": "b", "tokens": [1, 2]}  # fmt: skip
AUDIO = {"file": ("a.wav", b"RIFF0000WAVEfmt ", "audio/wav")}

TABLE: dict[tuple[str, str], Call] = {
    # The documentation and the operations endpoints: open, as the probes need them.
    ("GET", "/openapi.json"): Call("/openapi.json", everyone(200)),
    ("GET", "/docs"): Call("/docs", everyone(200)),
    ("GET", "/docs/oauth2-redirect"): Call("/docs/oauth2-redirect", everyone(200)),
    ("GET", "/redoc"): Call("/redoc", everyone(200)),
    ("GET", "/health"): Call("/health", everyone(200)),
    ("GET", "/ready"): Call("/ready", everyone(200)),
    ("GET", "/metrics"): Call("/metrics", everyone(200)),
    # vLLM's /version is open there too; the gateway passes it to any backend.
    ("GET", "/version"): Call("/version", everyone(BACKEND)),
    # The routed OpenAI endpoints.
    ("POST", "/v1/chat/completions"): Call("/v1/chat/completions", clients(200), json=CHAT),
    ("POST", "/v1/completions"): Call(
        "/v1/completions", clients(200), json={"model": MODEL, "prompt": "hi", "max_tokens": 2}
    ),
    ("POST", "/v1/responses"): Call(
        "/v1/responses", clients(200), json={"model": MODEL, "input": "hi", "max_output_tokens": 2}
    ),
    # The passed-through vLLM endpoints.
    **{
        ("POST", path): Call(path, clients(), json=JSON_BODY)
        for path in (
            "/v1/embeddings",
            "/tokenize",
            "/detokenize",
            "/v1/rerank",
            "/rerank",
            "/v2/rerank",
            "/v1/score",
            "/score",
            "/pooling",
            "/classify",
        )
    },
    **{
        ("POST", path): Call(path, clients(), files=AUDIO, data={"model": MODEL})
        for path in ("/v1/audio/transcriptions", "/v1/audio/translations")
    },
    # A tenant sees the models it may use: none, for tenant b, in the list.
    ("GET", "/v1/models"): Call("/v1/models", clients(200, other_tenant=200)),
    ("GET", "/v1/models/{model:path}"): Call(f"/v1/models/{MODEL}", clients(200)),
    # The admin API.
    ("GET", "/admin/fleet"): Call("/admin/fleet", admin_only()),
    ("GET", "/admin/sizes"): Call("/admin/sizes", admin_only()),
    ("GET", "/admin/acceptance"): Call("/admin/acceptance", admin_only()),
    ("GET", "/admin/break-even"): Call("/admin/break-even", admin_only()),
    ("GET", "/admin/policy"): Call("/admin/policy", admin_only()),
    ("PUT", "/admin/policy"): Call(
        "/admin/policy", admin_only(), params={"dry_run": "1"}, content=b"placeholder"
    ),
    # Nothing to roll back to: the admin's answer is the refusal, not the guard's.
    ("POST", "/admin/policy/rollback"): Call("/admin/policy/rollback", admin_only(400)),
    ("GET", "/admin/shadow"): Call("/admin/shadow", admin_only()),
    ("GET", "/admin/shadow/mismatches"): Call("/admin/shadow/mismatches", admin_only()),
    ("POST", "/admin/quarantine/{backend}"): Call("/admin/quarantine/b0", admin_only()),
    ("DELETE", "/admin/quarantine/{backend}"): Call("/admin/quarantine/b0", admin_only()),
    ("GET", "/admin/canary"): Call("/admin/canary", admin_only()),
    # No canary in the policy: a conflict, once past the guard.
    ("POST", "/admin/canary/{action}"): Call("/admin/canary/pause", admin_only(409)),
    ("POST", "/admin/explain"): Call("/admin/explain", admin_only(), json=CHAT),
    ("GET", "/admin/shadow/review"): Call("/admin/shadow/review", admin_only()),
    ("GET", "/admin/shadow/review/{record_id}"): Call(
        "/admin/shadow/review/no-such-id", admin_only(404)
    ),
    ("POST", "/admin/shadow/review/{record_id}/label"): Call(
        "/admin/shadow/review/no-such-id/label",
        admin_only(404),
        json={"label": "noise", "by": "matrix"},
    ),
    ("GET", "/admin/shadow/labels.jsonl"): Call("/admin/shadow/labels.jsonl", admin_only()),
    # The console: the sign-in form is open; signing in takes the token in the form (a
    # bearer header is no sign-in); every other page is behind the admin guard.
    ("GET", "/ui/login"): Call("/ui/login", everyone(200)),
    ("POST", "/ui/login"): Call("/ui/login", everyone(401), data={"token": "not-it"}),
    ("GET", "/ui"): Call("/ui", admin_only(303)),
    ("GET", "/ui/static/{name}"): Call("/ui/static/console.js", admin_only()),
    ("GET", "/ui/api/recent"): Call("/ui/api/recent", admin_only()),
    ("GET", "/ui/api/traffic"): Call("/ui/api/traffic", admin_only()),
    ("GET", "/ui/{view}"): Call("/ui/fleet", admin_only()),
}


def route_table(app: FastAPI) -> set[tuple[str, str]]:
    """Every (method, path) the app answers: FastAPI's routes, flattened through included
    routers, and the routed OpenAI paths dispatched before them."""
    try:  # FastAPI >= 0.16x keeps included routers as such
        from fastapi.routing import iter_route_contexts

        routes = [(c.path, c.methods) for c in iter_route_contexts(app.routes)]
    except ImportError:
        routes = [(r.path, getattr(r, "methods", None)) for r in app.routes]  # type: ignore[attr-defined]
    table = {
        (method, path) for path, methods in routes for method in (methods or {"GET"}) - {"HEAD"}
    }
    return table | {("POST", path) for path in ENDPOINT_BY_PATH}


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Secured]:
    with secured_gateway(tmp_path_factory.mktemp("authz")) as rig:
        yield rig


@pytest.fixture(scope="module")
def http(secured: Secured) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=secured.url, timeout=30, follow_redirects=False) as client:
        yield client


def _headers(credential: str | None, extra: dict[str, str] | None = None) -> dict[str, str]:
    headers = {"authorization": f"Bearer {credential}"} if credential else {}
    return {**headers, **(extra or {})}


def _send(http: httpx.Client, method: str, call: Call, headers: dict[str, str]) -> httpx.Response:
    content = call.content
    if content == b"placeholder":  # the policy in force, validated again (a dry run)
        content = (
            httpx.get(str(http.base_url) + "/admin/policy", headers=_headers(ADMIN_TOKEN))
            .json()["text"]
            .encode()
        )
    return http.request(
        method,
        call.path,
        headers=headers,
        params=call.params,
        json=call.json,
        content=content,
        files=call.files,
        data=call.data,
    )


def test_every_route_is_in_the_declared_table() -> None:
    app = create_app(Settings())
    assert route_table(app) == set(TABLE), "declare who may call each new route in TABLE"


@pytest.fixture(scope="module")
def answers(secured: Secured, http: httpx.Client) -> list[tuple[str, str, str, httpx.Response]]:
    """Every route with every credential, the admin token last (it quarantines b0 and
    releases it again, in the table's order)."""
    seen = []
    for who, credential in CREDENTIALS.items():
        for (method, route), call in TABLE.items():
            response = _send(http, method, call, _headers(credential))
            seen.append((who, method, route, response))
    return seen


def test_each_credential_gets_the_declared_status(
    answers: list[tuple[str, str, str, httpx.Response]],
) -> None:
    assert len(answers) == len(TABLE) * len(CREDENTIALS)
    wrong = []
    for who, method, route, response in answers:
        expected = TABLE[(method, route)].expect[who]
        if expected == BACKEND:
            ok = "x-specroute-backend" in response.headers and response.status_code != 401
        else:
            ok = response.status_code == expected
        if not ok:
            wrong.append(f"{who:12} {method} {route}: {response.status_code} (declared {expected})")
    assert wrong == []


def test_refusals_are_openai_errors_naming_no_key(
    answers: list[tuple[str, str, str, httpx.Response]],
) -> None:
    for who, _, route, response in answers:
        if response.status_code == 401 and route != "/ui/login":
            error = response.json()["error"]
            assert error["code"] in ("invalid_api_key", "invalid_admin_token"), (who, route)


def test_no_key_or_token_in_answers_logs_or_metrics(
    secured: Secured, http: httpx.Client, answers: list[tuple[str, str, str, httpx.Response]]
) -> None:
    for who, method, route, response in answers:
        # The answer's headers and body: a refusal may name a key's first and last
        # characters (as OpenAI does), never the key.
        text = response.text + "".join(f"{k}: {v}" for k, v in response.headers.items())
        leaked = [s for s in SECRETS if s in text]
        assert leaked == [], (who, method, route)
    metrics = http.get("/metrics").text
    assert [s for s in SECRETS if s in metrics] == []
    assert "specroute_" in metrics  # the real exposition, not an empty page
    logged = secured.logs.text()
    assert "tenant=tenant-a" in logged  # the access log was captured
    assert [s for s in SECRETS if s in logged] == []
    assert secured.logs.tracebacks() == []


@pytest.mark.parametrize(
    "forwarded",
    [
        {"x-forwarded-for": "127.0.0.1"},
        {"x-forwarded-for": "::1, 127.0.0.1"},
        {"x-real-ip": "127.0.0.1"},
        {"forwarded": "for=127.0.0.1;proto=https"},
    ],
)
def test_forwarded_for_does_not_reach_admin(http: httpx.Client, forwarded: dict[str, str]) -> None:
    for credential in (None, TENANT_KEY, REVOKED_KEY):
        response = http.get("/admin/fleet", headers=_headers(credential, forwarded))
        assert response.status_code == 401


async def _admin_status(app: FastAPI, peer: str, headers: dict[str, str]) -> int:
    """The admin guard's answer to a peer, in process (a test client is always loopback)."""
    transport = httpx.ASGITransport(app=app, client=(peer, 40000))
    async with httpx.AsyncClient(transport=transport, base_url="http://gw") as client:
        return (await client.get("/admin/policy", headers=headers)).status_code


@pytest.mark.parametrize(
    ("trusted", "peer", "forwarded", "status"),
    [
        # No token configured: loopback only. A remote client saying it is loopback is not.
        ([], "203.0.113.7", "127.0.0.1", 403),
        # Through a trusted proxy, the client is the first untrusted hop from the right: a
        # forged left-most loopback entry is not it.
        (["10.0.0.0/8"], "10.0.0.2", "127.0.0.1, 203.0.113.7", 403),
        # A trusted proxy that names no one: unknown, never loopback.
        (["10.0.0.0/8"], "10.0.0.2", "", 403),
    ],
)
async def test_forwarded_for_cannot_make_a_remote_client_loopback(
    trusted: list[str], peer: str, forwarded: str, status: int
) -> None:
    app = create_app(Settings(trusted_proxies=trusted))
    headers = {"x-forwarded-for": forwarded} if forwarded else {}
    assert await _admin_status(app, peer, headers) == status


def test_forwarded_for_does_not_raise_a_tenant_limit(http: httpx.Client) -> None:
    """Limits are the key's tenant's, wherever the request says it comes from."""
    body = {"model": MODEL, "input": "hi"}
    statuses = []
    for i in range(LIMITED_RPM + 4):
        spoof = {
            "x-forwarded-for": f"198.51.100.{i}",
            "x-real-ip": f"198.51.100.{i}",
            "forwarded": f"for=198.51.100.{i}",
        }
        response = http.post("/v1/embeddings", json=body, headers=_headers(LIMITED_KEY, spoof))
        statuses.append(response.status_code)
    assert statuses == [200] * LIMITED_RPM + [429] * 4


OUTSIDE = "http://169.254.169.254/latest/meta-data"


def _policy_pointing_outside(http: httpx.Client) -> str:
    text: str = http.get("/admin/policy", headers=_headers(ADMIN_TOKEN)).json()["text"]
    assert "url:" in text
    head, _, rest = text.partition("url: ")
    return head + "url: " + OUTSIDE + "\n" + rest.partition("\n")[2]


@pytest.mark.parametrize(
    "headers",
    [
        {},
        {"authorization": f"Bearer {TENANT_KEY}"},
        {"authorization": f"Bearer {OTHER_KEY}"},
        {"authorization": f"Bearer {REVOKED_KEY}"},
        {"authorization": "Bearer " + ADMIN_TOKEN[:-1]},  # one character short
        {"authorization": ADMIN_TOKEN},  # no scheme
        {"authorization": f"Basic {ADMIN_TOKEN}"},
        {"cookie": "specroute_admin=wrong"},
        {"x-forwarded-for": "127.0.0.1"},
    ],
    ids=lambda h: next(iter(h), "none"),
)
def test_a_policy_edit_needs_the_admin_token(
    secured: Secured, http: httpx.Client, headers: dict[str, str]
) -> None:
    """No credential but the admin token can point a backend anywhere (applied or dry run)."""
    before = http.get("/admin/policy", headers=_headers(ADMIN_TOKEN)).json()["digest"]
    edited = _policy_pointing_outside(http)
    for params in ({}, {"dry_run": "1"}):
        refused = http.put("/admin/policy", content=edited, params=params, headers=headers)
        assert refused.status_code == 401, refused.text
    after = http.get("/admin/policy", headers=_headers(ADMIN_TOKEN)).json()["digest"]
    assert after == before
    urls = secured.gw.call(lambda: [b.spec.url for b in secured.gw.runtime.fleet.backends.values()])
    assert OUTSIDE not in urls
    # The same edit with the token is judged on its merits (here only validated).
    dry = http.put(
        "/admin/policy", content=edited, params={"dry_run": "1"}, headers=_headers(ADMIN_TOKEN)
    )
    assert dry.status_code == 200 and OUTSIDE in dry.json()["diff"]


def test_signing_in_to_the_console_needs_the_token(secured: Secured) -> None:
    # A client of its own: a sign-in leaves the cookie in the client's jar.
    with httpx.Client(base_url=secured.url, timeout=30) as browser:
        refused = browser.post("/ui/login", data={"token": TENANT_KEY})
        assert refused.status_code == 401 and "set-cookie" not in refused.headers
        assert browser.get("/ui/fleet").status_code == 401
        signed_in = browser.post("/ui/login", data={"token": ADMIN_TOKEN}, follow_redirects=False)
        assert signed_in.status_code == 303 and browser.cookies.get("specroute_admin")
        assert browser.get("/ui/fleet").status_code == 200
