"""/docs (Swagger UI) and /redoc with every asset served by this service, so they work offline.

FastAPI's own pages load Swagger UI's and ReDoc's scripts and styles from a CDN, and ReDoc its fonts
from Google: on an air-gapped network they stay blank. The same files ship in the `fastapi-offline`
wheel (Swagger UI's swagger-ui-bundle.js and swagger-ui.css, ReDoc's redoc.standalone.js, a
favicon) as package data; they are served here under /docs/assets/, read once and cached in
memory. Swagger UI's validator badge (a call to an outside validator) is off.

Each page answers with its own Content Security Policy (docs_policy): FastAPI's pages start Swagger UI
with an inline script, which is allowed by its SHA-256 (computed from the page as rendered, since its
text names the request's root path); no other inline script, no eval, nothing from another origin
(SWAGGER_SOURCES and REDOC_SOURCES say what else each page needs).
"""

from __future__ import annotations

import base64
import hashlib
import re
from collections.abc import Awaitable, Callable
from functools import cache
from importlib.resources import files
from typing import Any

from fastapi import FastAPI, Request
from fastapi.openapi.docs import get_redoc_html, get_swagger_ui_html, get_swagger_ui_oauth2_redirect_html
from starlette.responses import HTMLResponse, Response

from service.engine.errors import NotFound

ASSETS_PATH = "/docs/assets"
ASSETS = {
    "swagger-ui-bundle.js": "text/javascript; charset=utf-8",
    "swagger-ui.css": "text/css; charset=utf-8",
    "redoc.standalone.js": "text/javascript; charset=utf-8",
    "favicon.png": "image/png",
}


# An inline script (no src attribute) of a page FastAPI renders, by its text
_INLINE_SCRIPT = re.compile(rb"<script(?![^>]*\bsrc=)[^>]*>(.*?)</script>", re.DOTALL | re.IGNORECASE)


def docs_policy(html: bytes, sources: str = "") -> str:
    """The Content Security Policy of a docs page: its scripts from here or inline by their hashes, and the
    page's own further `sources` (directives, each ended by a semicolon)."""
    hashes = "".join(
        f" 'sha256-{base64.b64encode(hashlib.sha256(script).digest()).decode()}'"
        for script in _INLINE_SCRIPT.findall(html)
    )
    return (
        f"default-src 'self'; script-src 'self'{hashes}; {sources}{' ' if sources else ''}object-src 'none'; "
        "base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
    )


# What each page needs beyond default-src 'self' and its scripts. Both draw icons as data: SVGs (Swagger UI's
# stylesheet: select arrows, copy buttons, model toggles; ReDoc's script). ReDoc's styled-components writes
# its styles as <style> elements at run time (no hash can name them) and runs its search in a blob: worker.
# Its "powered by" logo from cdn.redoc.ly stays refused: nothing is loaded from another host (it hides itself).
SWAGGER_SOURCES = "img-src 'self' data:;"
REDOC_SOURCES = "style-src 'self' 'unsafe-inline'; img-src 'self' data:; worker-src 'self' blob:;"


def _with_policy(response: HTMLResponse, sources: str = "") -> HTMLResponse:
    response.headers["Content-Security-Policy"] = docs_policy(bytes(response.body), sources)
    return response


@cache
def asset_bytes(name: str) -> bytes:
    return (files("fastapi_offline") / "static" / name).read_bytes()


def _page(
    app: FastAPI, render: Callable[..., HTMLResponse], title: str, options: dict[str, Any], sources: str
) -> Callable[[Request], Awaitable[HTMLResponse]]:
    """A handler answering FastAPI's `render` of the app's OpenAPI document under its docs_policy; in `options`,
    "{root}" stands for the request's root path (a proxy's prefix) and "{assets}" for the assets' path under it."""

    async def page(request: Request) -> HTMLResponse:
        root = request.scope.get("root_path", "")
        where = {"root": root, "assets": f"{root}{ASSETS_PATH}"}
        filled = {key: value.format(**where) if isinstance(value, str) else value for key, value in options.items()}
        html = render(openapi_url=f"{root}{app.openapi_url}", title=f"{app.title} - {title}", **filled)
        return _with_policy(html, sources)

    return page


def install(app: FastAPI, docs_url: str = "/docs", redoc_url: str = "/redoc") -> None:
    """Add the two pages and their assets; the app must be built with docs_url=None, redoc_url=None."""
    oauth2_redirect = f"{docs_url}/oauth2-redirect"
    pages = {
        docs_url: (
            get_swagger_ui_html,
            "Swagger UI",
            {
                "oauth2_redirect_url": "{root}" + oauth2_redirect,
                "swagger_js_url": "{assets}/swagger-ui-bundle.js",
                "swagger_css_url": "{assets}/swagger-ui.css",
                "swagger_favicon_url": "{assets}/favicon.png",
                "swagger_ui_parameters": {**(app.swagger_ui_parameters or {}), "validatorUrl": None},
            },
            SWAGGER_SOURCES,
        ),
        redoc_url: (
            get_redoc_html,
            "ReDoc",
            {
                "redoc_js_url": "{assets}/redoc.standalone.js",
                "redoc_favicon_url": "{assets}/favicon.png",
                "with_google_fonts": False,
            },
            REDOC_SOURCES,
        ),
    }
    for url, (render, title, options, sources) in pages.items():
        app.get(url, include_in_schema=False)(_page(app, render, title, options, sources))

    @app.get(oauth2_redirect, include_in_schema=False)
    async def swagger_ui_redirect() -> HTMLResponse:
        return _with_policy(get_swagger_ui_oauth2_redirect_html())

    @app.get(ASSETS_PATH + "/{name}", include_in_schema=False)
    async def asset(name: str) -> Response:
        media_type = ASSETS.get(name)
        if media_type is None:
            raise NotFound("documentation asset", name, "name", "path")
        return Response(asset_bytes(name), media_type=media_type, headers={"Cache-Control": "public, max-age=86400"})
