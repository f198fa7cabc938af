"""The explorers' data (``minigrad.studies.explorers``): what the site's explorers show.

Each grid is computed here exactly as the site computes it (the default arguments) and
checked for what the Concepts pages say about it, against derived limits:

* rounding alone moves a gradient by at most ``bounds.gradient_bound`` (normwise, as
  ``max_rel``: max b / max |g|; as ``rel_error``: ``norm_training.gradient_limits``), so
  a rule that computes the full-batch gradient stays within it and a different gradient
  leaves it;
* parameter gaps are judged by ``pitfalls.compare``'s ratio to the trajectory bound (<= 1:
  within), the gradient gaps of the floating-point grid by its ratio to ``gradient_bound``.

The memory explorer exports the constants of ``memory.theoretical_peak``; ``formula_peak``
evaluates the formula from that export alone, as the page does, and must give
``theoretical_peak``'s bytes exactly.
"""

import itertools
import json
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from minigrad import accumulate, nn
from minigrad.analysis import bounds, memory, metrics
from minigrad.analysis.contrastive_bound import gradcache_bound
from minigrad.analysis.exact import to_exact, to_fractions
from minigrad.studies import explorers
from minigrad.studies.batchnorm import divergence as batchnorm_divergence
from minigrad.studies.batchnorm import explorer as batchnorm_explorer
from minigrad.studies.batchnorm import training as norm_training
from minigrad.studies.contrastive.explorer import contrastive_setup
from minigrad.studies.memory import explorer as memory_explorer
from minigrad.studies.normalisation import explorer as split_explorer
from minigrad.studies.precision import sums as precision
from minigrad.studies.step_accounting import explorer as step_explorer
from minigrad.studies.step_accounting import pitfalls
from minigrad.studies.tokens import bound as token_bound
from minigrad.studies.tokens import explorer as token_explorer
from minigrad.studies.tokens import training as token_training


@pytest.fixture(scope="module")
def grids():
    """Every explorer's data with the site's arguments, computed once."""
    return {name: explorers.load(name)() for name in explorers.EXPLORERS}


def cases(data):
    """``(values, case)`` of every case, values keyed by control name."""
    controls = data["controls"]
    for indices in itertools.product(*(range(len(c["values"])) for c in controls)):
        key = "|".join(map(str, indices))
        yield {c["name"]: c["values"][i] for c, i in zip(controls, indices)}, data["cases"][key]


def max_rel_limit(make, loss, x, y):
    """max b / max |g|: how far rounding alone may move ``max_rel`` (module docstring)."""
    per_item = bounds.per_item_gradients(make(), loss, x, y)
    items = loss.num_items(y)
    b = bounds.flat(bounds.gradient_bound(per_item, items, make().sizes,
                                          bounds.condition_number(make(), loss, x, y)).values())
    g = bounds.flat([sum(a[k] for a in per_item) / items for k in per_item[0]])
    return float(np.max(b) / np.max(np.abs(g)))


def test_every_grid_has_every_case_and_is_plain_json(grids):
    for name, data in grids.items():
        text = json.dumps(data, allow_nan=False)  # the page reads JSON: no NaN, no inf
        assert json.loads(text) == data, name
        if name != "memory":
            assert len(list(cases(data))) == len(data["cases"]), name


# ----- the split ---------------------------------------------------------------------------
def test_split_weights_by_hand():
    shares = split_explorer.split_weights([3, 1, 0])
    assert shares["items"] == [Fraction(3, 4), Fraction(1, 4), 0]
    assert shares["textbook"] == [Fraction(1, 3), Fraction(1, 3), 0]


@pytest.mark.parametrize("sizes", [[1, 5], [2, 2, 2], [3, 1, 2], [6]])
@pytest.mark.parametrize("rule, key", [("items", "items"), ("micro_batch_mean", "textbook")])
def test_the_shares_rebuild_the_accumulated_gradient_exactly(sizes, rule, key):
    """In Fractions (no rounding): sum_j share_j * mean_j == what accumulation computes."""
    rng = np.random.default_rng(0)
    x, y = to_fractions(rng.normal(size=(6, 3))), to_fractions(rng.normal(size=(6, 2)))
    loss = nn.MSELoss()

    def make():
        return to_exact(nn.MLP([3, 4, 2], seed=0))

    means, items = [], []
    for _, xj, yj in accumulate.micro_batches(x, y, sizes):
        means.append(accumulate.accumulated_gradients(make(), loss, xj, yj))
        items.append(loss.num_items(yj))
    shares = split_explorer.split_weights(items)[key]
    acc = accumulate.accumulated_gradients(make(), loss, x, y, sizes=sizes, normalize=rule)
    for name in acc:
        rebuilt = sum(share * mean[name] for share, mean in zip(shares, means))
        assert np.array_equal(rebuilt, acc[name]), name


@pytest.mark.parametrize("items, error, message", [
    ([2, -1], ValueError, r"items\[1\]"), ([0, 0], ValueError, r"at least one item"),
    ("12", TypeError, "sequence of item counts")])
def test_split_weights_refuses_by_name(items, error, message):
    with pytest.raises(error, match=message):
        split_explorer.split_weights(items)


def test_split_grid_item_weighted_is_rounding_and_textbook_is_not_where_shares_differ(grids):
    data = grids["split"]
    limits = {}
    for values, case in cases(data):
        n, m, ignored = values["batch"], values["micro"], values["ignored"]
        assert case["sizes"] == accumulate.split_sizes(n, micro_batch_size=min(m, n))
        assert sum(case["items"]) == n - int(ignored * n)
        shares = split_explorer.split_weights(case["items"])
        for rule in shares:
            assert [Fraction(s["text"]) for s in case["shares"][rule]] == shares[rule]
            assert [s["value"] for s in case["shares"][rule]] == [float(s) for s in shares[rule]]
        if (n, ignored) not in limits:
            setup = split_explorer.split_setup(n, ignored)
            limits[n, ignored] = max_rel_limit(*(setup[k] for k in ("make", "loss", "x", "y")))
        limit = limits[n, ignored]
        assert case["max_rel"]["items"] <= limit, values
        if shares["items"] == shares["textbook"]:
            assert case["max_rel"]["micro_batch_mean"] <= limit, values
        else:
            assert case["max_rel"]["micro_batch_mean"] > limit, values


# ----- BatchNorm -------------------------------------------------------------------------------
def test_batchnorm_grid_diverges_and_the_remedies_stay_at_rounding(grids):
    data = grids["batchnorm"]
    limits = {}
    for values, case in cases(data):
        n, m = values["batch"], values["micro"]
        rows = case["rows"]
        if n not in limits:
            setup = batchnorm_explorer.batchnorm_setup(n, data["updates"])
            x, y = setup["batches"][0]
            limits[n] = {norm: norm_training.gradient_limits(setup["factory"](norm),
                                                             setup["loss"], x, y)
                         for norm in ("batch", "group", "layer")}
        for norm, limit in (("exact", "batch"), ("group", "group"), ("layer", "layer")):
            assert rows[norm]["rel_error"] <= limits[n][limit]["rel_error"], (values, norm)
            assert rows[norm]["cosine"] >= limits[n][limit]["cosine"], (values, norm)
        if m >= n:  # one micro-batch: the same computation
            assert rows["batch"]["rel_error"] == 0.0 and rows["batch"]["running_var"] == 0.0
        else:
            assert rows["batch"]["rel_error"] > limits[n]["batch"]["rel_error"], values
            for stat in ("running_mean", "running_var"):
                assert rows["exact"][stat] < rows["batch"][stat], (values, stat)


def test_the_momentum_moves_the_running_statistics_only(grids):
    data = grids["batchnorm"]
    by_split = {}
    for values, case in cases(data):
        gradients = {norm: (row["rel_error"], row["cosine"]) for norm, row in case["rows"].items()}
        assert by_split.setdefault((values["batch"], values["micro"]), gradients) == gradients


def test_running_stat_gap_is_running_stat_drift_for_plain_accumulation():
    setup = batchnorm_explorer.batchnorm_setup(32, updates=2)
    make = setup["factory"]("batch", 0.3)
    drift = batchnorm_divergence.running_stat_drift(make, batchnorm_explorer._sgd, setup["loss"],
                                                   setup["batches"], 8)
    gap = batchnorm_explorer.running_stat_gap(make, setup["loss"], setup["batches"], 8)
    for stat in gap:
        assert gap[stat] == max(layer[stat]["max_rel"][-1] for layer in drift.values())


def test_batchnorm_explorer_refuses_micro_batches_of_one():
    with pytest.raises(ValueError, match=r"micro_batch_sizes must be >= 2.*\[1, 4\]"):
        batchnorm_explorer.batchnorm_explorer(micro_batch_sizes=(1, 4))


# ----- step accounting ---------------------------------------------------------------------
def test_step_grid_accumulation_is_within_the_bound_and_each_mistake_leaves_it(grids):
    for values, case in cases(grids["step-accounting"]):
        assert all(r <= 1.0 for r in case["accumulated_ratio"]), values
        if values["optimizer"] == "sgd" and values["mistake"] == "adam_count":
            assert "needs optim.Adam or optim.AdamW" in case["refused"]
            continue
        assert "refused" not in case and case["mistake_ratio"][-1] > 1.0, values
        assert case["mistake"][-1] > case["bound"][-1], values


def test_step_explorer_refuses_unknown_names():
    with pytest.raises(ValueError, match="mistakes.*'none'"):
        step_explorer.step_accounting_explorer(mistakes=["none"])
    with pytest.raises(ValueError, match="optimizers.*'rmsprop'"):
        step_explorer.step_accounting_explorer(optimizers=["rmsprop"])


def test_step_explorer_runs_what_pitfalls_compare_runs():
    setup = step_explorer.step_accounting_setup(batch_size=8, updates=2)
    data = step_explorer.step_accounting_explorer(optimizers=["adam"], mistakes=["clipping"],
                                                  num_micro_batches=[2], batch_size=8, updates=2)
    adam = step_explorer.STEP_OPTIMIZERS["adam"][1]
    result = pitfalls.compare(setup["make"], adam, setup["loss"], setup["batches"], [4, 4],
                              mistakes=["clipping"], max_grad_norm=0.05,
                              make_scheduler=setup["schedule"])
    case = data["cases"]["0|0|0"]
    assert case["mistake"] == result["gap"]["clipping"] and case["bound"] == result["bound"]


# ----- floating point ----------------------------------------------------------------------
def test_floating_point_grid_is_within_the_bound_for_every_split(grids):
    bound = {}
    for values, case in cases(grids["floating-point"]):
        assert case["ratio"] <= 1.0 and case["gap"] <= case["bound"], values
        assert bound.setdefault(values["dtype"], case["bound"]) == case["bound"]  # no k in it
        assert case["max_ulp"] >= case["gap_ulps"], values
        if values["micro"] == 1:
            assert case["gap"] == 0.0  # one micro-batch: the same computation


# ----- memory: the page's formula, from the exported constants ----------------------------
def formula_peak(formula, widths, dtype, optimizer, loss, sizes):
    """``memory.theoretical_peak`` evaluated from ``memory_explorer``'s export alone, step
    for step as ``docs/javascripts/explorers.js`` evaluates it."""
    s, opt = formula["itemsize"][dtype], formula["optimizers"][optimizer]
    hidden, outs, classes = widths[1:-1], widths[1:], widths[-1]
    params, grads = [], []
    for d_in, d_out in zip(widths[:-1], widths[1:]):
        params += [s * d_in * d_out, s * d_out]
        grads.append(s * (d_in * d_out + d_out))
    total, largest = sum(grads), max(params)
    peak = total + opt["t"] * min(largest, s * formula["chunk"]) + opt["r"] * total
    for n, later in {(n, j > 0) for j, n in enumerate(sizes)}:
        walk = [n * s * (2 * sum(hidden) + formula["head"][loss] * classes)]
        for i, d in enumerate(hidden):
            below, above = 2 * sum(hidden[:i]), sum(grads[i + 1:])
            walk.append(n * s * (below + 4 * d + classes) + above)
            walk.append(n * s * (below + 3 * d + 2 * outs[i + 1] + classes) + above)
        end = (2 * total + largest if later else total) + n * s * classes
        peak = max(peak, (total if later else 0) + max(walk), end)
    return peak


def library_peak(widths, dtype, optimizer, loss, n, m):
    model = nn.MLP(widths, seed=0, dtype=dtype)
    opt = memory_explorer.MEMORY_OPTIMIZERS[optimizer][1](model.parameters())
    return memory.theoretical_peak(model, memory_explorer.MEMORY_LOSSES[loss][1](), opt,
                                   np.zeros((n, widths[0]), dtype=dtype),
                                   accumulate.split_sizes(n, micro_batch_size=m))


@given(widths=st.lists(st.integers(1, 40), min_size=2, max_size=5),
       n=st.integers(1, 64), m=st.integers(1, 64),
       dtype=st.sampled_from(["float32", "float64"]),
       optimizer=st.sampled_from(list(memory_explorer.MEMORY_OPTIMIZERS)),
       loss=st.sampled_from(list(memory_explorer.MEMORY_LOSSES)))
def test_the_exported_formula_is_theoretical_peak(widths, n, m, dtype, optimizer, loss):
    formula = memory_explorer.memory_explorer()["formula"]
    sizes = accumulate.split_sizes(n, micro_batch_size=m)
    assert formula_peak(formula, widths, dtype, optimizer, loss, sizes) == \
        library_peak(widths, dtype, optimizer, loss, n, m)


@pytest.mark.parametrize("optimizer", list(memory_explorer.MEMORY_OPTIMIZERS))
def test_the_exported_state_is_what_update_memory_measures(optimizer):
    model = nn.MLP([4, 8, 3], seed=0)
    opt = memory_explorer.MEMORY_OPTIMIZERS[optimizer][1](model.parameters())
    x, y = np.zeros((6, 4)), np.arange(6) % 3
    measured = memory.update_memory(model, nn.CrossEntropyLoss(), opt, x, y,
                                    micro_batch_size=2)
    state = memory_explorer.memory_explorer()["formula"]["optimizers"][optimizer]["state"]
    assert measured["optimizer_state"] == state * measured["parameters"]


def test_memory_controls_cover_the_formula(grids):
    data = grids["memory"]
    controls = {c["name"]: c for c in data["controls"]}
    assert controls["optimizer"]["values"] == list(data["formula"]["optimizers"])
    assert controls["loss"]["values"] == list(data["formula"]["head"])
    assert controls["dtype"]["values"] == list(data["formula"]["itemsize"])
    assert controls["budget"]["values"] == sorted(controls["budget"]["values"])


# ----- contrastive ---------------------------------------------------------------------------
def test_contrastive_controls_and_negatives(grids):
    data = grids["contrastive"]
    assert [c["name"] for c in data["controls"]] == ["strategy", "micro", "batch"]
    assert data["controls"][0]["values"] == ["naive", "gradcache", "bank"]
    for values, case in cases(data):
        n, m = values["batch"], min(values["micro"], values["batch"])
        assert case["sizes"] == accumulate.split_sizes(n, micro_batch_size=m)
        assert case["negatives"] == {"naive": m - 1, "gradcache": n - 1,
                                     "bank": m + n - 1}[values["strategy"]], values


def test_contrastive_grid_gradcache_is_rounding_and_the_others_change_the_objective(grids):
    for values, case in cases(grids["contrastive"]):
        strategy, n, m = values["strategy"], values["batch"], values["micro"]
        if strategy == "gradcache" or (strategy == "naive" and m >= n):
            assert case["bound_ratio"] <= 1.0, values
        else:  # other negatives: another objective, far outside the rounding bound
            assert case["bound_ratio"] is None or case["bound_ratio"] > 1.0, values
            assert case["rel_error"] > 1e-3, values
        if strategy == "naive" and m >= n:  # one micro-batch: the same computation
            assert case["rel_error"] == 0.0


@pytest.mark.parametrize("index, strategy, m, n", [
    ("0|2|0", "naive", 4, 16), ("1|3|1", "gradcache", 8, 32), ("2|1|2", "bank", 2, 64)])
def test_contrastive_case_is_the_library_computation(grids, index, strategy, m, n):
    setup = contrastive_setup(n)
    make, loss, x, y = (setup[k] for k in ("make", "loss", "x", "y"))
    model, sizes = make(), accumulate.split_sizes(n, micro_batch_size=m)
    full = accumulate.accumulated_gradients(model, loss, x, y)
    if strategy == "bank":
        strategy = accumulate.Bank(size=n)
        accumulate.accumulated_gradients(model, loss, setup["warm"], y, sizes=sizes,
                                         strategy=strategy)
    acc = accumulate.accumulated_gradients(model, loss, x, y, sizes=sizes, strategy=strategy)
    bound, _ = gradcache_bound(model, loss, x, y)
    case = grids["contrastive"]["cases"][index]
    gap = metrics.vector_gap(bounds.flat(acc.values()), bounds.flat(full.values()))
    assert (case["rel_error"], case["cosine"]) == (gap["rel_error"], gap["cosine"])
    ratio = max(bounds.bound_ratio(np.abs(acc[p] - full[p]), bound[p]) for p in full)
    assert case["bound_ratio"] == (ratio if np.isfinite(ratio) else None)


# ----- precision -----------------------------------------------------------------------------
def test_precision_controls(grids):
    data = grids["precision"]
    controls = {c["name"]: c["values"] for c in data["controls"]}
    assert list(controls) == ["k", "dtype", "accumulate", "order"]
    assert controls["k"] == list(precision.KS)
    assert controls["dtype"] == ["float16", "bfloat16"]
    assert controls["accumulate"] == ["param", "float32", "kahan"]
    assert controls["order"] == ["sum_then_divide", "divide_then_sum"]


@pytest.mark.parametrize("k, dtype, accumulator, order", [
    (1, "float16", "param", "sum_then_divide"), (64, "bfloat16", "kahan", "divide_then_sum"),
    (1024, "float16", "float32", "divide_then_sum"), (256, "bfloat16", "param",
                                                       "sum_then_divide")])
def test_precision_case_is_what_minigrad_precision_prints(grids, k, dtype, accumulator, order):
    data = grids["precision"]
    index = [c["values"].index(v) for c, v in zip(data["controls"],
                                                  (k, dtype, accumulator, order))]
    row = precision.measure(k, accumulator, order, dtype)
    case = data["cases"]["|".join(map(str, index))]
    assert case == {name: row[name] for name in case}
    assert set(case) == {"relative_error", "bound_ratio", "model", "flushed"}


def test_precision_grid_is_within_its_bound(grids):
    for values, case in cases(grids["precision"]):
        if case["bound_ratio"] is not None:
            assert case["bound_ratio"] <= 1.0, values
        if values["order"] == "sum_then_divide":
            assert case["flushed"] == 0.0, values


# ----- token-level losses ------------------------------------------------------------------
FAR = 1e6  # "far beyond rounding": an error at least this many times the most rounding gives


def token_limit(setup, objective, splits):
    """max b / max|g_full|: the most rounding alone may give ``max_rel`` on the explorer's
    batch for ``objective`` and ``splits`` micro-batches (``bound.gradient_bound``)."""
    windows, make = setup["windows"], setup["make"]
    loss, y = token_training.LOSSES[objective], token_training.targets(windows, objective)
    b = bounds.flat(token_bound.gradient_bound(make(), loss, windows.x, y, splits).values())
    g = bounds.flat(accumulate.accumulated_gradients(make(), loss, windows.x, y).values())
    return float(np.max(b) / np.max(np.abs(g)))


def test_tokens_grid_item_weighted_is_rounding_and_textbook_is_not_where_counts_differ(grids):
    """Every case: its split, tokens and shares as ``token_shares`` gives them; the
    item-weighted rule within rounding's most; the textbook rule far beyond it where the
    micro-batches hold different token counts and within it where they hold the same;
    per-sequence averaging within it against its own full batch, and against the token
    mean only where every name has the same length (spread 0: the two objectives agree)."""
    data = grids["tokens"]
    assert [c["name"] for c in data["controls"]] == ["micro", "spread", "rule"]
    setups, limits = {}, {}
    for values, case in cases(data):
        m, spread, rule = values["micro"], values["spread"], values["rule"]
        if spread not in setups:
            setups[spread] = token_explorer.tokens_setup(spread)
        setup = setups[spread]
        sizes = accumulate.split_sizes(token_explorer.NAMES,
                                       micro_batch_size=min(m, token_explorer.NAMES))
        tokens = token_training.token_counts(setup["windows"], sizes)
        assert case["sizes"] == sizes and case["tokens"] == tokens, values
        shares = token_explorer.token_shares(tokens, sizes)
        assert [s["text"] for s in case["shares"]["rule"]] == [str(s) for s in shares[rule]]
        assert [s["text"] for s in case["shares"]["tokens"]] == [str(s) for s in
                                                               shares["tokens"]]
        for objective in token_training.LOSSES:
            if (spread, objective, len(sizes)) not in limits:
                limits[spread, objective, len(sizes)] = token_limit(setup, objective,
                                                                    len(sizes))
        own = token_training.RULES[token_explorer.RULE_KEYS[rule]][0]
        limit = limits[spread, own, len(sizes)]
        assert case["limit"] == pytest.approx(limit, rel=1e-12), values
        if rule == "textbook":
            assert case["max_rel"] == case["own_max_rel"], values
            if len(set(tokens)) > 1:
                assert case["max_rel"] > FAR * limit, values
            else:
                assert case["max_rel"] <= limit, values
            continue
        assert case["own_max_rel"] <= limit, values
        if rule == "items":
            assert case["max_rel"] == case["own_max_rel"], values
        elif spread == 0:  # per-sequence, every name of one length: the token mean again
            assert case["max_rel"] <= limit + limits[spread, "token mean", len(sizes)], values
        else:
            assert case["max_rel"] > FAR * limit, values


def test_token_shares_by_hand_and_refusals():
    shares = token_explorer.token_shares([6, 2], [1, 1])
    assert shares["items"] == [Fraction(3, 4), Fraction(1, 4)]
    assert shares["textbook"] == shares["per_sequence"] == [Fraction(1, 2)] * 2
    with pytest.raises(ValueError, match=r"tokens\[1\]"):
        token_explorer.token_shares([3, 0], [1, 1])
    with pytest.raises(ValueError, match="one entry per micro-batch"):
        token_explorer.token_shares([3, 4], [1])


def test_token_batches_spread_their_lengths():
    for spread in (0, 4, 8):
        names = token_explorer.batch_names(spread)
        lengths = sorted(len(name) for name in names)
        assert len(set(names)) == token_explorer.NAMES
        assert lengths[-1] - lengths[0] == spread
        assert sum(lengths) == pytest.approx(token_explorer.CENTRE * token_explorer.NAMES,
                                             abs=1)
