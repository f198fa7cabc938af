"""``nn.Recompute``, ``Sequential.set_recompute`` and ``MLP(recompute=...)``: recomputation
changes memory and time, never a bit of the result.

* Exact: the recomputed block repeats the same operations in the same order on the same
  numbers, so every gradient (and the input's) is ``==`` the one without recomputation, in
  every namespace, with dropout, LayerNorm, GroupNorm, in training and eval mode, nested,
  and inside every accumulation strategy; BatchNorm's running statistics move ONCE.
* torch: the gradients equal ``torch.utils.checkpoint``'s within ``gradient_bound``; the
  running statistics equal torch's without checkpoint within a derived bound, and torch's
  checkpoint moves them twice (the documented difference).
* A block with a random generator of its own gets a wrong gradient with no error;
  ``check=True`` finds it. Errors name what is wrong; a failed backward changes nothing.
"""

import copy

import numpy as np
import pytest
from faults import check_all_or_nothing
from helpers import assert_same, to_np
from hypothesis import given
from hypothesis import strategies as st
from pairs import batch
from sigint import interrupt_each_line

from minigrad import accumulate, nn, optim
from minigrad.accumulate import Bank, Precision, accumulated_gradients
from minigrad.analysis.bounds import condition_number, gamma, gradient_bound, per_item_gradients
from minigrad.engine import Tensor, graph, is_grad_enabled, no_grad
from minigrad.nn import dropout
from minigrad.nn import functional as F


def data(xp, n=8, width=4, classes=3, seed=0):
    rng = np.random.default_rng(seed)
    return xp.asarray(rng.normal(size=(n, width))), xp.asarray(rng.integers(0, classes, n))


def grads(model):
    return {name: to_np(p.grad) for name, p in model.named_parameters()}


def backward(model, x, y):
    """One forward and backward pass: the parameters' gradients and the input's."""
    x = Tensor(x, requires_grad=True)
    F.cross_entropy(model(x), y).backward()
    return [grads(model), to_np(x.grad)]


def hidden(xp, n_in, n_out, norm, p, gen, seed):
    """Linear -> [norm] -> tanh -> [dropout], as one Sequential (an MLP's hidden layer)."""
    layers = [nn.Linear(n_in, n_out, generator=gen, xp=xp)]
    if norm == "layer":
        layers.append(nn.LayerNorm(n_out, xp=xp))
    elif norm == "group":
        layers.append(nn.GroupNorm(2, n_out, xp=xp))
    elif norm == "batch":
        layers.append(nn.BatchNorm1d(n_out, xp=xp))
    layers.append(nn.Tanh())
    if p:
        layers.append(nn.Dropout(p, seed=seed))
    return nn.Sequential(*layers)


def hand_built(xp, norm=None, p=0.5, wrap=lambda block: block, seed=3, dtype="float64"):
    """Two hidden blocks, each passed through ``wrap``, then a last Linear."""
    gen = np.random.default_rng(seed)
    model = nn.Sequential(wrap(hidden(xp, 4, 6, norm, p, gen, 1)),
                          wrap(hidden(xp, 6, 6, norm, p, gen, 2)),
                          nn.Linear(6, 3, generator=gen, xp=xp))
    return model.to(dtype=dtype) if dtype != "float64" else model


def nodes(root):
    return len(graph.topological_order(root))


# ----- 1. exact: the same bits with and without recomputation -------------------------------------
@given(norm=st.sampled_from([None, "layer", "group"]), p=st.sampled_from([0.0, 0.5]),
       widths=st.lists(st.integers(1, 6), min_size=1, max_size=3), training=st.booleans(),
       seed=st.integers(0, 2**16), n=st.integers(1, 6), choice=st.data())
def test_mlp_recompute_gives_the_gradients_bits(xp, norm, p, widths, training, seed, n, choice):
    which = choice.draw(st.one_of(st.just("all"),
                                  st.sets(st.integers(0, len(widths) - 1)).map(sorted)))
    sizes = [4, *widths, 3]
    plain = nn.MLP(sizes, norm=norm, dropout=p, seed=seed, xp=xp).train(training)
    again = nn.MLP(sizes, norm=norm, dropout=p, seed=seed, xp=xp, recompute=which)
    again.train(training)
    assert again.recompute_segments == again.blocks(which) == plain.blocks(which)
    x, y = data(xp, n, seed=seed)
    assert_same(backward(again, x, y), backward(plain, x, y))
    assert [m.calls for m in again if isinstance(m, nn.Dropout)] == \
        [m.calls for m in plain if isinstance(m, nn.Dropout)]  # one draw per forward
    # what it is for: a recomputed block is one node, its activations are not in the graph
    loss_plain = F.cross_entropy(plain(Tensor(x)), y)
    loss_again = F.cross_entropy(again(Tensor(x)), y)
    assert (nodes(loss_again) < nodes(loss_plain)) == bool(again.recompute_segments)


@pytest.mark.parametrize("training", [True, False], ids=["train", "eval"])
@pytest.mark.parametrize("norm", [None, "layer", "group"])
def test_the_recompute_wrapper_gives_the_gradients_bits(xp, norm, training):
    x, y = data(xp)
    plain = hand_built(xp, norm).train(training)
    wrapped = hand_built(xp, norm, wrap=nn.Recompute).train(training)
    blocks = hand_built(xp, norm)
    k = len(blocks[0])  # layers per hidden block
    segments = nn.Sequential(*blocks[0], *blocks[1], blocks[2]).train(training)
    segments.set_recompute([(0, k), (k, 2 * k)])
    nested = hand_built(xp, norm).train(training)
    nested = nn.Recompute(nn.Sequential(nn.Recompute(nested[0]), nested[1], nested[2]))
    expected = backward(plain, x, y)
    assert_same(backward(wrapped, x, y), expected)
    assert_same(backward(nested, x, y), expected)
    flat_names = backward(segments, x, y)  # names 0.0.weight -> 0.weight: compare in order
    assert_same([list(flat_names[0].values()), flat_names[1]],
                [list(expected[0].values()), expected[1]])


class Scaled(nn.Module):
    """tanh(a W^T) * b * scale: two Tensor arguments and a keyword that is not one."""

    def __init__(self, xp):
        super().__init__()
        self.layer = nn.Linear(4, 3, generator=7, xp=xp)

    def forward(self, a, b, scale=1.0):
        return self.layer(a).tanh() * b * scale


def test_several_arguments_each_get_their_gradient(xp):
    rng = np.random.default_rng(2)
    a0, b0 = xp.asarray(rng.normal(size=(5, 4))), xp.asarray(rng.normal(size=(5, 3)))
    results = []
    for wrap in (lambda m: m, nn.Recompute):
        module = wrap(Scaled(xp))
        a, b = Tensor(a0, requires_grad=True), Tensor(b0, requires_grad=True)
        module(a, b, scale=0.5).sum().backward()
        results.append([grads(module), to_np(a.grad), to_np(b.grad)])
    assert_same(results[1], results[0])


def train_steps(model, strategy, x, y, loss=None, updates=2, sizes=(3, 3, 2), make_opt=None):
    opt = (make_opt or (lambda p: optim.Adam(p, lr=0.01)))(model.parameters())
    for _ in range(updates):
        accumulate.step(model, loss or nn.CrossEntropyLoss(), opt, x, y, sizes=list(sizes),
                        strategy=strategy() if callable(strategy) else strategy)
    return to_np(model.state_dict())


@pytest.mark.parametrize("norm", [None, "group"])
@pytest.mark.parametrize("strategy", ["micro", "exact_batchnorm"])
def test_accumulated_training_with_recompute_is_bit_identical(xp, strategy, norm):
    x, y = data(xp)

    def run(recompute):
        return train_steps(nn.MLP([4, 6, 5, 3], norm=norm, dropout=0.5, seed=1, xp=xp,
                                  recompute=recompute), strategy, x, y)

    assert_same(run("all"), run(None))
    assert_same(run([1]), run(None))


def batchnorm_first(xp, wrap):
    """Linear -> BatchNorm1d -> tanh directly in the Sequential, then a hidden block that
    ``wrap`` may make recomputed, then a last Linear."""
    gen = np.random.default_rng(5)
    return nn.Sequential(nn.Linear(4, 6, generator=gen, xp=xp), nn.BatchNorm1d(6, xp=xp),
                         nn.Tanh(), wrap(hidden(xp, 6, 6, "layer", 0.5, gen, 1)),
                         nn.Linear(6, 3, generator=gen, xp=xp))


@pytest.mark.parametrize("strategy", ["micro", "exact_batchnorm"])
def test_batchnorm_beside_recomputed_blocks_is_bit_identical(xp, strategy):
    x, y = data(xp)
    expected = train_steps(batchnorm_first(xp, lambda b: b), strategy, x, y)
    assert_same(train_steps(batchnorm_first(xp, nn.Recompute), strategy, x, y), expected)
    flat = batchnorm_first(xp, lambda b: b)
    flat = nn.Sequential(*flat[:3], *flat[3], flat[4]).set_recompute([(3, 7)])
    got = list(train_steps(flat, strategy, x, y).values())
    assert_same(got, list(expected.values()))


def test_exact_batchnorm_refuses_a_batchnorm_inside_a_recompute_wrapper():
    x, y = data(np)
    model = nn.Sequential(nn.Recompute(hidden(np, 4, 6, "batch", 0.0, 0, 0)),
                          nn.Linear(6, 3, generator=1))
    opt = optim.SGD(model.parameters(), lr=0.1)
    with pytest.raises(TypeError, match=r"directly in the Sequential.*\['0\.1'\]"):
        accumulate.step(model, nn.CrossEntropyLoss(), opt, x, y, sizes=[4, 4],
                        strategy="exact_batchnorm")


class Counted(nn.Module):
    """The identity, counting its calls."""

    def __init__(self):
        super().__init__()
        self.calls = 0

    def forward(self, h):
        self.calls += 1
        return h


@pytest.mark.parametrize("strategy", ["micro", "exact_batchnorm", "precision"])
def test_every_strategy_recomputes_the_segments(strategy):
    x, y = data(np, n=6)
    x = np.asarray(x, dtype=np.float32) if strategy == "precision" else x
    model = nn.Sequential(nn.Linear(4, 5, generator=0), Counted(), nn.Tanh(),
                          nn.Linear(5, 3, generator=1)).set_recompute([(0, 3)])
    model = model.to(dtype="float32") if strategy == "precision" else model
    opt = optim.SGD(model.parameters(), lr=0.1)
    accumulate.step(model, nn.CrossEntropyLoss(), opt, x, y, sizes=[3, 3], strategy=strategy)
    assert model[1].calls == 4  # two micro-batches, each forward and recomputed


@pytest.mark.parametrize("run", [Precision("float32"), Precision("kahan")],
                         ids=["float32", "kahan"])
def test_precision_with_recompute_is_bit_identical(xp, run):
    x, y = data(xp)
    x = xp.astype(x, xp.float32)
    expected = train_steps(hand_built(xp, "layer", dtype="float32"), run, x, y)
    wrapped = hand_built(xp, "layer", wrap=nn.Recompute, dtype="float32")
    assert_same(train_steps(wrapped, run, x, y), expected)
    mlp = [nn.MLP([4, 6, 3], dropout=0.5, seed=2, xp=xp, dtype="float32", recompute=r)
           for r in (None, "all")]
    assert_same(train_steps(mlp[1], run, x, y), train_steps(mlp[0], run, x, y))


def test_emulated_float16_with_a_recomputed_block_is_bit_identical():
    x, y = data(np)
    x = x.astype(np.float32)
    run = Precision("float32", compute_dtype="float16")
    expected = train_steps(hand_built(np, "group", dtype="float32"), run, x, y)
    wrapped = hand_built(np, "group", wrap=nn.Recompute, dtype="float32")
    assert_same(train_steps(wrapped, run, x, y), expected)


def towers(xp, recompute):
    return nn.DualEncoder(
        nn.MLP([5, 8, 4], "tanh", norm="layer", dropout=0.25, seed=0, xp=xp, recompute=recompute),
        nn.MLP([5, 8, 4], "tanh", dropout=0.25, seed=1, xp=xp, recompute=recompute))


@pytest.mark.parametrize("strategy", ["naive", "gradcache", lambda: Bank(size=6)],
                         ids=["naive", "gradcache", "bank"])
def test_contrastive_strategies_with_recomputed_towers_are_bit_identical(xp, strategy):
    x, y = batch(9, xp=xp)
    loss = nn.InfoNCELoss(temperature=0.5, symmetric=True)

    def run(recompute):
        return train_steps(towers(xp, recompute), strategy, x, y, loss=loss, sizes=(4, 3, 2),
                           make_opt=lambda p: optim.SGD(p, lr=0.1, momentum=0.9))

    assert_same(run("all"), run(None))


@pytest.mark.parametrize("strategy", ["micro", "gradcache"])
def test_accumulated_gradients_with_recompute_are_bit_identical(xp, strategy):
    contrastive = strategy == "gradcache"
    x, y = batch(7, xp=xp) if contrastive else data(xp, n=7)
    loss = nn.InfoNCELoss(temperature=0.5) if contrastive else nn.CrossEntropyLoss()

    def make(recompute):
        if contrastive:
            return towers(xp, recompute)
        return nn.MLP([4, 6, 6, 3], norm="group", dropout=0.5, seed=4, xp=xp,
                      recompute=recompute)

    got = [accumulated_gradients(make(r), loss, x, y, sizes=[2, 5], strategy=strategy,
                                 step_index=3) for r in ("all", None)]
    assert_same(to_np(got[0]), to_np(got[1]))


# ----- 2. BatchNorm: the running statistics move once ---------------------------------------------
def test_batchnorm_inside_a_recomputed_block_moves_its_statistics_once(xp):
    x, y = data(xp)
    runs = [nn.MLP([4, 6, 6, 3], norm="batch", dropout=0.5, seed=2, xp=xp, recompute=r)
            for r in (None, "all")]
    results = [backward(m, x, y) for m in runs]
    assert_same(results[1], results[0])
    buffers = [to_np(dict(m.named_buffers())) for m in runs]
    assert_same(buffers[1], buffers[0])
    assert int(buffers[1]["1.num_batches_tracked"]) == 1
    # and under accumulation: once per micro-batch, as without recomputation
    runs = [nn.MLP([4, 6, 6, 3], norm="batch", seed=2, xp=xp, recompute=r)
            for r in (None, "all")]
    states = [train_steps(m, "micro", x, y) for m in runs]
    assert_same(states[1], states[0])
    assert int(states[1]["4.num_batches_tracked"]) == 2 * 3


def running_bound(x, w, b, momentum=0.1):
    """How far two float64 evaluations of ONE BatchNorm1d update from (0, 1) may be apart,
    for h = x W^T + b (N samples, d features); (mean bound, variance bound) per feature.

    Each evaluation computes h_i by an inner product, within gamma_{d+1} M_i, M = |x||W|^T +
    |b|; the batch mean, by a sum or by Welford's update (at most 3 roundings per sample),
    within e = gamma_{d+1+3N} max_i M_i. The centred c_i = h_i - mean are within 2e, so the
    unbiased variance sum c_i^2 / (N - 1) (squares, sum, division, Bessel's factor: at most
    3N + 2 roundings) within (4e sum|c_i| + 4N e^2 + gamma_{3N+2} sum c_i^2) / (N - 1). The
    update (1 - m) r + m s rounds 3 times more: gamma_3 ((1 - m)|r| + m|s|), r = 0 for the
    mean and 1 for the variance. Two evaluations: twice the sum.
    """
    n, d = x.shape
    h = x @ w.T + b
    c = h - h.mean(axis=0)
    s = (c * c).sum(axis=0) / (n - 1)
    e = gamma(d + 1 + 3 * n) * np.max(np.abs(x) @ np.abs(w).T + np.abs(b), axis=0)
    var_err = (4 * e * np.abs(c).sum(axis=0) + 4 * n * e * e
               + gamma(3 * n + 2) * (c * c).sum(axis=0)) / (n - 1)
    mean = 2 * (momentum * e + gamma(3) * momentum * np.abs(h.mean(axis=0)))
    var = 2 * (momentum * var_err + gamma(3) * ((1 - momentum) + momentum * s))
    return mean, var


def torch_copy(torch, model):
    """model's layers as a float64 torch.nn.Sequential with the same weights."""
    make = {nn.Linear: lambda m: torch.nn.Linear(m.in_features, m.out_features),
            nn.BatchNorm1d: lambda m: torch.nn.BatchNorm1d(m.num_features),
            nn.LayerNorm: lambda m: torch.nn.LayerNorm(m.normalized_shape),
            nn.GroupNorm: lambda m: torch.nn.GroupNorm(m.num_groups, m.num_channels),
            nn.Tanh: lambda m: torch.nn.Tanh()}
    copy_ = torch.nn.Sequential(*(make[type(m)](m) for m in model)).double()
    copy_.load_state_dict({k: torch.tensor(np.asarray(v)) for k, v in model.state_dict().items()})
    return copy_


def torch_forward(torch, reference, segments, x, checkpointed):
    """reference(x), with each (start, stop) run under torch's checkpoint if asked."""
    from torch.utils.checkpoint import checkpoint

    h, done = torch.tensor(x), 0
    for start, stop in segments:
        h = reference[done:start](h)
        block = reference[start:stop]
        h = checkpoint(block, h, use_reentrant=False) if checkpointed else block(h)
        done = stop
    return reference[done:](h)


def test_running_statistics_match_torch_and_torchs_checkpoint_moves_them_twice():
    torch = pytest.importorskip("torch", reason="torch is not installed (the oracle)")
    x, y = data(np, n=8)
    model = nn.MLP([4, 6, 3], activation="tanh", norm="batch", seed=2, recompute="all")
    references = [torch_copy(torch, model) for _ in range(3)]
    w, b = np.asarray(model[0].weight.data), np.asarray(model[0].bias.data)
    backward(model, x, y)
    for reference, checkpointed in zip(references[:2], (False, True)):
        out = torch_forward(torch, reference, model.recompute_segments, x, checkpointed)
        torch.nn.functional.cross_entropy(out, torch.tensor(y)).backward()
    plain, checkpointed, twice = (r[1] for r in references)
    twice(references[2][0](torch.tensor(x)))  # two training forwards of the same batch
    twice(references[2][0](torch.tensor(x)))
    ours = model[1]
    assert int(ours.num_batches_tracked) == int(plain.num_batches_tracked) == 1
    mean_bound, var_bound = running_bound(x, w, b)
    assert np.all(np.abs(ours.running_mean - plain.running_mean.numpy()) <= mean_bound)
    assert np.all(np.abs(ours.running_var - plain.running_var.numpy()) <= var_bound)
    # torch's checkpoint re-runs BatchNorm in training mode: its statistics move twice
    assert int(checkpointed.num_batches_tracked) == 2
    for name in ("running_mean", "running_var"):  # the same kernels on the same numbers
        assert torch.equal(getattr(checkpointed, name), getattr(twice, name)), name
        assert not torch.equal(getattr(checkpointed, name), getattr(plain, name)), name


# ----- 3. the gradients against torch's checkpoint ---------------------------------------------
@pytest.mark.parametrize("norm", ["layer", "group"])
def test_gradients_match_torchs_checkpoint_within_the_bound(norm):
    """Both compute the same per-item gradients in float64 and sum them over the batch in
    their own orders: ``gradient_bound`` (minigrad.analysis.bounds derives it) bounds how
    far two such evaluations may be apart. tanh keeps the data off ReLU's kink."""
    torch = pytest.importorskip("torch", reason="torch is not installed (the oracle)")
    x, y = data(np, n=10, seed=3)
    loss = nn.CrossEntropyLoss()
    model = nn.MLP([4, 8, 8, 3], activation="tanh", norm=norm, seed=5, num_groups=2,
                   recompute="all")
    reference = torch_copy(torch, model)
    ours, _ = backward(model, x, y)
    out = torch_forward(torch, reference, model.recompute_segments, x, checkpointed=True)
    torch.nn.functional.cross_entropy(out, torch.tensor(y)).backward()
    bound = gradient_bound(per_item_gradients(model, loss, x, y), loss.num_items(y),
                           model.sizes, condition_number(model, loss, x, y))
    theirs = dict(reference.named_parameters())
    assert ours.keys() == theirs.keys()
    for name, g in ours.items():
        assert np.all(np.abs(g - theirs[name].grad.numpy()) <= bound[name]), name


# ----- 4. a block with its own random generator: wrong without error; check=True finds it ---------
class FreshDropout(nn.Module):
    """A dropout drawing every mask from its own NumPy generator, as torch's global random
    state does without its checkpoint's RNG handling: a second forward draws other masks."""

    def __init__(self, p=0.5, seed=0):
        super().__init__()
        self.p, self.generator = p, np.random.default_rng(seed)

    def forward(self, h):
        keep = self.generator.random(h.shape) >= self.p
        return h * Tensor(h.xp.asarray(keep / (1.0 - self.p), dtype=h.dtype))


def fresh_model(wrap):
    gen = np.random.default_rng(1)
    block = nn.Sequential(nn.Linear(4, 6, generator=gen), nn.Tanh(), FreshDropout(seed=9))
    return nn.Sequential(wrap(block), nn.Linear(6, 3, generator=gen))


def test_a_generator_of_its_own_gives_a_wrong_gradient_and_check_finds_it():
    x, y = data(np)
    expected, _ = backward(fresh_model(lambda b: b), x, y)
    silent, _ = backward(fresh_model(nn.Recompute), x, y)  # no error
    assert silent.keys() == expected.keys()
    assert not np.array_equal(silent["0.0.weight"], expected["0.0.weight"])
    # outside the block the first forward's output is used: the same gradient there
    np.testing.assert_array_equal(silent["1.weight"], expected["1.weight"])
    model = fresh_model(lambda b: nn.Recompute(b, check=True))
    model[0].module[0].weight.grad = before = np.ones((6, 4))
    loss = F.cross_entropy(model(Tensor(x)), y)
    with pytest.raises(RuntimeError, match=r"check=True.*Sequential differs.*random generator"):
        loss.backward()
    assert model[0].module[0].weight.grad is before
    assert model[1].weight.grad is None
    direct = nn.Recompute(FreshDropout(), check=True)
    out = direct(Tensor(np.ones((3, 2)), requires_grad=True))
    with pytest.raises(RuntimeError, match="FreshDropout differs"):
        out.sum().backward()


@pytest.mark.parametrize("keyed", [False, True], ids=["counted", "keyed"])
def test_minigrads_dropout_under_recompute_is_exact(xp, keyed):
    x, y = data(xp)
    results = []
    for wrap in (lambda b: b, lambda b: nn.Recompute(b, check=True)):
        model = hand_built(xp, "layer", p=0.5, wrap=wrap)
        if keyed:
            with nn.dropout_keys(5, xp.arange(8)):
                loss = F.cross_entropy(model(Tensor(x)), y)
        else:
            loss = F.cross_entropy(model(Tensor(x)), y)
        loss.backward()  # outside the keys' block: Recompute puts them back for the block
        results.append(grads(model))
        assert dropout.current_keys() is None
        calls = [m.calls for _, m in model.named_modules() if isinstance(m, nn.Dropout)]
        assert calls == ([0, 0] if keyed else [1, 1])
    assert_same(results[1], results[0])
    assert np.any(results[0]["0.0.weight"] != 0)


# ----- 5. errors ----------------------------------------------------------------------------------
@pytest.mark.parametrize("value", [3, None, "Linear", lambda x: x])
def test_recompute_wraps_modules_only(value):
    name = type(value).__name__
    with pytest.raises(TypeError, match=f"Recompute wraps an nn.Module, got {name}"):
        nn.Recompute(value)


class Pair(nn.Module):
    def forward(self, h):
        return h, h


def test_a_module_returning_a_tuple_is_refused():
    with pytest.raises(TypeError, match="returns one Tensor; Pair returned tuple"):
        nn.Recompute(Pair())(Tensor(np.ones((2, 2)), requires_grad=True))


@pytest.mark.parametrize(("segments", "error", "text"), [
    ([(0, 2), (1, 3)], ValueError, r"non-overlapping.*got \(1, 3\) in \[\(0, 2\), \(1, 3\)\]"),
    ([(2, 3), (0, 1)], ValueError, r"sorted.*got \(0, 1\)"),
    ([(0, 4)], ValueError, r"stop <= 3 \(the layers\), got \(0, 4\)"),
    ([(1, 1)], ValueError, r"start < stop.*got \(1, 1\)"),
    ([(-1, 1)], ValueError, "segment start must be an integer >= 0, got -1"),
    ([0, 1], TypeError, r"\(start, stop\) pairs, got 0 in \[0, 1\]"),
    ([(0, 1, 2)], TypeError, r"pairs, got \(0, 1, 2\)"),
    ("01", TypeError, "pairs, got '01'"),
    (3, TypeError, "pairs, got 3"),
    ([("0", "1")], TypeError, "segment start must be an integer, got str '0'"),
    ([(0, 1.5)], TypeError, "segment stop must be an integer, got float 1.5"),
])
def test_set_recompute_refuses_bad_segments(segments, error, text):
    model = nn.Sequential(nn.Identity(), nn.ReLU(), nn.Identity()).set_recompute([(0, 1)])
    with pytest.raises(error, match=text):
        model.set_recompute(segments)
    assert model.recompute_segments == ((0, 1),)  # unchanged
    assert model.set_recompute([]).recompute_segments == ()


@pytest.mark.parametrize(("which", "error", "text"), [
    ("some", ValueError, "recompute must be one of None, 'none', 'all', got 'some'"),
    (1, TypeError, r"recompute must be 'all', 'none', None, or hidden-layer indices and "
                   r"\(first, last\) pairs, got 1"),
    ([(0, 1, 2)], TypeError, r"a run in recompute is a \(first, last\) pair .* got \(0, 1, 2\)"),
    ([(1, 0)], ValueError, r"a run in recompute must have first <= last, got \(1, 0\)"),
    ([(0, 1), 1], ValueError, r"the runs in recompute overlap: \[\(0, 1\), \(1, 1\)\]"),
    ([2], ValueError, r"hidden layer in recompute must be an integer in \[0, 1\], got 2"),
    ([0.5], TypeError, "hidden layer in recompute must be an integer, got float 0.5"),
])
def test_mlp_recompute_refuses_bad_choices(which, error, text):
    with pytest.raises(error, match=text):
        nn.MLP([3, 4, 4, 2], recompute=which)


def test_mlp_runs_of_hidden_layers_as_the_planner_returns_them():
    model = nn.MLP([3, 4, 4, 4, 2], recompute=[[0, 1], [2, 2]])
    assert model.recompute_segments == ((0, 4), (4, 6))
    assert model.blocks([2, (0, 1)]) == ((0, 4), (4, 6))  # sorted


def test_mlp_blocks():
    model = nn.MLP([3, 4, 4, 2], norm="layer", dropout=0.5)
    assert model.block_layers == ((0, 4), (4, 8))
    assert model.blocks() == model.blocks("all") == model.block_layers
    assert model.blocks(None) == model.blocks("none") == model.blocks([]) == ()
    assert model.blocks([1, 0, 1]) == model.block_layers  # sorted, once each
    with pytest.raises(ValueError, match=r"which must be one of.*got 'some'"):
        model.blocks("some")
    with pytest.raises(ValueError, match=r"hidden layer in which must be an integer in \[0, 1\], "
                                         r"got 7"):
        model.blocks([7])
    with pytest.raises(ValueError, match=r"MLP\[3, 2\] has no hidden layer to recompute"):
        nn.MLP([3, 2], recompute=[0])
    assert nn.MLP([3, 2], recompute="all").recompute_segments == ()


class Outside(nn.Module):
    """Uses a tensor that requires grad but is neither an argument nor a parameter."""

    def __init__(self, scale):
        super().__init__()
        self.layer, self.scale = nn.Linear(4, 3, generator=0), scale

    def forward(self, h):
        return self.layer(h) * self.scale


def test_an_outside_tensor_that_requires_grad_is_refused_and_nothing_changes():
    x, y = data(np)
    scale = Tensor(np.full(3, 2.0), requires_grad=True)
    model = nn.Sequential(nn.Linear(4, 4, generator=1), nn.Recompute(Outside(scale)))
    before = {name: np.full(p.shape, 0.5) for name, p in model.named_parameters()}
    for name, p in model.named_parameters():
        p.grad = before[name]
    loss = F.cross_entropy(model(Tensor(x)), y)
    with pytest.raises(RuntimeError, match=r"1 tensor\(s\) that require grad but are not among "
                                           r"the inputs.*shape \(3,\)"):
        loss.backward()
    assert all(p.grad is before[name] for name, p in model.named_parameters())
    assert scale.grad is None
    # the same tensor passed as an argument is fine
    block = nn.Recompute(nn.Linear(4, 3, generator=0))
    x = Tensor(x)
    (block(x) * scale).sum().backward()
    assert scale.grad is not None


def test_a_tensor_keyword_argument_that_requires_grad_is_refused():
    scale = Tensor(np.full(3, 2.0), requires_grad=True)
    module = nn.Recompute(Scaled(np))
    with pytest.raises(TypeError, match="keyword argument 'scale' is one: pass it as a "
                                        "positional argument"):
        module(Tensor(np.ones((2, 4)), requires_grad=True), Tensor(np.ones((2, 3))),
               scale=scale)
    assert scale.grad is None and module.layer.weight.grad is None
    with no_grad():  # nothing is recorded: the plain call
        module(Tensor(np.ones((2, 4))), Tensor(np.ones((2, 3))), scale=scale)


class InPlaceMean(nn.Module):
    """A buffer updated in place (``*=``, ``+=``), not replaced as BatchNorm's are."""

    def __init__(self, d):
        super().__init__()
        self.register_buffer("running_mean", np.zeros(d))

    def forward(self, x):
        if self.training:
            self.running_mean *= 0.9
            self.running_mean += 0.1 * np.mean(x.data, axis=0)
        return x


def test_a_buffer_updated_in_place_moves_once():
    """The state is put back from copies, so a layer that writes into its buffer moves it
    once, as without recomputation (found by review: references alone moved it twice)."""
    x = Tensor(np.ones((2, 3)))
    means = []
    for wrap in (lambda m: m, nn.Recompute):
        model = nn.Sequential(nn.Linear(3, 3, generator=1), InPlaceMean(3))
        wrap(model)(x).sum().backward()
        means.append(model[1].running_mean)
    assert np.array_equal(means[0], means[1])


class Constant(nn.Module):
    def __init__(self):
        super().__init__()
        self.layer = nn.Linear(2, 2, generator=0)

    def forward(self, h):
        return Tensor(np.ones((h.shape[0], 2)))  # depends on nothing that requires grad


def test_a_block_whose_output_is_constant_passes_no_gradient():
    h = Tensor(np.ones((3, 2)), requires_grad=True)
    out = nn.Recompute(Constant())(h)
    (out * h).sum().backward()
    plain = Tensor(np.ones((3, 2)), requires_grad=True)
    (Constant()(plain) * plain).sum().backward()
    assert np.array_equal(h.grad, plain.grad)


def test_a_dtype_change_at_the_block_input_keeps_the_bits():
    """A float32 layer, then a recomputed block that multiplies by a float64 parameter: the
    gradient reaching the float32 layer is not cast at the block's boundary, as without
    recomputation (found by review: the walk inside the block cast it)."""
    class Promote(nn.Module):
        def __init__(self):
            super().__init__()
            self.w = nn.Parameter(np.linspace(0.3, 1.7, 4))

        def forward(self, h):
            return h * self.w

    grads = []
    for wrap in (lambda m: m, nn.Recompute):
        first = nn.Linear(3, 4, generator=0, dtype="float32")
        model = nn.Sequential(first, wrap(Promote()))
        out = model(Tensor(np.linspace(-1, 1, 6, dtype=np.float32).reshape(2, 3)))
        (out * out).sum().backward()
        grads.append([first.weight.grad, first.bias.grad])
    assert all(np.array_equal(a, b) for a, b in zip(*grads))


class Shrinks(nn.Module):
    """Returns one row fewer on its second call."""

    def __init__(self):
        super().__init__()
        self.layer, self.calls = nn.Linear(2, 2, generator=0), 0

    def forward(self, h):
        self.calls += 1
        out = self.layer(h)
        return out if self.calls == 1 else out.sum(axis=0, keepdims=True)


def test_a_recomputed_output_of_another_shape_is_refused_without_check():
    out = nn.Recompute(Shrinks())(Tensor(np.ones((3, 2))))
    with pytest.raises(RuntimeError, match=r"recomputed forward of Shrinks returned \(1, 2\) "
                                           r"where the first returned shape \(3, 2\)"):
        out.sum().backward()


# ----- 6. all or nothing --------------------------------------------------------------------------
class FailsOnSecondCall(nn.Module):
    def __init__(self, error):
        super().__init__()
        self.error, self.calls = error, 0

    def forward(self, h):
        self.calls += 1
        if self.calls == 2:
            raise self.error
        return h


def failing_model(last):
    """BatchNorm and dropout in and around a recomputed block that ends with ``last``."""
    gen = np.random.default_rng(0)
    block = nn.Sequential(nn.Linear(4, 6, generator=gen), nn.BatchNorm1d(6), nn.Tanh(),
                          nn.Dropout(0.5, seed=2), last)
    return nn.Sequential(nn.Linear(4, 4, generator=gen), nn.BatchNorm1d(4),
                         nn.Dropout(0.5, seed=1), nn.Recompute(block),
                         nn.Linear(6, 3, generator=gen))


def state(model):
    """Everything a backward might change, as NumPy copies and plain values."""
    return {"grads": grads(model), "buffers": to_np(dict(model.named_buffers())),
            "calls": [m.calls for _, m in model.named_modules() if isinstance(m, nn.Dropout)],
            "keys": repr(dropout.current_keys()), "grad mode": is_grad_enabled()}


@pytest.mark.parametrize("error", [ValueError("boom"), KeyboardInterrupt()],
                         ids=["error", "interrupt"])
@pytest.mark.parametrize("where", ["plain", "keys", "no_grad"])
def test_a_failing_recomputation_leaves_everything_as_before(error, where):
    x, y = data(np)
    model = failing_model(FailsOnSecondCall(error))
    for p in model.parameters():
        p.grad = np.full(p.shape, 0.25)
    loss = F.cross_entropy(model(Tensor(x)), y)
    assert int(model[3].module[1].num_batches_tracked) == 1
    before = state(model)
    if where == "plain":
        with pytest.raises(type(error)):
            loss.backward()
        assert_same(state(model), before)
        return
    context = nn.dropout_keys(9, np.arange(8)) if where == "keys" else no_grad()
    with context:
        inside = state(model)
        with pytest.raises(type(error)):
            loss.backward()
        assert_same(state(model), inside)
    assert_same(state(model), before)


def recompute_training():
    """A model with BatchNorm and dropout in and around a recomputed block, after its
    forward pass with dropout keys (the graph is kept, so that a retry can walk it again).
    The backward runs outside the keys' block, as in accumulation, so that the state the
    recomputation puts in place differs from the state it must put back."""
    graph._grad_enabled, dropout._keys = True, None
    x, y = data(np, n=6)
    model = failing_model(nn.Identity())
    for p in model.parameters():
        p.grad = np.full(p.shape, 0.25)
    with nn.dropout_keys(3, np.arange(6)):
        loss = F.cross_entropy(model(Tensor(x)), y)
    return model, loss


def fault_snapshot(s):
    return {"model": s[0], "grad_enabled": graph.is_grad_enabled(),
            "dropout_keys": dropout._keys}


def test_a_fault_anywhere_in_the_backward_leaves_everything_as_before_or_after():
    # The recomputation holds Ctrl-C from before it puts the first forward's state in place
    # to after it has put today's back (dropout keys included): no fault lands in between.
    check_all_or_nothing(recompute_training, lambda s: s[1].backward(retain_graph=True),
                         fault_snapshot)


def keyed_recompute():
    """A recomputed block with dropout, after its forward pass with dropout keys; small,
    as every line of its backward is interrupted in turn."""
    graph._grad_enabled, dropout._keys = True, None
    gen = np.random.default_rng(0)
    block = nn.Sequential(nn.Linear(3, 3, generator=gen), nn.Dropout(0.5, seed=2))
    model = nn.Sequential(nn.Recompute(block))
    for p in model.parameters():
        p.grad = np.full(p.shape, 0.25)
    with nn.dropout_keys(3, np.arange(4)):
        loss = model(Tensor(gen.normal(size=(4, 3)))).sum()
    return model, loss


def test_a_real_ctrl_c_anywhere_in_the_backward_leaves_everything_as_before_or_after():
    # the keys the recomputation puts in place and takes away included
    assert interrupt_each_line(keyed_recompute, lambda s: s[1].backward(),
                               fault_snapshot) > 500


def test_a_failing_recomputation_inside_a_step_leaves_everything_as_before():
    x, y = data(np)
    model = failing_model(FailsOnSecondCall(KeyboardInterrupt()))
    opt = optim.Adam(model.parameters(), lr=0.1)
    before = [state(model), to_np(model.state_dict()), opt.step_count]
    with pytest.raises(KeyboardInterrupt):
        accumulate.step(model, nn.CrossEntropyLoss(), opt, x, y, sizes=[5, 3])
    assert_same([state(model), to_np(model.state_dict()), opt.step_count], before)


# ----- 7. names, state, attributes, modes ---------------------------------------------------------
def test_names_and_order_pass_through():
    inner = hidden(np, 4, 6, "batch", 0.5, 0, 1)
    wrapped = nn.Recompute(inner)
    assert [n for n, _ in wrapped.named_parameters()] == [n for n, _ in inner.named_parameters()]
    assert all(a is b for a, b in zip(wrapped.parameters(), inner.parameters()))
    assert [n for n, _ in wrapped.named_buffers()] == [n for n, _ in inner.named_buffers()]
    assert wrapped.module is inner and list(wrapped.children()) == [inner]
    plain, rec = hand_built(np, "batch"), hand_built(np, "batch", wrap=nn.Recompute)
    assert list(rec.state_dict()) == list(plain.state_dict())
    mlps = [nn.MLP([3, 5, 5, 2], norm="batch", recompute=r) for r in (None, "all")]
    assert list(mlps[1].state_dict()) == list(mlps[0].state_dict())
    assert [n for n, _ in mlps[1].named_modules()] == [n for n, _ in mlps[0].named_modules()]


def test_state_dict_round_trip_between_wrapped_and_unwrapped():
    x, y = data(np)
    trained = hand_built(np, "batch", wrap=nn.Recompute)
    train_steps(trained, "micro", x, y)
    fresh = hand_built(np, "batch", seed=11)
    fresh.load_state_dict(trained.state_dict())
    assert_same(to_np(fresh.state_dict()), to_np(trained.state_dict()))
    back = hand_built(np, "batch", wrap=nn.Recompute, seed=12)
    back.load_state_dict(fresh.state_dict())
    assert_same(to_np(back.state_dict()), to_np(trained.state_dict()))
    with no_grad():
        outputs = [m.eval()(Tensor(x)).data for m in (trained, fresh, back)]
    assert np.array_equal(outputs[0], outputs[1]) and np.array_equal(outputs[0], outputs[2])


def test_attributes_modes_and_copies_pass_through():
    layer = nn.Linear(3, 4, generator=0)
    wrapped = nn.Recompute(layer)
    assert (wrapped.in_features, wrapped.out_features) == (3, 4)
    assert wrapped.weight is layer.weight and wrapped.check is False
    with pytest.raises(AttributeError, match="'Linear' object has no attribute 'nope'"):
        _ = wrapped.nope
    with pytest.raises(TypeError, match="check must be True or False, got int 1"):
        nn.Recompute(layer, check=1)
    assert wrapped.eval() is wrapped and not layer.training
    assert wrapped.train().training and layer.training
    shared = {id(layer.weight.xp): layer.weight.xp}  # namespaces are code: shared
    twin = copy.deepcopy(wrapped, shared)  # as analysis.memory copies a model
    assert twin.module is not layer and np.array_equal(twin.weight.data, layer.weight.data)
    x = Tensor(np.ones((2, 3)))
    twin(x).sum().backward()
    layer(x).sum().backward()
    assert np.array_equal(twin.weight.grad, layer.weight.grad)


def test_without_a_graph_it_is_the_plain_call():
    counted = Counted()
    block = nn.Recompute(nn.Sequential(nn.Linear(3, 2, generator=0), counted))
    x = Tensor(np.ones((2, 3)), requires_grad=True)
    with no_grad():
        out = block(x)
    assert not out.requires_grad and out.is_leaf and counted.calls == 1
    for p in block.parameters():
        p.requires_grad = False
    out = block(Tensor(np.ones((2, 3))))  # nothing requires grad: no node either
    assert not out.requires_grad and out.is_leaf and counted.calls == 2
    out = block(x)  # the input requires grad: one node, parents the input alone
    assert out._parents == (x,) and counted.calls == 3
    out.sum().backward()
    assert counted.calls == 4 and x.grad is not None
    assert all(p.grad is None for p in block.parameters())


def test_a_retained_graph_walked_twice_gives_twice_the_gradient(xp):
    x, y = data(xp)
    model = hand_built(xp, "group", wrap=nn.Recompute)
    loss = F.cross_entropy(model(Tensor(x)), y)
    loss.backward(retain_graph=True)
    once = grads(model)
    loss.backward()
    assert_same(grads(model), {k: g + g for k, g in once.items()})  # g + g is exact
    with pytest.raises(RuntimeError, match="already freed"):
        loss.backward()


def test_repr_shows_the_wrapped_module():
    wrapped = nn.Recompute(nn.Sequential(nn.Linear(2, 3, generator=0), nn.ReLU()))
    assert repr(wrapped) == ("Recompute(\n"
                             "  Sequential(\n"
                             "    (0): Linear(in_features=2, out_features=3, bias=True)\n"
                             "    (1): ReLU()\n"
                             "  )\n"
                             ")")
    outer = nn.Sequential(nn.Recompute(nn.Identity()))
    assert repr(outer) == "Sequential(\n  (0): Recompute(\n    Identity()\n  )\n)"


@pytest.mark.parametrize("strategy, norm, dtype", [("exact_batchnorm", "batch", "float64"),
                                                   ("precision", "layer", "float32")])
def test_strategies_that_walk_the_layers_keep_the_recomputed_runs_exact(strategy, norm, dtype):
    """exact BatchNorm (BatchNorm inside the recomputed runs, its statistics passed through
    them) and mixed precision (a storage point after every layer, inside the runs too) walk
    the layers themselves, through ``nn.layers.run_layers``: parameters and running
    statistics after two updates == without recomputation."""
    rng = np.random.default_rng(0)
    x, y = rng.normal(size=(12, 5)).astype(dtype), np.arange(12) % 3
    states = []
    for recompute in (None, "all", [1]):
        model = nn.MLP([5, 7, 7, 3], norm=norm, dropout=0.2, seed=1, recompute=recompute,
                       dtype=dtype)
        opt = optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
        for _ in range(2):
            accumulate.step(model, nn.CrossEntropyLoss(), opt, x, y, micro_batch_size=5,
                            strategy=strategy)
        states.append(to_np(model.state_dict()))
    assert_same(states[1], states[0])
    assert_same(states[2], states[0])
