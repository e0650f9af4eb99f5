"""The operator's console at ``/ui``: server-rendered pages that poll the admin API.

Each view is a page shell rendered here (navigation, headings, forms) and one script,
``static/console.js``, that fills it from the JSON admin endpoints every few seconds and
draws charts with uPlot (vendored, see ``static/NOTICE``). Nothing is built at run time and
nothing is fetched from outside the gateway. Every route but the sign-in form sits behind
the admin guard of ``/admin``; the sign-in form stores the admin token in a same-site cookie
the guard also accepts, for browsers that cannot send a bearer header.
"""

from __future__ import annotations

import hmac
import html
import importlib.resources
from dataclasses import dataclass
from string import Template
from urllib.parse import parse_qs

import orjson
from fastapi import APIRouter, Depends, FastAPI, Request, Response
from fastapi.responses import HTMLResponse, RedirectResponse

from proxy.errors import GatewayError
from proxy.gateway.admin import ADMIN_COOKIE, require_admin
from proxy.gateway.api import runtime_of
from proxy.gateway.console.recent import RecentRequests
from proxy.gateway.responses import OrjsonResponse
from proxy.gateway.runtime import Runtime

VIEWS: tuple[tuple[str, str], ...] = (
    ("fleet", "Fleet"),
    ("traffic", "Traffic"),
    ("verification", "Verification"),
    ("canary", "Canary"),
    ("policy", "Policy"),
)
MEDIA_TYPES = {".js": "text/javascript", ".css": "text/css", ".txt": "text/plain"}
EXPLAIN_EXAMPLE = {
    "model": "sim-llama-8b",
    "messages": [{"role": "user", "content": "def add(a, b):\n    return a + b\n# add tests"}],
    "temperature": 0,
}


@dataclass(frozen=True, slots=True)
class _Assets:
    """The templates and static files, read once from the package when the app is built."""

    templates: dict[str, str]
    static: dict[str, tuple[bytes, str]]

    @classmethod
    def load(cls) -> _Assets:
        root = importlib.resources.files(__package__ or "proxy.gateway.console")
        templates = {
            f.name.removesuffix(".html"): f.read_text("utf-8")
            for f in root.joinpath("templates").iterdir()
            if f.name.endswith(".html")
        }
        static = {}
        for f in root.joinpath("static").iterdir():
            suffix = "." + f.name.rsplit(".", 1)[-1]
            if suffix in MEDIA_TYPES:
                static[f.name] = (f.read_bytes(), MEDIA_TYPES[suffix])
        return cls(templates, static)


def _nav(active: str) -> str:
    links = []
    for name, title in VIEWS:
        current = ' class="active" aria-current="page"' if name == active else ""
        links.append(f'<a href="/ui/{name}"{current}>{title}</a>')
    return "".join(links)


def _meta(runtime: Runtime) -> str:
    backends = runtime.fleet.backends.values()
    pools = sorted({b.spec.pool for b in backends})
    models = sorted(runtime.models)
    return html.escape(
        f"{', '.join(models)} · {len(runtime.fleet.backends)} backends · pools {', '.join(pools)}"
    )


def _recent(request: Request) -> RecentRequests:
    recent: RecentRequests = request.app.state.recent_requests
    return recent


def console_router() -> APIRouter:
    assets = _Assets.load()
    page = Template(assets.templates["page"])
    guarded = APIRouter(prefix="/ui", dependencies=[Depends(require_admin)])
    public = APIRouter(prefix="/ui")

    @guarded.get("", include_in_schema=False)
    async def index() -> RedirectResponse:
        return RedirectResponse("/ui/fleet", status_code=303)

    @guarded.get("/static/{name}", include_in_schema=False)
    async def static(name: str) -> Response:
        found = assets.static.get(name)
        if found is None:
            raise GatewayError(404, f"no console asset named {name!r}", code="not_found")
        body, media_type = found
        return Response(body, media_type=media_type, headers={"cache-control": "max-age=300"})

    @guarded.get("/api/recent")
    async def recent_requests(request: Request, limit: int = 100) -> OrjsonResponse:
        rows = _recent(request).latest(min(max(limit, 0), 1000))
        return OrjsonResponse({"requests": rows})

    @guarded.get("/api/traffic")
    async def traffic(request: Request, window_s: float = 300.0) -> OrjsonResponse:
        return OrjsonResponse(_recent(request).traffic(min(max(window_s, 10.0), 3600.0)))

    @public.get("/login", include_in_schema=False)
    async def login_form() -> HTMLResponse:
        return _login_page(assets, "Sign in with the gateway's admin token.")

    @public.post("/login", include_in_schema=False)
    async def login(request: Request) -> Response:
        token: str | None = request.app.state.settings.admin_token
        given = parse_qs((await request.body()).decode("utf-8", "replace")).get("token", [""])[0]
        if not token or not hmac.compare_digest(given.encode(), token.encode()):
            return _login_page(assets, "That token is not the admin token.", 401)
        response = RedirectResponse("/ui/fleet", status_code=303)
        # SameSite=Strict: other sites cannot make the browser send it (no cross-site
        # requests to the admin actions); HttpOnly: page scripts never see the token.
        response.set_cookie(
            ADMIN_COOKIE, token, httponly=True, samesite="strict", path="/", max_age=12 * 3600
        )
        return response

    @guarded.get("/{view}", include_in_schema=False)
    async def view(request: Request, view: str) -> HTMLResponse:
        titles = dict(VIEWS)
        if view not in titles:
            raise GatewayError(404, f"no console view named {view!r}", code="not_found")
        content = Template(assets.templates[view]).safe_substitute(
            explain_example=html.escape(
                orjson.dumps(EXPLAIN_EXAMPLE, option=orjson.OPT_INDENT_2).decode()
            )
        )
        body = page.safe_substitute(
            title=titles[view],
            view=view,
            nav=_nav(view),
            meta=_meta(runtime_of(request)),
            content=content,
        )
        return HTMLResponse(body, headers={"cache-control": "no-store"})

    router = APIRouter()
    router.include_router(public)
    router.include_router(guarded)
    return router


def _login_page(assets: _Assets, message: str, status: int = 200) -> HTMLResponse:
    body = Template(assets.templates["login"]).safe_substitute(message=html.escape(message))
    return HTMLResponse(body, status_code=status)


def install_console(app: FastAPI) -> None:
    """Mount ``/ui``. Its recent-requests ring is one of the gateway's outcome listeners,
    built with the other components (``compose``) and found at ``app.state.recent_requests``."""
    app.include_router(console_router())
