"""The built site, its server and Chromium: built and started once per test session for
every module of tests/docs (test_site.py, test_explorers.py, ...)."""

from __future__ import annotations

import functools
import http.server
import threading
from pathlib import Path

import pytest
import site_build

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = Path("/usr/bin/chromium")


@pytest.fixture(scope="session")
def site(request) -> Path:
    """The site, built once per session with ``mkdocs build --strict``: the build that
    tests/conftest.py started in the background when the tests were collected."""
    build = getattr(request.config, "site_build", None)
    if build is None:  # not started (tests/docs was not collected): build it now
        build = request.config.site_build = site_build.start()
    return build.wait()


@pytest.fixture(scope="session", autouse=True)
def _after_the_build(request):
    """Every test here waits for the build started in the background: some run a notebook
    themselves (the claims page), which the build may be running at the same moment."""
    build = getattr(request.config, "site_build", None)
    if build is not None:
        build.process.wait()  # a failed build fails the tests that use the site, not all


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


@pytest.fixture(scope="session")
def server(site):
    """The built site on http://127.0.0.1:PORT/ (a thread of this process)."""
    handler = functools.partial(_Quiet, directory=str(site))
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}/"
    httpd.shutdown()
    httpd.server_close()


@pytest.fixture(scope="session")
def browser():
    if not CHROMIUM.exists():
        pytest.skip(f"{CHROMIUM} is missing (`make browser` installs Debian's chromium as "
                    f"root); the site's browser test did not run")
    playwright = pytest.importorskip("playwright.sync_api",
                                     reason="Playwright is not installed (the docs extra)")
    with playwright.sync_playwright() as p:
        chromium = p.chromium.launch(executable_path=str(CHROMIUM), headless=True,
                                     args=["--no-sandbox", "--disable-gpu"])
        yield chromium
        chromium.close()


@pytest.fixture(scope="session")
def requests():
    """Every URL any page of the session requested."""
    return []


@pytest.fixture
def page(browser, requests):
    context = browser.new_context(viewport={"width": 1280, "height": 900},
                                  color_scheme="light")
    context.on("request", lambda request: requests.append(request.url))
    tab = context.new_page()
    errors = []
    tab.on("pageerror", lambda error: errors.append(str(error)))
    yield tab
    context.close()
    assert not errors, f"JavaScript errors: {errors}"


@pytest.fixture
def plotly_page(browser, server):
    """A tab for a page drawn with plotly.js: it records every request and every console
    error or uncaught exception, and fails the test on either, on a request that leaves
    127.0.0.1, or if the site's own plotly.js was never loaded."""
    context = browser.new_context(viewport={"width": 1280, "height": 900},
                                  color_scheme="light")
    requests, errors = [], []
    context.on("request", lambda request: requests.append(request.url))
    tab = context.new_page()
    tab.on("pageerror", lambda error: errors.append(str(error)))
    tab.on("console", lambda msg: errors.append(msg.text) if msg.type == "error" else None)
    yield tab
    context.close()
    assert not errors, f"console errors: {errors}"
    foreign = [url for url in requests if not url.startswith((server, "data:", "blob:"))]
    assert not foreign, f"requests left 127.0.0.1: {foreign}"
    assert any(url.endswith("assets/plotly/plotly.min.js") for url in requests)
