"""A real headless Chromium for the page's tests: Debian's `chromium` + `chromium-driver`, driven by selenium.

`chromium_paths()` installs the two packages with apt-get when they are missing (CI machines are root
Debian hosts like this one) and says clearly why when it cannot; `headless_chrome()` starts one browser.
"""

from __future__ import annotations

import fcntl
import logging
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

log = logging.getLogger(__name__)

PACKAGES = ("chromium", "chromium-driver")
ARTIFACTS = Path(__file__).resolve().parents[3] / "test-artifacts" / "ui"


def _found() -> tuple[str, str] | None:
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    driver = shutil.which("chromedriver")
    return (browser, driver) if browser and driver else None


def chromium_paths() -> tuple[str, str]:
    """(browser, chromedriver) paths, installing Debian's packages when missing; RuntimeError saying why not."""
    found = _found()
    if found:
        return found
    if not shutil.which("apt-get"):
        raise RuntimeError(
            f"Chromium is not installed and there is no apt-get to install it: install {' and '.join(PACKAGES)} "
            "(Debian/Ubuntu) so that `chromium` and `chromedriver` are on PATH"
        )
    if hasattr(os, "geteuid") and os.geteuid() != 0:
        raise RuntimeError(
            f"Chromium is not installed and installing it needs root: run "
            f"`sudo apt-get update && sudo apt-get install -y {' '.join(PACKAGES)}`"
        )
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    # one installer at a time: the page tests of two pytest-xdist workers would meet on dpkg's lock (apt-get
    # fails at once when it is held); whoever waited finds Chromium installed
    with open(Path(tempfile.gettempdir()) / "gridpfn-chromium-install.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if found := _found():
            return found
        for command in (["apt-get", "update", "-q"], ["apt-get", "install", "-y", "-q", *PACKAGES]):
            log.warning("Chromium missing: running %s", " ".join(command))
            done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=900)
            if done.returncode != 0:
                raise RuntimeError(
                    f"could not install Chromium ({' '.join(command)} exited {done.returncode}): "
                    f"{(done.stderr or done.stdout)[-600:]}"
                )
    found = _found()
    if not found:
        raise RuntimeError(f"apt-get installed {PACKAGES} but `chromium`/`chromedriver` are still not on PATH")
    return found


def browser_for(what: str):
    """A headless Chromium for the browser tests of `what` (a page), or the test skipped with
    GRIDPFN_UI_TESTS=skip; failed loudly when Chromium is missing and cannot be installed."""
    import pytest

    if os.environ.get("GRIDPFN_UI_TESTS") == "skip":
        pytest.skip(f"GRIDPFN_UI_TESTS=skip: browser tests of {what} skipped")
    try:
        return headless_chrome()
    except RuntimeError as exc:  # Chromium missing and not installable here: say so, loudly
        pytest.fail(f"the browser tests of {what} need Chromium: {exc} (set GRIDPFN_UI_TESTS=skip to skip them)")


def headless_chrome(width: int = 1400, height: int = 1100):
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    browser, driver = chromium_paths()
    options = webdriver.ChromeOptions()
    options.binary_location = browser
    for arg in (
        "--headless=new",
        "--no-sandbox",
        "--disable-dev-shm-usage",
        "--disable-gpu",
        f"--window-size={width},{height}",
        "--disable-extensions",
        "--no-first-run",
    ):
        options.add_argument(arg)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})  # the console, for console_errors()
    # an explicit driver path: selenium never tries to download one (the tests run offline)
    return webdriver.Chrome(service=Service(executable_path=driver), options=options)


# Chromium logs every 4xx/5xx a fetch got as a console error; a test that provokes one expects it.
NETWORK_ERROR = "Failed to load resource: the server responded with a status of"


def console_errors(driver, allow_http_errors: bool = True) -> list[str]:
    """The console's errors since the last call (the log is drained when read): script errors, failed
    loads; answers with an HTTP error status left out when `allow_http_errors`."""
    entries = driver.get_log("browser")
    return [
        e["message"]
        for e in entries
        if e.get("level") == "SEVERE" and not (allow_http_errors and NETWORK_ERROR in e.get("message", ""))
    ]
