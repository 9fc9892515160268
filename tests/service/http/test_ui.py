"""The operator's page at /ui, driven in a real headless Chromium against a real server (tiny checkpoint).

The numbers drawn (data attributes of the SVG elements) are compared with the API's own answer to the
same request sent from Python; screenshots land in test-artifacts/ui/ (gitignored).
Set GRIDPFN_UI_TESTS=skip to skip the browser tests on a machine where Chromium cannot be installed.
"""

from __future__ import annotations

import io
import logging
import os
import re
import time
from pathlib import Path

import httpx
import numpy as np
import pandas as pd
import pytest

import gridsim
from service.jobs.settings import JobSettings
from service.settings import Settings
from tests.service.conftest import LIMITS, MODEL, Server
from tests.service.http.browser import ARTIFACTS, headless_chrome

log = logging.getLogger(__name__)

# the first browser test may install Chromium with apt-get (minutes on a fresh CI machine); the tests
# themselves take seconds
pytestmark = pytest.mark.timeout(900)

KEY = "ui-test-key"
NET = gridsim.network("ieee33")
QUANTILES = [0.05, 0.25, 0.5, 0.75, 0.95]


@pytest.fixture(scope="module")
def ui_server(model_dir, tmp_path_factory):
    server = Server(Settings(model_dir=model_dir, redis_url=None, api_keys=KEY, **LIMITS))
    # small chunks with a pause between them, so the page's progress bar has something to show
    server.app.state.job_settings = JobSettings(
        jobs_dir=tmp_path_factory.mktemp("ui-jobs"), job_chunk_rows=50, job_chunk_pause_s=0.3
    )
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module")
def api(ui_server):
    with httpx.Client(base_url=ui_server.url, timeout=60, headers={"Authorization": f"Bearer {KEY}"}) as client:
        yield client


@pytest.fixture(scope="module")
def browser():
    if os.environ.get("GRIDPFN_UI_TESTS") == "skip":
        pytest.skip("GRIDPFN_UI_TESTS=skip: browser tests of /ui skipped")
    try:
        driver = headless_chrome()
    except RuntimeError as exc:  # Chromium missing and not installable here: say so, loudly
        pytest.fail(f"the /ui browser tests need Chromium: {exc} (set GRIDPFN_UI_TESTS=skip to skip them)")
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    try:
        yield driver
    finally:
        driver.quit()


def wait(driver, predicate, timeout_s: float = 30.0, what: str = "condition"):
    from selenium.webdriver.support.ui import WebDriverWait

    return WebDriverWait(driver, timeout_s, poll_frequency=0.05).until(lambda d: predicate(d), f"timed out: {what}")


def css(driver, selector: str):
    from selenium.webdriver.common.by import By

    return driver.find_elements(By.CSS_SELECTOR, selector)


def by_id(driver, name: str):
    from selenium.webdriver.common.by import By

    return driver.find_element(By.ID, name)


def shot(driver, name: str) -> Path:
    path = ARTIFACTS / f"{name}.png"
    driver.save_screenshot(str(path))
    return path


def open_page(driver, server, key: str | None = KEY) -> None:
    """Loads /ui in a fresh browser session (sessionStorage cleared), then enters the key if given."""
    driver.get(server.url + "/ui")
    driver.execute_script("sessionStorage.clear()")
    driver.get(server.url + "/ui")
    if key is not None:
        field = by_id(driver, "api-key")
        field.send_keys(key)
        driver.execute_script("arguments[0].dispatchEvent(new Event('change'))", field)
        wait(driver, lambda d: css(d, "#model option"), what="models listed")


def simulate_context(driver, n: int, delta: float, seed: int) -> str:
    for name, value in (("ctx-n", n), ("ctx-delta", delta), ("ctx-seed", seed)):
        field = by_id(driver, name)
        field.clear()
        field.send_keys(str(value))
    by_id(driver, "ctx-simulate-btn").click()
    return wait(driver, lambda d: by_id(d, "ctx-info").get_attribute("data-context-id"), what="context id shown")


def predict_and_wait(driver) -> None:
    driver.execute_script("document.getElementById('profile').textContent = ''")
    by_id(driver, "predict-btn").click()
    wait(
        driver,
        lambda d: (
            by_id(d, "timing").get_attribute("data-round-trip-ms")
            and len(css(d, "#profile circle.bus-mean")) == len(NET.output_names)
        ),
        what="profile drawn",
    )


def drawn(driver, selector: str, attribute: str) -> dict[int, float]:
    """{bus: float(attribute)} over the elements matching selector (the exact double the page held)."""
    values = driver.execute_script(
        "return Array.from(document.querySelectorAll(arguments[0])).filter(e => e.hasAttribute(arguments[1]))"
        ".map(e => [e.getAttribute('data-bus'), e.getAttribute(arguments[1])])",
        selector,
        attribute,
    )
    return {int(bus): float(value) for bus, value in values}


def by_bus(answer: dict, values: list[float]) -> dict[int, float]:
    return {int(name.removeprefix("vm_pu_bus")): v for name, v in zip(answer["outputs"], values)}


def test_page_and_every_asset_come_from_the_service(ui_server):
    """No CDN, no internet: every script, style and icon the page names is served here."""
    with httpx.Client(base_url=ui_server.url, timeout=30) as client:
        page = client.get("/ui")
        assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
        refs = re.findall(r'(?:src|href)="([^"]+)"', page.text)
        assert refs and all(ref.startswith("/ui/static/") for ref in refs), refs
        for ref in refs:
            asset = client.get(ref)
            assert asset.status_code == 200, ref
            # the SVG namespace URI is a name, not a fetch; nothing else may point off the machine
            assert not re.search(r"https?://(?!www\.w3\.org/2000/svg)", asset.text), ref
        assert 'from "/ui/static/charts.js"' in client.get("/ui/static/app.js").text
        assert client.get("/ui/static/charts.js").status_code == 200
        missing = client.get("/ui/static/secret.py")
        assert missing.status_code == 404 and missing.headers["content-type"].startswith("application/problem+json")
        # the helpers behind the page sit behind the API key like /v1
        assert client.get("/ui/api/batch-jobs/" + "0" * 32 + "/risk-histogram").status_code == 401
        assert client.post("/ui/api/context-sets", files={"file": ("c.csv", b"a\n1\n")}).status_code == 401


def test_key_context_prediction_and_drawn_numbers_equal_the_api(ui_server, api, browser):
    driver = browser
    open_page(driver, ui_server, key=None)
    banner = wait(driver, lambda d: by_id(d, "banner").is_displayed() and by_id(d, "banner"), what="401 shown")
    assert "Unauthorized (401)" in banner.text and "API key" in banner.text
    field = by_id(driver, "api-key")
    field.send_keys(KEY)
    driver.execute_script("arguments[0].dispatchEvent(new Event('change'))", field)
    wait(driver, lambda d: css(d, "#model option") and not by_id(d, "banner").is_displayed(), what="models after key")
    assert driver.execute_script("return sessionStorage.getItem('gridpfn-api-key')") == KEY

    cid = simulate_context(driver, n=60, delta=0.1, seed=3)
    info = api.get(f"/v1/context-sets/{cid}").json()
    assert info["rows"] == 60 and info["source"]["seed"] == 3
    assert "60 rows" in by_id(driver, "ctx-info").text

    level = 1.2
    driver.execute_script(
        "const s = document.getElementById('level'); s.value = arguments[0];s.dispatchEvent(new Event('input'))",
        str(level),
    )
    driver.execute_script("arguments[0].closest('details').open = true", by_id(driver, "load-table"))
    edited = css(driver, '#load-table input[data-kind="p"][data-i="16"]')[0]  # bus 18's P
    edited.clear()
    edited.send_keys("0.25")
    by_id(driver, "compare-gp").click()
    predict_and_wait(driver)
    shot(driver, "predict-gp")

    base = np.concatenate([NET.base_p_mw, NET.base_q_mvar])
    base[16] = 0.25
    query = [level * v for v in base.tolist()]
    answer = api.post(
        "/v1/predict",
        json={
            "model": MODEL,
            "context_id": cid,
            "queries": [query],
            "quantiles": QUANTILES,
            "voltage_band": [0.95, 1.05],
            "compare_gp": True,
        },
    ).json()
    assert drawn(driver, "#profile circle.bus-mean", "data-mean") == by_bus(answer, answer["mean"][0])
    for level_, attr in ((0.05, "data-q05"), (0.25, "data-q25"), (0.75, "data-q75"), (0.95, "data-q95")):
        assert drawn(driver, "#profile circle.bus-mean", attr) == by_bus(answer, answer["quantiles"][str(level_)][0])
    risk = by_bus(answer, answer["p_outside_band"][0])
    assert drawn(driver, "#profile circle.bus-mean", "data-p-outside") == risk
    assert drawn(driver, "#riskmap circle.node", "data-p-outside") == risk
    feeder = api.get("/v1/networks/ieee33").json()  # the one-line diagram is the API's feeder
    assert len(css(driver, "#riskmap .node")) == feeder["n_buses"]
    assert len(css(driver, "#riskmap path.line")) == sum(line["closed"] for line in feeder["lines"])
    assert sorted(e.get_attribute("data-tie") for e in css(driver, "#riskmap path.tie")) == sorted(
        f"{line['from_bus']}-{line['to_bus']}" for line in feeder["lines"] if not line["closed"]
    )
    assert drawn(driver, "#profile circle.gp-point", "data-gp-mean") == by_bus(answer, answer["gp"]["mean"][0])
    at_risk = {int(e.get_attribute("data-bus")) for e in css(driver, "#profile circle.bus-mean.at-risk")}
    assert at_risk == {bus for bus, p in risk.items() if p > 0.05}
    assert int(by_id(driver, "risk-count").get_attribute("data-count")) == len(at_risk)
    limits = sorted(float(e.get_attribute("data-limit")) for e in css(driver, "#profile line.limit"))
    assert limits == [0.95, 1.05]
    timing = by_id(driver, "timing").text
    assert "speedup" in timing and "GP" in timing and "PFN" in timing

    # hover a bus on the risk map: its numbers appear
    from selenium.webdriver.common.action_chains import ActionChains

    node = css(driver, '#riskmap circle.node[data-bus="18"]')[0]
    ActionChains(driver).move_to_element(node).perform()
    tip = wait(driver, lambda d: by_id(d, "tooltip").is_displayed() and by_id(d, "tooltip"), what="tooltip")
    shown = re.search(r"P\(outside [^)]*\): (\S+)", tip.text)
    assert "Bus 18" in tip.text and shown and float(shown.group(1)) == risk[18], tip.text
    shot(driver, "riskmap-hover")

    # two pasted rows: both predicted, the second drawn when picked
    rows = [query, [0.8 * v for v in query]]
    box = by_id(driver, "rows-box")
    driver.execute_script("arguments[0].open = true", box)
    text = by_id(driver, "rows-text")
    driver.execute_script(
        "arguments[0].value = arguments[1]; arguments[0].dispatchEvent(new Event('input'))",
        text,
        ",".join(NET.feature_names) + "\n" + "\n".join(",".join(map(repr, r)) for r in rows),
    )
    by_id(driver, "compare-gp").click()
    predict_and_wait(driver)
    from selenium.webdriver.support.ui import Select

    Select(by_id(driver, "row-select")).select_by_value("1")
    two = api.post(
        "/v1/predict",
        json={"model": MODEL, "context_id": cid, "queries": rows, "quantiles": QUANTILES, "voltage_band": [0.95, 1.05]},
    ).json()
    assert drawn(driver, "#profile circle.bus-mean", "data-mean") == by_bus(two, two["mean"][1])


def test_first_paint_and_prediction_round_trip(ui_server, browser):
    """The issue's targets on this CPU, service warm: first paint < 1 s, one load case drawn < 200 ms (best of 3)."""
    driver = browser
    open_page(driver, ui_server)
    simulate_context(driver, n=100, delta=0.1, seed=4)
    predict_and_wait(driver)  # encodes the context once
    trips = []
    for _ in range(3):
        predict_and_wait(driver)
        trips.append(float(by_id(driver, "timing").get_attribute("data-round-trip-ms")))
    paints = []
    for _ in range(2):
        driver.get(ui_server.url + "/ui")
        paints.append(
            wait(
                driver,
                lambda d: d.execute_script(
                    "const p = performance.getEntriesByType('paint').find(e => e.name === 'first-contentful-paint');"
                    "return p && p.startTime"
                ),
                what="first contentful paint",
            )
        )
    log.info("/ui first contentful paint %s ms, predict round trips %s ms", paints, trips)
    assert min(paints) < 1000, paints
    assert min(trips) < 200, trips


def test_batch_job_progress_histogram(ui_server, api, browser, tmp_path):
    driver = browser
    open_page(driver, ui_server)
    cid = simulate_context(driver, n=60, delta=0.2, seed=5)
    x = gridsim.sample_loads(NET, 200, 0.3, np.random.default_rng(7))
    path = tmp_path / "loads.csv"
    pd.DataFrame(x, columns=list(NET.feature_names)).to_csv(path, index=False)
    by_id(driver, "batch-file").send_keys(str(path))
    by_id(driver, "batch-submit").click()
    job = wait(driver, lambda d: css(d, ".job[data-job-id]"), what="job listed")[0]
    job_id = job.get_attribute("data-job-id")
    seen, deadline = set(), time.monotonic() + 60
    while job.get_attribute("data-hist-rows") is None and time.monotonic() < deadline:
        seen.add(int(job.get_attribute("data-rows-done") or 0))
        time.sleep(0.05)
    shot(driver, "batch-done")
    assert job.get_attribute("data-state") == "done" and job.get_attribute("data-hist-rows") == "200"
    assert any(0 < s < 200 for s in seen), f"no intermediate progress seen: {sorted(seen)}"
    assert "200 / 200 rows" in job.text and "rows/s" in job.text
    status = api.get(f"/v1/batch-jobs/{job_id}").json()
    assert status["context_id"] == cid and status["voltage_band"] == [0.95, 1.05]

    # the page's download button saves the API's result file
    downloads = tmp_path / "downloads"
    downloads.mkdir()
    driver.execute_cdp_cmd("Browser.setDownloadBehavior", {"behavior": "allow", "downloadPath": str(downloads)})
    css(driver, f'.job[data-job-id="{job_id}"] button.dl-parquet')[0].click()
    saved = downloads / f"{job_id}.parquet"
    wait(driver, lambda d: saved.exists() and saved.stat().st_size > 0, what="result downloaded")
    result_bytes = api.get(f"/v1/batch-jobs/{job_id}/result").content
    time.sleep(0.2)  # the file is written in one piece, but let Chromium finish renaming it
    assert saved.read_bytes() == result_bytes

    result = pd.read_parquet(io.BytesIO(result_bytes))
    worst = result[[c for c in result.columns if c.startswith("p_outside_")]].to_numpy(np.float64).max(axis=1)
    expected = np.histogram(worst, bins=np.linspace(0, 1, 21))[0].tolist()
    bars = css(driver, f'.job[data-job-id="{job_id}"] svg rect.bar')
    assert [int(b.get_attribute("data-count")) for b in bars] == expected
    flagged = int(result["extrapolated"].sum())  # rows beyond the context's loads, counted in the summary
    assert int(job.get_attribute("data-extrapolated-rows")) == flagged and f"{flagged} rows extrapolated" in job.text


def test_bad_uploads_show_the_problem(ui_server, browser, tmp_path, scenarios):
    driver = browser
    open_page(driver, ui_server)
    x, vm = scenarios
    frame = pd.DataFrame(np.hstack([x[:40], vm[:40]]), columns=[*NET.feature_names, *NET.output_names])
    bad = frame.astype(object)
    bad.loc[2, "p_mw_bus5"] = "abc"  # data row 3
    bad_path, good_path = tmp_path / "bad-context.csv", tmp_path / "context.parquet"
    bad.to_csv(bad_path, index=False)
    frame.to_parquet(good_path)
    driver.find_element("css selector", 'input[name="ctx-mode"][value="upload"]').click()
    by_id(driver, "ctx-file").send_keys(str(bad_path))
    by_id(driver, "ctx-upload-btn").click()
    error = wait(driver, lambda d: by_id(d, "ctx-error").is_displayed() and by_id(d, "ctx-error"), what="upload error")
    assert "Invalid input file (422)" in error.text and "row 3" in error.text and "p_mw_bus5" in error.text
    shot(driver, "bad-context-upload")

    by_id(driver, "ctx-file").send_keys(str(good_path))
    by_id(driver, "ctx-upload-btn").click()
    wait(driver, lambda d: by_id(d, "ctx-info").get_attribute("data-rows") == "40", what="uploaded context")
    assert not by_id(driver, "ctx-error").is_displayed()

    missing = tmp_path / "loads-missing-column.csv"
    pd.DataFrame(x[:5], columns=list(NET.feature_names)).drop(columns=["q_mvar_bus33"]).to_csv(missing, index=False)
    by_id(driver, "batch-file").send_keys(str(missing))
    by_id(driver, "batch-submit").click()
    error = wait(
        driver, lambda d: by_id(d, "batch-error").is_displayed() and by_id(d, "batch-error"), what="batch error"
    )
    assert "(422)" in error.text and "q_mvar_bus33" in error.text
    assert not css(driver, ".job")
    shot(driver, "bad-batch-upload")


def test_an_extrapolated_load_case_is_flagged_with_its_value(ui_server, api, browser):
    """Issue 29: the page says how far the load case lies outside the context, and warns past 1."""
    driver = browser
    open_page(driver, ui_server)
    cid = simulate_context(driver, n=200, delta=0.1, seed=6)
    base = np.concatenate([NET.base_p_mw, NET.base_q_mvar])
    for level, flagged in ((1.0, False), (1.4, True)):
        driver.execute_script(
            "const s = document.getElementById('level'); s.value = arguments[0];s.dispatchEvent(new Event('input'))",
            str(level),
        )
        predict_and_wait(driver)
        box = by_id(driver, "extrapolation")
        answer = api.post(
            "/v1/predict", json={"model": MODEL, "context_id": cid, "queries": [(level * base).tolist()]}
        ).json()
        assert box.is_displayed() and answer["extrapolated"] == [flagged]
        assert box.get_attribute("data-extrapolated") == str(flagged).lower()
        assert float(box.get_attribute("data-extrapolation")) == answer["extrapolation"][0]
        assert f"{answer['extrapolation'][0]:.2f}" in box.text
        assert ("warning" in box.get_attribute("class")) == flagged and ("Extrapolated" in box.text) == flagged
    shot(driver, "extrapolated")


def test_a_sparse_context_upload_picks_network_fit_and_marks_the_buses_it_never_read(
    ui_server, api, browser, tmp_path, scenarios
):
    driver = browser
    open_page(driver, ui_server)
    x, vm = scenarios
    frame = pd.DataFrame(np.hstack([x[:60], vm[:60]]), columns=[*NET.feature_names, *NET.output_names])
    frame["vm_pu_bus7"] = np.nan  # never read: empty cells in the CSV
    frame.loc[::3, "vm_pu_bus12"] = np.nan
    frame.loc[:, "p_mw_bus5"] = np.nan  # an unmetered load
    path = tmp_path / "sparse-context.csv"
    frame.to_csv(path, index=False)
    driver.find_element("css selector", 'input[name="ctx-mode"][value="upload"]').click()
    by_id(driver, "ctx-file").send_keys(str(path))
    by_id(driver, "ctx-upload-btn").click()
    info = wait(
        driver,
        lambda d: by_id(d, "ctx-info").get_attribute("data-unmetered") == "1" and by_id(d, "ctx-info"),
        what="sparse context",
    )
    assert "31 of 32 buses metered" in info.text
    assert by_id(driver, "model").get_attribute("value") == "network-fit"  # the model that accepts it
    predict_and_wait(driver)
    shot(driver, "sparse-context")
    hollow = [int(e.get_attribute("data-bus")) for e in css(driver, "#profile circle.bus-mean.unmetered")]
    assert hollow == [7]
    rows = {
        int(r.find_element("css selector", "td").get_attribute("textContent")): r.get_attribute("data-metered")
        for r in css(driver, "#bus-table tbody tr")
    }
    assert rows[7] == "false" and rows[12] == "true" and list(rows.values()).count("false") == 1
    cid = info.get_attribute("data-context-id")
    answer = api.post("/v1/predict", json={"model": "network-fit", "context_id": cid, "queries": [list(x[0])]}).json()
    assert answer["readings"][NET.output_names.index("vm_pu_bus12")] == 40
