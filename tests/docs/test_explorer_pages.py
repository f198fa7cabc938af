"""The explorers of the Concepts pages, in a real browser: what they show is what minigrad
computed.

For each explorer every control is moved to at least two values; after each move the
figure (the data of the Plotly graph, read from the page) and the tables must show exactly
the case of the explorer's JSON for the controls' values (the memory planner: exactly the
bytes of ``memory.theoretical_peak`` for its configuration, and the micro-batch it picks).
A cell keeps its number in ``data-value``, compared with ``==``; its text must be that
number rounded to the digits it shows. No page may request anything outside 127.0.0.1 or
log an error. The site, the server and Chromium are the session's (``conftest.py``).
"""

from __future__ import annotations

import json
import os
from decimal import Decimal
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest

from minigrad import accumulate, nn
from minigrad.analysis import memory, planner
from minigrad.studies.memory import explorer as memory_explorer

SHOTS = os.environ.get("MINIGRAD_SITE_SHOTS")  # a folder for screenshots, if set

MIB = 2**20


@pytest.fixture
def page(plotly_page):
    """The session's tab for pages drawn with plotly.js (``conftest.plotly_page``)."""
    return plotly_page


def open_explorer(page, server, site, path, name):  # noqa: F811
    """Go to the page; return the explorer's data (its JSON, as served) and its selector."""
    page.goto(server + path, wait_until="networkidle")
    selector = f"#explorer-{name}"
    page.wait_for_function(f"document.querySelector('{selector}').dataset.state")
    page.locator(selector).scroll_into_view_if_needed()
    return json.loads((site / "assets" / "explorers" / f"{name}.json").read_text()), selector


def set_control(page, selector, name, value, index=None):
    """Move control ``name`` (to position ``index``, or type ``value``); wait for the redraw."""
    control = page.locator(f'{selector} [data-control="{name}"]')
    tag = control.evaluate("el => el.tagName + (el.type || '')")
    if tag == "SELECTselect-one":
        control.select_option(str(index))
    elif tag == "INPUTrange":
        control.fill(str(index))
    else:
        control.fill(value)
        control.press("Enter")
    page.wait_for_function(
        """([selector, name, value]) => {
             const state = document.querySelector(selector).dataset.state;
             return state && state !== "invalid"
               && JSON.stringify(JSON.parse(state)[name]) === JSON.stringify(value);
           }""", arg=[selector, name, value])


def figure(page, selector):
    """The plotted traces: name, x and y of each, as the graph holds them."""
    return page.evaluate("""selector => document.querySelector(selector + ' .explorer-figure')
        .data.map(t => ({name: t.name, x: Array.from(t.x), y: Array.from(t.y)}))""", selector)


def tables(page, selector):
    """Each table of the explorer: row key -> [(text, data-value or None), ...]."""
    return page.evaluate("""selector => Array.from(
        document.querySelectorAll(selector + ' .explorer-table table')).map(t => {
          const rows = {};
          t.querySelectorAll('tbody tr').forEach(tr => {
            rows[tr.dataset.row] = Array.from(tr.cells).map(
              td => [td.textContent, td.hasAttribute('data-value') ? td.dataset.value : null]);
          });
          return rows;
        })""", selector)


def shown(cell, value):
    """The cell holds ``value`` exactly and its text is ``value`` to the digits it shows."""
    text, exact = cell
    assert exact is not None and float(exact) == value, (cell, value)
    if "/" in text:
        assert float(Fraction(text)) == value, (cell, value)
        return
    printed = Decimal(text.split()[0])
    half_unit = Decimal(5).scaleb(printed.as_tuple().exponent - 1)
    assert abs(Decimal(value) - printed) <= half_unit, (cell, value)


def logged(values):
    """A log axis's data: zeros left out (None), as the page plots them."""
    return [None if v == 0 else v for v in values]


def walk(page, selector, data, moves, check):
    """Move each control through ``moves[name]`` (positions), ``check`` after every move."""
    state = page.evaluate("s => JSON.parse(document.querySelector(s).dataset.state)", selector)
    index = {c["name"]: c["values"].index(state[c["name"]]) for c in data["controls"]}
    check(index)
    for control in data["controls"]:
        for i in moves[control["name"]]:
            set_control(page, selector, control["name"], control["values"][i], i)
            index[control["name"]] = i
            check(index)


def case(data, index):
    return data["cases"]["|".join(str(index[c["name"]]) for c in data["controls"])]


def shoot(page, selector, name):
    """``MINIGRAD_SITE_SHOTS=DIR``: the explorer as ``DIR/explorer-NAME.png`` (the page's
    fixed header hidden, which would cover its top)."""
    if SHOTS:
        Path(SHOTS).mkdir(parents=True, exist_ok=True)
        page.add_style_tag(content=".md-header { visibility: hidden; }")
        page.locator(selector).screenshot(path=str(Path(SHOTS) / f"explorer-{name}.png"))


# ----- the grid explorers ----------------------------------------------------------------
def test_split_explorer_shows_its_cases(page, server, site):  # noqa: F811
    data, selector = open_explorer(page, server, site, "concepts/accumulation/", "split")
    shoot(page, selector, "split")

    def check(index):
        c = case(data, index)
        k = len(c["sizes"])
        bars = figure(page, selector)
        assert [t["x"] for t in bars] == [list(range(1, k + 1))] * 2
        assert bars[0]["y"] == [s["value"] for s in c["shares"]["textbook"]]
        assert bars[1]["y"] == [s["value"] for s in c["shares"]["items"]]
        errors, rows = tables(page, selector)
        for rule in ("items", "micro_batch_mean"):
            shown(errors[rule][1], c["max_rel"][rule])
        assert list(rows) == [str(j) for j in range(1, k + 1)]
        for j, row in enumerate(rows.values()):
            for cell, value in zip(row, [j + 1, c["sizes"][j], c["items"][j]]):
                shown(cell, value)
            for cell, rule in zip(row[3:], ("textbook", "items")):
                share = c["shares"][rule][j]
                assert cell[0] == share["text"]
                shown(cell, share["value"])

    walk(page, selector, data, {"batch": [0, 4], "micro": [0, 6], "ignored": [3, 0]}, check)


def test_split_explorer_redraws_in_the_dark_palette(page, server, site):  # noqa: F811
    data, selector = open_explorer(page, server, site, "concepts/accumulation/", "split")
    font = f"document.querySelector('{selector} .explorer-figure').layout.font.color"
    light, before = page.evaluate(font), figure(page, selector)
    page.locator("label[title='Switch to dark mode']").click()
    page.wait_for_function(f"{font} !== {json.dumps(light)}")
    assert figure(page, selector) == before


def test_batchnorm_explorer_shows_its_cases(page, server, site):  # noqa: F811
    data, selector = open_explorer(page, server, site, "concepts/batchnorm/", "batchnorm")
    sizes = data["controls"][1]["values"]
    norms = ("batch", "exact", "group", "layer")

    def check(index):
        c = case(data, index)
        along = [case(data, {**index, "micro": j}) for j in range(len(sizes))]
        traces = figure(page, selector)
        assert all(t["x"] == sizes for t in traces)
        for trace, norm in zip(traces, norms):
            assert trace["y"] == logged([a["rows"][norm]["rel_error"] for a in along])
        for trace, (norm, stat) in zip(traces[4:], [("batch", "running_var"),
                                                    ("exact", "running_var"),
                                                    ("batch", "running_mean"),
                                                    ("exact", "running_mean")]):
            assert trace["y"] == logged([a["rows"][norm][stat] for a in along])
        rows = tables(page, selector)[0]
        for norm in norms:
            row = c["rows"][norm]
            shown(rows[norm][1], row["rel_error"])
            shown(rows[norm][2], row["cosine"])
            for cell, stat in zip(rows[norm][3:], ("running_mean", "running_var")):
                if stat in row:
                    shown(cell, row[stat])
                else:
                    assert cell == ["no running statistics", None]

    walk(page, selector, data, {"batch": [0, 2], "micro": [0, 4], "momentum": [0, 3]}, check)


def test_step_accounting_explorer_shows_its_cases(page, server, site):  # noqa: F811
    data, selector = open_explorer(page, server, site, "concepts/step-accounting/",
                                   "step-accounting")

    def check(index):
        c = case(data, index)
        updates = list(range(1, len(c["bound"]) + 1))
        traces = figure(page, selector)
        series = [c["bound"], c["accumulated"]] + ([] if "refused" in c else [c["mistake"]])
        assert [t["x"] for t in traces] == [updates] * len(series)
        assert [t["y"] for t in traces] == [logged(s) for s in series]
        note = page.locator(f"{selector} .explorer-main .explorer-note").inner_text()
        assert note == ("Refused by minigrad: " + c["refused"] if "refused" in c else "")
        rows = tables(page, selector)[0]
        names = ["bound", "accumulated", "accumulated_ratio"]
        names += [] if "refused" in c else ["mistake", "mistake_ratio"]
        for u in updates:
            shown(rows[str(u)][0], u)
            for cell, name in zip(rows[str(u)][1:], names, strict=True):
                shown(cell, c[name][u - 1])

    # Adam's count with SGD first (refused), then every mistake with another optimizer
    walk(page, selector, data, {"optimizer": [0, 1], "mistake": [3, 5], "micro": [0, 3]}, check)


def test_floating_point_explorer_shows_its_cases(page, server, site):  # noqa: F811
    data, selector = open_explorer(page, server, site, "concepts/floating-point/",
                                   "floating-point")
    ks = data["controls"][1]["values"]

    def check(index):
        c = case(data, index)
        along = [case(data, {**index, "micro": j}) for j in range(len(ks))]
        traces = figure(page, selector)
        assert all(t["x"] == ks for t in traces)
        for trace, name in zip(traces, ("gap_ulps", "bound_ulps", "max_ulp"), strict=True):
            assert trace["y"] == logged([a[name] for a in along])
        rows = tables(page, selector)[0]
        for name in ("gap", "bound", "ratio", "max_ulp", "gap_ulps", "bound_ulps"):
            shown(rows[name][1], c[name])

    walk(page, selector, data, {"dtype": [1, 0], "micro": [0, 31]}, check)


def optional(cell, value, reason):
    """A number shown exactly, or (``None``: none was computed) the reason in words."""
    if value is None:
        assert cell == [reason, None]
    else:
        shown(cell, value)


def test_contrastive_explorer_shows_its_cases(page, server, site):  # noqa: F811
    data, selector = open_explorer(page, server, site, "concepts/contrastive/", "contrastive")
    shoot(page, selector, "contrastive")
    strategies, ms = (data["controls"][i]["values"] for i in (0, 1))

    def check(index):
        c = case(data, index)
        traces = figure(page, selector)
        assert len(traces) == 2 * len(strategies)
        assert all(t["x"] == ms for t in traces)
        for s in range(len(strategies)):
            along = [case(data, {**index, "strategy": s, "micro": j}) for j in range(len(ms))]
            assert traces[2 * s]["y"] == logged([a["rel_error"] for a in along])
            assert traces[2 * s + 1]["y"] == [a["negatives"] for a in along]
        note = page.locator(f"{selector} .explorer-main .explorer-note").inner_text()
        assert note == "Micro-batches of " + ", ".join(map(str, c["sizes"])) + " pairs."
        rows = tables(page, selector)[0]
        for name in ("negatives", "rel_error", "cosine"):
            shown(rows[name][1], c[name])
        optional(rows["bound_ratio"][1], c["bound_ratio"], "no finite ratio")

    walk(page, selector, data, {"strategy": [0, 2], "micro": [0, 5], "batch": [0, 2]}, check)


def test_precision_explorer_shows_its_cases(page, server, site):  # noqa: F811
    data, selector = open_explorer(page, server, site, "concepts/mixed-precision/",
                                   "precision")
    ks = data["controls"][0]["values"]
    accumulators = data["controls"][2]["values"]

    def check(index):
        c = case(data, index)
        traces = figure(page, selector)
        assert len(traces) == len(accumulators) + (c["model"] is not None)
        assert all(t["x"] == ks for t in traces)
        for a, trace in enumerate(traces[:len(accumulators)]):
            along = [case(data, {**index, "k": j, "accumulate": a}) for j in range(len(ks))]
            assert trace["y"] == logged([r["relative_error"] for r in along])
        if c["model"] is not None:
            along = [case(data, {**index, "k": j}) for j in range(len(ks))]
            assert traces[-1]["y"] == [r["model"] for r in along]
        rows = tables(page, selector)[0]
        optional(rows["relative_error"][1], c["relative_error"], "overflow")
        optional(rows["bound_ratio"][1], c["bound_ratio"], "no bound")
        optional(rows["model"][1], c["model"], "not modelled (Kahan)")
        shown(rows["flushed"][1], c["flushed"])

    walk(page, selector, data, {"k": [0, 5], "dtype": [1, 0], "accumulate": [2, 1],
                                "order": [1, 0]}, check)


def test_tokens_explorer_shows_its_cases(page, server, site):  # noqa: F811
    data, selector = open_explorer(page, server, site, "concepts/token-losses/", "tokens")
    shoot(page, selector, "tokens")
    ms, rules = data["controls"][0]["values"], data["controls"][2]["values"]

    def check(index):
        c = case(data, index)
        k = len(c["sizes"])
        traces = figure(page, selector)
        assert len(traces) == 2 + len(rules) + 1
        bars, curves, bound = traces[:2], traces[2:-1], traces[-1]
        assert [t["x"] for t in bars] == [list(range(1, k + 1))] * 2
        assert bars[0]["y"] == [s["value"] for s in c["shares"]["tokens"]]
        assert bars[1]["y"] == [s["value"] for s in c["shares"]["rule"]]
        assert all(t["x"] == ms for t in curves + [bound])
        for r, trace in enumerate(curves):
            along = [case(data, {**index, "micro": i, "rule": r}) for i in range(len(ms))]
            assert trace["y"] == logged([a["max_rel"] for a in along])
        along = [case(data, {**index, "micro": i}) for i in range(len(ms))]
        assert bound["y"] == [a["limit"] for a in along]
        note = page.locator(f"{selector} .explorer-main .explorer-note").inner_text()
        assert note == ("Micro-batches of " + ", ".join(map(str, c["sizes"])) +
                        " names, holding " + ", ".join(map(str, c["tokens"])) + " tokens.")
        errors, rows = tables(page, selector)
        for name in ("max_rel", "own_max_rel", "limit"):
            shown(errors[name][1], c[name])
        assert list(rows) == [str(j) for j in range(1, k + 1)]
        for j, row in enumerate(rows.values()):
            for cell, value in zip(row, [j + 1, c["sizes"][j], c["tokens"][j]]):
                shown(cell, value)
            for cell, part in zip(row[3:], ("tokens", "rule")):
                share = c["shares"][part][j]
                assert cell[0] == share["text"]
                shown(cell, share["value"])

    walk(page, selector, data, {"micro": [0, 6], "spread": [0, 4], "rule": [0, 2]}, check)


# ----- the memory planner: the page's formula against theoretical_peak ---------------------
def library_peaks(widths, n, optimizer, dtype, loss):
    """theoretical_peak for every micro-batch size 1..n, and the parameters' bytes."""
    model = nn.MLP(widths, seed=0, dtype=dtype)
    opt = memory_explorer.MEMORY_OPTIMIZERS[optimizer][1](model.parameters())
    x = np.zeros((n, widths[0]), dtype=dtype)
    peaks = [memory.theoretical_peak(model, memory_explorer.MEMORY_LOSSES[loss][1](), opt, x,
                                     accumulate.split_sizes(n, micro_batch_size=m))
             for m in range(1, n + 1)]
    return peaks, sum(p.data.nbytes for p in model.parameters())


def test_memory_planner_computes_what_minigrad_computes(page, server, site):  # noqa: F811
    data, selector = open_explorer(page, server, site, "concepts/memory/", "memory")
    shoot(page, selector, "memory")
    controls = {c["name"]: c for c in data["controls"]}
    states = data["formula"]["optimizers"]
    configs = [  # each control at two values at least; the last: nothing fits the budget
        ("784,256,256,10", 2048, "adam", "float64", "cross_entropy", 16 * MIB),
        ("32,64,64,10", 512, "adam", "float64", "cross_entropy", 16 * MIB),
        ("32,64,64,10", 512, "sgd", "float32", "mse", MIB),
        ("100,300,10", 4096, "nesterov", "float32", "mse", 2 * MIB),
        ("784,256,256,10", 64, "adamw", "float64", "cross_entropy", MIB),
    ]
    for config in configs:
        for name, value in zip(("sizes", "batch", "optimizer", "dtype", "loss", "budget"),
                               config):
            values = controls[name]["values"]
            set_control(page, selector, name, value, values.index(value) if value in values
                        and name != "sizes" else None)
        sizes, n, optimizer, dtype, loss, budget = config
        widths = [int(d) for d in sizes.split(",")]
        peaks, params = library_peaks(widths, n, optimizer, dtype, loss)
        fits = [m for m, p in enumerate(peaks, 1) if p <= budget]
        traces = {t["name"]: t for t in figure(page, selector)}
        assert traces["predicted peak"]["x"] == list(range(1, n + 1))
        assert [y * MIB for y in traces["predicted peak"]["y"]] == peaks
        assert traces["budget"]["y"] == [budget / MIB] * 2
        rows = tables(page, selector)[0]
        note = page.locator(f"{selector} .explorer-main .explorer-note").inner_text()
        columns = [(max(fits), peaks[max(fits) - 1])] if fits else []
        columns.append((n, peaks[-1]))
        if fits:
            m = max(fits)
            k = len(accumulate.split_sizes(n, micro_batch_size=m))
            assert note.startswith(f"The planner's choice: micro_batch_size={m}, {k} micro-")
            assert traces["chosen m"]["x"] == [m]
        else:
            least = min(peaks)
            assert note.startswith(f"No micro-batch size fits {planner.format_bytes(budget)}")
            assert f"(at micro_batch_size={peaks.index(least) + 1})" in note
            assert "chosen m" not in traces
        for j, (_, peak) in enumerate(columns, 1):
            state = states[optimizer]["state"] * params
            parts = {"parameters": params, "gradients": params, "state": state,
                     "activations": max(0, peak - 2 * params - state), "peak": peak}
            for name, value in parts.items():
                text, exact = rows[name][j]
                assert int(exact) == value, (name, j, config)
                assert text == planner.format_bytes(value) or in_binary_units(text, value)


def in_binary_units(text, size):
    """``text`` is ``size`` in the binary unit it names, to one decimal: where the exact
    binary value is a tie, JavaScript's toFixed rounds up and Python's format to even, so
    the two may differ in the last digit; both are within half a unit of it."""
    number, unit = text.split()
    scale = {"GiB": 2**30, "MiB": 2**20, "KiB": 2**10}[unit]
    return abs(Decimal(number) - Decimal(size) / scale) <= Decimal("0.05")


def test_memory_planner_refuses_layer_sizes_it_cannot_read(page, server, site):  # noqa: F811
    _, selector = open_explorer(page, server, site, "concepts/memory/", "memory")
    control = page.locator(f'{selector} [data-control="sizes"]')
    control.fill("784,,10")
    control.press("Enter")
    page.wait_for_function(f"document.querySelector('{selector}').dataset.state === 'invalid'")
    note = page.locator(f"{selector} .explorer-main .explorer-note").inner_text()
    assert note == ("layer sizes must list at least 2 positive integers separated by commas, "
                    "got '784,,10'")
    assert page.locator(f"{selector} .explorer-table table").count() == 0
