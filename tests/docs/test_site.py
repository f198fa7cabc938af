"""The documentation site: a strict build, then a real browser on it.

The site is built once per session (``mkdocs build --strict`` into a temporary folder; the
notebooks and the commands it runs are reused from ``build/`` while the package is
unchanged). Headless Chromium, Debian's package driven through Playwright, then reads it
from a server on 127.0.0.1: the home page with its figure, typeset math, a notebook's
images, the API reference, search, the dark palette, and not one request outside
127.0.0.1. Where Chromium is missing (``make browser`` installs it) the browser tests skip
and say so. ``MINIGRAD_SITE_SHOTS=DIR`` also saves screenshots of the pages they visit.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
SHOTS = os.environ.get("MINIGRAD_SITE_SHOTS")


class _Loader(yaml.SafeLoader):
    """mkdocs.yml with its tags (!ENV, !!python/name) read as plain values."""


_Loader.add_multi_constructor("", lambda loader, suffix, node: None)


def nav_pages(items=None) -> list[str]:
    """Every page that mkdocs.yml's nav names."""
    if items is None:
        items = yaml.load((ROOT / "mkdocs.yml").read_text(), Loader=_Loader)["nav"]
    pages = []
    for item in items:
        value = next(iter(item.values())) if isinstance(item, dict) else item
        pages += nav_pages(value) if isinstance(value, list) else [value]
    return pages


def test_the_strict_build_writes_every_page(site):
    for page in nav_pages():
        html = site / re.sub(r"(index)?\.(md|ipynb)$", "", page) / "index.html"
        if page.startswith(("concepts/", "distributed.md")) and not (ROOT / "docs" / page).exists():
            continue  # written by others; test_every_page_of_the_nav_is_written says so
        assert html.exists(), f"{page} was not built ({html})"
    assert (site / "assets" / "generated" / "demo.png").stat().st_size > 10_000
    assert (site / "assets" / "katex" / "katex.min.js").exists()
    assert (site / "assets" / "katex" / "LICENSE").exists()


def test_every_page_of_the_nav_is_written():
    missing = [page for page in nav_pages() if not page.endswith(".ipynb")
               and not (ROOT / "docs" / page).exists()]
    assert not missing, f"pages named in mkdocs.yml's nav are not written: {missing}"


def test_no_page_loads_anything_from_outside(site):
    """Statically: no script, stylesheet, image or font URL of any page leaves the site."""
    pattern = re.compile(r'<(?:script|img|link|iframe|source)\b[^>]*\b(?:src|href)="'
                         r'((?:https?:)?//[^"]+)"', re.I)
    found = {}
    for page in site.rglob("*.html"):
        for tag_url in pattern.findall(page.read_text(encoding="utf-8")):
            found.setdefault(tag_url, str(page.relative_to(site)))
    # <link rel="canonical"> names the page's own address; anything else is a request
    foreign = {url: page for url, page in found.items() if not url.startswith("http://127.0.0.1")}
    assert not foreign, f"pages load resources from outside the site: {foreign}"


# --- the browser ----------------------------------------------------------------------------

def _visit(page, server, path, shot=None):
    page.goto(server + path, wait_until="networkidle")
    if SHOTS and shot:
        Path(SHOTS).mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(Path(SHOTS) / f"{shot}.png"), full_page=False)


def _foreign(requests, server):
    return [url for url in requests if not url.startswith((server, "data:", "blob:"))]


def test_home_page_renders_with_its_figure(page, server, requests):
    _visit(page, server, "", shot="home")
    assert page.locator("h1").first.inner_text().rstrip("¶") == "minigrad"
    figure = page.locator('img[src$="assets/generated/demo.png"]').first
    figure.scroll_into_view_if_needed()
    assert figure.evaluate("img => img.complete && img.naturalWidth") > 600
    assert page.locator("code", has_text="make demo").count() > 0
    assert page.locator("code", has_text="make test").count() > 0
    assert not _foreign(requests, server)


def test_the_start_here_path_leads_through_the_built_site(site, page, server, requests):
    """The home page opens with the question; each "Start here" link, in order, is a page of
    the site; the sidebar reads Concepts, Notebooks, Internals, with the three internals."""
    _visit(page, server, "")
    first = page.locator("article p").first.inner_text()
    assert first.startswith("Is training with gradient accumulation") and "?" in first
    hrefs = page.evaluate("""() => {
        const hrefs = [];
        let node = document.getElementById("start-here").nextElementSibling;
        for (; node && node.tagName !== "H2"; node = node.nextElementSibling)
            if (node.tagName === "OL") node.querySelectorAll("a[href]").forEach(
                a => hrefs.push(a.getAttribute("href")));
        return hrefs;
    }""")
    assert hrefs[0] == "concepts/accumulation/" and hrefs[-1] == "concepts/array-dispatch/"
    notebooks = [h for h in hrefs if h.startswith("notebooks/")]
    assert notebooks == _notebook_pages(site)  # every notebook, in order
    for href in hrefs:
        response = page.request.get(server + href)
        assert response.ok and "<h1" in response.text(), href
    _visit(page, server, "glossary/")
    sections = dict(page.evaluate("""() => [...document.querySelectorAll(
        "nav.md-nav--primary > ul > li.md-nav__item--section")].map(li => [
            li.querySelector(":scope > label, :scope > div").textContent.trim(),
            [...li.querySelectorAll(":scope > nav a.md-nav__link")].map(
                a => a.getAttribute("href"))])"""))
    order = list(sections)
    assert order.index("Concepts") < order.index("Notebooks") < order.index("Internals")
    assert sections["Internals"] == ["../concepts/autodiff/", "../concepts/floating-point/",
                                     "../concepts/array-dispatch/"]
    assert not _foreign(requests, server)


def _pages_with_math(site) -> list[str]:
    pages = sorted(p for p in (site / "concepts").glob("*/index.html")
                   if 'class="arithmatex"' in p.read_text(encoding="utf-8"))
    return [str(p.parent.relative_to(site)) + "/" for p in pages]


def test_math_is_typeset_on_a_concepts_page(site, page, server, requests):
    pages = _pages_with_math(site)
    assert pages, "no concepts page has math to typeset"
    path = "concepts/accumulation/" if "concepts/accumulation/" in pages else pages[0]
    _visit(page, server, path)
    page.wait_for_selector(".arithmatex .katex")
    math = page.locator(".arithmatex")
    assert math.count() == page.locator(".arithmatex .katex").count(), "untypeset math left"
    assert page.locator(".katex-error").count() == 0, "KaTeX could not parse some math"
    assert page.locator(".katex-display").count() > 0, "no display equation"
    text = page.locator("article").inner_text()
    assert "$$" not in text and "\\[" not in text and "\\(" not in text
    # KaTeX's own fonts, served by the site
    fonts = [url for url in requests if "/assets/katex/fonts/" in url]
    assert fonts, "KaTeX's fonts were not loaded from the site"
    page.locator(".katex-display").first.scroll_into_view_if_needed()
    if SHOTS:
        page.screenshot(path=str(Path(SHOTS) / "concepts.png"))
    assert not _foreign(requests, server)


def _notebook_pages(site) -> list[str]:
    return sorted(str(p.parent.relative_to(site)) + "/"
                  for p in (site / "notebooks").glob("[0-9][0-9]_*/index.html"))


def test_a_notebook_page_shows_its_images(site, page, server, requests):
    pages = _notebook_pages(site)
    assert pages, "no notebook was rendered"
    batchnorm = [p for p in pages if "batchnorm" in p.lower()]
    path = (batchnorm or pages)[0]
    _visit(page, server, path)
    images = page.locator(".jupyter-wrapper .jp-OutputArea-output img")
    assert images.count() > 0, f"{path} shows no figure"
    for i in range(images.count()):
        images.nth(i).scroll_into_view_if_needed()
        assert images.nth(i).evaluate("img => img.complete && img.naturalWidth") > 100
    link = page.locator("a[download]", has_text="Download the notebook")
    response = page.request.get(server + path + link.get_attribute("href"))
    assert response.ok and b'"cells"' in response.body()
    if SHOTS:
        images.first.scroll_into_view_if_needed()
        page.screenshot(path=str(Path(SHOTS) / "notebook.png"))
    assert not _foreign(requests, server)


def test_the_api_reference_lists_tensor_and_step(page, server, requests):
    _visit(page, server, "api/engine/")
    assert page.locator('[id="minigrad.engine.Tensor"]').is_visible()
    _visit(page, server, "api/accumulate/", shot="api")
    step = page.locator('[id="minigrad.accumulate.step"]')
    assert step.is_visible()
    assert "step" in step.inner_text()
    assert not _foreign(requests, server)


def test_search_finds_batchnorm(page, server, requests):
    _visit(page, server, "")
    search = page.locator("input.md-search__input")
    search.click()
    search.press_sequentially("BatchNorm", delay=30)  # keystrokes: Material reads keyup
    results = page.locator(".md-search-result__item")
    results.first.wait_for(timeout=20_000)
    assert results.count() > 0
    assert "batchnorm" in results.first.inner_text().lower()
    assert not _foreign(requests, server)


def test_the_dark_palette_toggles(page, server, requests):
    _visit(page, server, "")

    def scheme():
        return page.locator("body").get_attribute("data-md-color-scheme")

    def background():
        return page.evaluate("getComputedStyle(document.body).backgroundColor")

    assert scheme() == "default"
    light = background()
    page.locator("label[title='Switch to dark mode']").click()
    page.wait_for_function("document.body.dataset.mdColorScheme === 'slate'")
    page.wait_for_timeout(300)  # the colour transition
    assert background() != light
    page.locator("label[title='Switch to light mode']").click()
    page.wait_for_function("document.body.dataset.mdColorScheme === 'default'")
    assert not _foreign(requests, server)


def test_no_page_requests_anything_outside_127_0_0_1(site, page, server, requests):
    for html in sorted(site.rglob("index.html")):
        folder = html.parent.relative_to(site).as_posix()
        _visit(page, server, "" if folder == "." else folder + "/")
    assert len(requests) > 50
    foreign = _foreign(requests, server)
    assert not foreign, f"requests left 127.0.0.1: {sorted(set(foreign))}"
