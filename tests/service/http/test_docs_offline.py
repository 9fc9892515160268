"""/docs and /redoc work without the internet (every page the service serves refers only to itself) and
under their Content Security Policy, in a real headless Chromium."""

from __future__ import annotations

import re
import time

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


@pytest.fixture(scope="module")
def browser():
    from tests.service.http.browser import browser_for

    driver = browser_for("/docs and /redoc")
    # every violation of the page's Content Security Policy, from its first script on (CDP's script is exempt)
    driver.execute_cdp_cmd(
        "Page.addScriptToEvaluateOnNewDocument",
        {
            "source": "window.cspViolations = []; document.addEventListener('securitypolicyviolation', "
            "(e) => window.cspViolations.push(`${e.effectiveDirective} ${e.blockedURI}`));"
        },
    )
    try:
        yield driver
    finally:
        driver.quit()


# per page: a script counting what it drew of the OpenAPI document (operations, sections)
DRAWN = {
    "/docs": "return document.querySelectorAll('#swagger-ui .opblock').length",
    "/redoc": "return document.querySelectorAll('redoc [data-section-id]').length",
}
# ReDoc's "powered by" logo comes from its CDN: refused (it then hides itself), as nothing from outside may load
REFUSED = {"/docs": [], "/redoc": ["img-src https://cdn.redoc.ly/redoc/logo-mini.svg"]}


def _until(driver, script: str, what: str):
    from selenium.webdriver.support.ui import WebDriverWait

    return WebDriverWait(driver, 60, poll_frequency=0.1).until(lambda d: d.execute_script(script), what)


@pytest.mark.timeout(600)
@pytest.mark.parametrize("path", DRAWN)
def test_the_docs_pages_work_under_their_content_security_policy(memory_server, browser, path):
    from tests.service.http.browser import console_errors

    driver = browser
    console_errors(driver)  # drained
    driver.get(memory_server.url + path)
    _until(driver, DRAWN[path] + " >= 10", "the document drawn")
    if path == "/docs":  # an operation opened and tried: its form (select arrows: data: SVGs) and a fetch
        driver.execute_script(
            "document.querySelector('#operations-health-live_healthz_get .opblock-summary-control').click()"
        )
        _until(driver, "return document.querySelector('.try-out__btn')", "Try it out")
        driver.execute_script("document.querySelector('.try-out__btn').click()")
        _until(driver, "return document.querySelector('.btn.execute')", "Execute")
        driver.execute_script("document.querySelector('.btn.execute').click()")
        _until(driver, "return document.querySelector('.live-responses-table tbody .response-col_status')", "answered")
        status = driver.execute_script(
            "return document.querySelector('.live-responses-table tbody .response-col_status').textContent"
        )
        assert "200" in status, status
    time.sleep(1.0)  # what the page loads after drawing (icons, workers) has had its chance to be refused
    assert driver.execute_script("return window.cspViolations") == REFUSED[path]
    errors = console_errors(driver, allow_http_errors=False)
    assert len(errors) == len(REFUSED[path]) and all("cdn.redoc.ly" in e for e in errors), errors
