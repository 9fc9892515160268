"""service.http.middleware.SecurityHeadersMiddleware: nosniff on every answer; X-Frame-Options and a Content
Security Policy on every HTML page (the operator's page's own, or the one a page sets for itself)."""

from __future__ import annotations

import base64
import hashlib
import re

import httpx
import pytest

from service.http.middleware import PAGE_CSP
from tests.service.conftest import MODEL, rows

HTML_PAGES = ["/ui", "/ui/", "/docs", "/redoc", "/docs/oauth2-redirect"]


def _directives(policy: str) -> dict[str, list[str]]:
    parts = [d.split() for d in policy.split(";") if d.strip()]
    return {d[0]: d[1:] for d in parts}


def test_every_answer_says_nosniff_and_only_pages_get_a_frame_and_content_policy(memory_server, scenarios):
    x, y = scenarios
    with httpx.Client(base_url=memory_server.url, timeout=60) as client:
        cid = client.post("/v1/context-sets", json={"x": rows(x[:20]), "y": rows(y[:20])}).json()["id"]
        answers = {
            "page": client.get("/ui"),
            "script": client.get("/ui/static/app.js"),
            "style": client.get("/ui/static/app.css"),
            "docs asset": client.get("/docs/assets/swagger-ui.css"),
            "openapi": client.get("/openapi.json"),
            "health": client.get("/healthz"),
            "predict (hot route)": client.post(
                "/v1/predict", json={"model": MODEL, "context_id": cid, "queries": rows(x[30:31])}
            ),
            "404 problem": client.get("/ui/static/secret.py"),
            "405 problem": client.put("/healthz"),
            "413 problem (body limit)": client.post("/v1/context-sets", content=b"x" * 2_000_001),
            "422 problem": client.post("/v1/context-sets", json={"x": [[0.0]]}),
            "unmatched": client.get("/nothing/here"),
            "HEAD": client.head("/ui"),
        }
        for what, response in answers.items():
            assert response.headers.get("x-content-type-options") == "nosniff", (what, response.headers)
            assert response.headers.get_list("x-content-type-options") == ["nosniff"], what  # once
            html = response.headers.get("content-type", "").startswith("text/html")
            assert ("x-frame-options" in response.headers) == html, (what, response.headers)
            assert ("content-security-policy" in response.headers) == html, (what, response.headers)
        assert (
            answers["predict (hot route)"].status_code == 200 and answers["413 problem (body limit)"].status_code == 413
        )


def test_the_operators_page_gets_a_policy_of_exactly_what_it_uses(memory_server):
    with httpx.Client(base_url=memory_server.url, timeout=60) as client:
        page = client.get("/ui")
    assert page.headers["x-frame-options"] == "DENY"
    assert page.headers["content-security-policy"] == PAGE_CSP
    policy = _directives(PAGE_CSP)
    assert policy["default-src"] == ["'self'"] and policy["frame-ancestors"] == ["'none'"]
    assert policy["object-src"] == ["'none'"] and policy["base-uri"] == ["'none'"]
    # scripts, stylesheets, the icon and fetch: the service's own (default-src); no inline script, no eval,
    # no CDN; only style attributes inline (the profile legend's colour swatches)
    assert not {"script-src", "style-src", "img-src", "connect-src"} & set(policy)
    assert policy["style-src-attr"] == ["'unsafe-inline'"]
    assert "<script>" not in page.text and "<style" not in page.text and " style=" not in page.text


@pytest.mark.parametrize("path", ["/docs", "/redoc", "/docs/oauth2-redirect"])
def test_the_docs_pages_allow_their_own_inline_scripts_by_hash_and_nothing_from_outside(memory_server, path):
    with httpx.Client(base_url=memory_server.url, timeout=60) as client:
        page = client.get(path)
    assert page.status_code == 200 and page.headers["x-frame-options"] == "DENY"
    policy = _directives(page.headers["content-security-policy"])
    assert policy["default-src"] == ["'self'"] and policy["frame-ancestors"] == ["'none'"]
    inline = re.findall(r"<script>(.*?)</script>", page.text, re.DOTALL)
    hashes = {f"'sha256-{base64.b64encode(hashlib.sha256(s.encode()).digest()).decode()}'" for s in inline}
    assert set(policy["script-src"]) == {"'self'", *hashes}  # each inline script by its hash, nothing else
    assert all(not source.startswith(("http", "//", "*")) for sources in policy.values() for source in sources)
