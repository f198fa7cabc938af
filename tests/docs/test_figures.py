"""The notebooks' interactive figures: what the site draws is what the notebook computed.

``publish`` (minigrad.studies.interactive) gives a figure's data as a display output;
docs_hooks/notebooks.py turns it, with the PNG that follows, into a ``<div
class="minigrad-figure">`` holding that data unchanged, and a "static figure" toggle;
javascripts/figures.js draws it with the site's plotly.js. In a real browser, every trace of
each drawn figure must hold exactly the numbers and labels of the JSON embedded in the page,
and each axis its scale, label and ticks. No page may request anything outside 127.0.0.1 or
log an error. The site, the server and Chromium are the session's (``conftest.py``).
"""

from __future__ import annotations

import base64
import html
import importlib.util
import json
import os
import re
from pathlib import Path

import pytest
from mkdocs.exceptions import PluginError

ROOT = Path(__file__).resolve().parents[2]
SHOTS = os.environ.get("MINIGRAD_SITE_SHOTS")  # a folder for screenshots, if set
MIME = "application/vnd.minigrad.figure+json"
PAGES = {"02_same_as_a_big_batch": ["loss-curves", "gap-and-bound"],
         "06_memory_and_time": ["memory-breakdown", "backward-memory"],
         "12_recomputation": ["memory-against-work"],
         "13_token_level_losses": ["loss-curves", "gap-and-bound", "shares", "spread"]}

_spec = importlib.util.spec_from_file_location("figures_hook", ROOT / "docs_hooks/notebooks.py")
hook = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(hook)


# ----- the hook, on a notebook of its own ------------------------------------------------
def _notebook(*outputs):
    cell = {"cell_type": "code", "execution_count": 1, "id": "a", "metadata": {},
            "source": [], "outputs": list(outputs)}
    return json.dumps({"cells": [cell], "metadata": {}, "nbformat": 4,
                       "nbformat_minor": 5}).encode()


FIGURE = {"name": "tiny", "title": "", "rows": 1, "columns": 1, "panels": []}
PNG = {"output_type": "display_data", "metadata": {},
       "data": {"image/png": base64.b64encode(b"png").decode(), "text/plain": "<Figure>"}}
PUBLISHED = {"output_type": "display_data", "metadata": {},
             "data": {MIME: FIGURE, "text/plain": "[note]"}}
STREAM = {"output_type": "stream", "name": "stdout", "text": "printed\n"}


def test_the_hook_puts_the_figure_and_its_png_in_one_output():
    nb = json.loads(hook._static(_notebook(PUBLISHED, STREAM, PNG)))
    first, second = nb["cells"][0]["outputs"]
    assert second == STREAM
    page = first["data"]["text/html"]
    embedded = re.search(r'data-figure="([^"]*)"', page).group(1)
    assert json.loads(html.unescape(embedded)) == FIGURE
    assert f'src="data:image/png;base64,{PNG["data"]["image/png"]}"' in page
    assert '<details class="minigrad-figure-static">' in page  # closed: no `open`


def test_the_hook_refuses_a_figure_without_its_png():
    with pytest.raises(PluginError, match="no PNG follows publish"):
        hook._static(_notebook(PNG, PUBLISHED))
    with pytest.raises(PluginError, match="two figures of one notebook"):
        hook._static(_notebook(PUBLISHED, PNG, PUBLISHED, PNG))


# ----- the site, in a browser ------------------------------------------------------------
@pytest.fixture
def page(plotly_page):
    """The session's tab for pages drawn with plotly.js (``conftest.plotly_page``)."""
    return plotly_page


def _expected(figure):
    """The traces figures.js must draw: a graph per panel, a trace per series, in order."""
    return [[{"type": "bar" if series["kind"] == "bar" else "scatter",
              "name": series["label"] or "", "x": series["x"], "y": series["y"],
              "base": series.get("base")} for series in panel["series"]]
            for panel in figure["panels"]]


def _axes(figure):
    """Each graph's axes: name, scale, label and the ticks the figure set."""
    return [[[f"{letter}axis", panel[letter]["scale"], panel[letter]["label"],
              *((panel[letter]["ticks"] or {}).get(key) for key in ("values", "labels"))]
             for letter in "xy"] for panel in figure["panels"]]


DRAWN = """root => [...root.querySelectorAll('.js-plotly-plot')].map(graph => ({
  traces: graph.data.map(t => ({type: t.type, name: t.name, x: t.x, y: t.y,
                                base: t.base === undefined ? null : t.base})),
  axes: ['xaxis', 'yaxis'].map(k => [k, graph.layout[k].type, graph.layout[k].title.text,
                                     graph.layout[k].tickvals || null,
                                     graph.layout[k].ticktext || null]),
  colours: graph.data.map(t => t.line ? t.line.color : t.marker.color),
}))"""


@pytest.mark.parametrize("notebook", list(PAGES))
def test_each_figure_draws_exactly_the_notebooks_numbers(page, server, site, notebook):
    page.goto(f"{server}notebooks/{notebook}/", wait_until="networkidle")
    roots = page.locator(".minigrad-figure")
    assert roots.count() == len(PAGES[notebook])
    page.wait_for_function("[...document.querySelectorAll('.minigrad-figure')]"
                           ".every(el => el.dataset.state === 'drawn')")
    for i, name in enumerate(PAGES[notebook]):
        root = roots.nth(i)
        assert root.get_attribute("id") == f"figure-{name}"
        embedded = json.loads(root.get_attribute("data-figure"))
        assert embedded["name"] == name and embedded["panels"]
        drawn = root.evaluate(DRAWN)
        # every number, compared with ==
        assert [graph["traces"] for graph in drawn] == _expected(embedded)
        assert [graph["axes"] for graph in drawn] == _axes(embedded)
        static = page.locator(f"#figure-{name} + details.minigrad-figure-static")
        assert static.get_attribute("open") is None
        src = static.locator("img").get_attribute("src")
        assert src.startswith("data:image/png;base64,")
    if SHOTS and notebook.startswith("02"):
        page.add_style_tag(content=".md-header { visibility: hidden; }")
        Path(SHOTS).mkdir(parents=True, exist_ok=True)
        roots.nth(1).screenshot(path=str(Path(SHOTS) / "figure-02.png"))


def test_black_lines_take_the_text_colour_in_the_dark_palette(page, server, site):
    page.goto(f"{server}notebooks/02_same_as_a_big_batch/", wait_until="networkidle")
    root = page.locator("#figure-gap-and-bound")
    page.wait_for_function("document.querySelector('#figure-gap-and-bound').dataset.state")
    third = _expected(json.loads(root.get_attribute("data-figure")))[2]  # its third panel
    black = [i for i, t in enumerate(third) if t["name"] == "bound (ratio 1)"]
    assert len(black) == 1
    light = root.evaluate(DRAWN)[2]["colours"][black[0]]
    page.evaluate("document.body.setAttribute('data-md-color-scheme', 'slate')")
    page.wait_for_function("""([i, light]) => document.querySelectorAll(
        '#figure-gap-and-bound .js-plotly-plot')[2].data[i].line.color !== light""",
                           arg=[black[0], light])
    dark = root.evaluate(DRAWN)[2]["colours"][black[0]]
    fg = page.evaluate("getComputedStyle(document.body)"
                       ".getPropertyValue('--md-default-fg-color').trim()")
    assert dark == fg and light != dark
