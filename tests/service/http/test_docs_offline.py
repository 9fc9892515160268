"""/docs and /redoc work without the internet: every page the service serves refers only to itself."""

from __future__ import annotations

import re

import httpx
import pytest
from starlette.routing import Route

# a reference to another host: a scheme with //, or a protocol-relative //host, in markup or styles
OUTSIDE = re.compile(r"""(?:https?:)?//[a-z0-9.-]+\.[a-z]{2,}""", re.IGNORECASE)
REFERENCES = re.compile(r"""(?:src|href|action|spec-url|url)\s*[=:(]\s*["']?([^"' )>]+)""", re.IGNORECASE)


def _plain_get_paths(app) -> list[str]:
    """Every GET route without path parameters, documented or not (the pages are not)."""
    return sorted(
        {r.path for r in app.routes if isinstance(r, Route) and "GET" in (r.methods or ()) and "{" not in r.path}
    )


def test_no_page_refers_to_an_outside_url(memory_server):
    pages = 0
    with httpx.Client(base_url=memory_server.url, timeout=60) as client:
        for path in _plain_get_paths(memory_server.app):
            response = client.get(path)
            kind = response.headers.get("content-type", "")
            if response.status_code != 200 or not kind.startswith("text/html"):
                continue
            pages += 1
            outside = OUTSIDE.findall(response.text)
            assert not outside, f"{path} refers to {outside}"
            for ref in REFERENCES.findall(response.text):  # each asset it loads is served here
                if ref.startswith("/"):
                    assert client.get(ref).status_code == 200, f"{path} loads {ref}, which is not served"
        assert pages >= 3  # /docs, its OAuth2 redirect page and /redoc at least
        css = client.get("/docs/assets/swagger-ui.css")
        assert css.status_code == 200 and css.headers["content-type"].startswith("text/css")
        loads = [u.strip("'\" ") for u in re.findall(r"url\(([^)]*)\)", css.text)]
        assert loads and not [u for u in loads if not u.startswith("data:") and OUTSIDE.search(u)]  # inline SVGs only


@pytest.mark.parametrize(
    "page, asset", [("/docs", "/docs/assets/swagger-ui-bundle.js"), ("/redoc", "/docs/assets/redoc.standalone.js")]
)
def test_the_docs_pages_load_their_scripts_from_the_service(memory_server, page, asset):
    with httpx.Client(base_url=memory_server.url, timeout=60) as client:
        html = client.get(page).text
        assert f'src="{asset}"' in html and "/openapi.json" in html
        script = client.get(asset)
        assert script.status_code == 200 and len(script.content) > 500_000
        assert script.headers["content-type"].startswith("text/javascript")
        assert "max-age" in script.headers["cache-control"]
        missing = client.get("/docs/assets/nothing.js")
        assert missing.status_code == 404 and missing.json()["errors"][0]["field"] == "name"
