"""Exact arithmetic: accumulated == full batch, with no tolerance at all.

Fractions make every operation exact, so the only possible difference between the two
computations is the one in the mathematics. Linear + ReLU + MSE + SGD is piecewise
rational, so the contract of DESIGN.md is an equality here, for EVERY split.
"""

from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from minigrad import nn, optim
from minigrad.accumulate import step
from minigrad.analysis.exact import gradients_equal, to_exact, to_fractions, trajectories_equal


@st.composite
def problems(draw):
    """A small ReLU MLP, data, and an arbitrary partition of the batch into micro-batches."""
    sizes = draw(st.lists(st.integers(1, 4), min_size=1, max_size=3))
    widths = [draw(st.integers(1, 3))] + sizes + [draw(st.integers(1, 2))]
    n = draw(st.integers(1, 8))
    cuts = sorted(draw(st.sets(st.integers(1, n - 1), max_size=n - 1))) if n > 1 else []
    split = [b - a for a, b in zip([0] + cuts, cuts + [n])]
    seed = draw(st.integers(0, 2**16))
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, widths[0]))
    y = rng.normal(size=(n, widths[-1]))
    return (lambda: nn.MLP(widths, seed=seed)), x, y, split


@given(problems())
def test_accumulated_gradient_equals_full_batch_for_every_split(problem):
    factory, x, y, split = problem
    equal, acc, full = gradients_equal(factory, x, y, split)
    assert equal
    assert all(isinstance(v, (Fraction, int)) for g in acc.values() for v in g.ravel())


@given(problems(), st.sampled_from([(0, 0, False, 0), (Fraction(9, 10), 0, False, 0),
                                    (Fraction(1, 2), Fraction(1, 4), False, Fraction(1, 100)),
                                    (Fraction(9, 10), 0, True, Fraction(1, 10))]))
def test_sgd_trajectories_are_equal_at_every_step(problem, hyper):
    factory, x, y, split = problem
    momentum, dampening, nesterov, weight_decay = hyper
    equal, acc, full = trajectories_equal(factory, [(x, y)] * 3, split, lr=Fraction(1, 10),
                                          momentum=momentum, dampening=dampening,
                                          nesterov=nesterov, weight_decay=weight_decay)
    assert equal
    assert acc.keys() == full.keys()


def one_weight_model():
    model = nn.Linear(1, 1, bias=False)
    model.weight.data = np.array([[1.0]])
    return model


ONE_WEIGHT_DATA = (np.array([[1.0], [2.0], [3.0]]), np.zeros((3, 1)))


def test_hand_computed_one_weight_model():
    # y_hat = w x with w = 1, data x = (1, 2, 3), targets 0: per-item MSE gradient 2 w x^2 =
    # 2, 8, 18; the mean is 28/3. Split [1, 2]: (2 + (8 + 18)) / 3 = 28/3 as well.
    x, y = ONE_WEIGHT_DATA
    equal, acc, full = gradients_equal(one_weight_model, x, y, [1, 2])
    assert equal
    assert full["weight"][0, 0] == Fraction(28, 3)


def test_textbook_normalisation_is_exactly_wrong_for_uneven_splits():
    # Same model and data: the textbook loop gives (2/1 + (8 + 18)/2) / 2 = 15/2, not 28/3.
    x, y = ONE_WEIGHT_DATA
    equal, acc, full = gradients_equal(one_weight_model, x, y, [1, 2], normalize="micro_batch_mean")
    assert not equal
    assert acc["weight"][0, 0] == Fraction(15, 2)
    assert full["weight"][0, 0] == Fraction(28, 3)


@given(problems())
def test_textbook_normalisation_is_exact_for_even_splits(problem):
    factory, x, y, _ = problem
    n = x.shape[0]
    k = next(d for d in (4, 3, 2, 1) if n % d == 0)
    equal, _, _ = gradients_equal(factory, x, y, [n // k] * k, normalize="micro_batch_mean")
    assert equal


def test_exact_step_keeps_fractions_and_counts_one_update():
    model = to_exact(nn.MLP([2, 3, 1], seed=1))
    opt = optim.SGD(model.parameters(), lr=Fraction(1, 8), momentum=Fraction(1, 2))
    x, y = to_fractions(np.ones((5, 2))), to_fractions(np.zeros((5, 1)))
    loss = step(model, nn.MSELoss(), opt, x, y, sizes=[2, 3])
    assert isinstance(loss, Fraction)
    assert opt.step_count == 1
    # Rational all the way: Fractions (or exact ints such as a ReLU's 0), never a float.
    assert all(isinstance(v, (Fraction, int)) for p in model.parameters() for v in p.data.ravel())


@pytest.mark.parametrize("layer", [nn.Tanh(), nn.LayerNorm(3), nn.Dropout(0.5)])
def test_non_piecewise_linear_layers_are_refused(layer):
    model = nn.Sequential(nn.Linear(2, 3), layer)
    with pytest.raises(TypeError, match="Linear and ReLU"):
        to_exact(model)


def test_exact_sgd_stays_exact_with_default_dampening_and_nesterov():
    # (1 - dampening) * g with the float default 0.0 would turn Fractions into floats from
    # the second update on; the optimizer makes integral floats exact instead.
    for hyper in ({"momentum": Fraction(9, 10)}, {"momentum": Fraction(1, 2), "nesterov": True},
                  {"momentum": Fraction(1, 2), "weight_decay": Fraction(1, 100)}):
        model = to_exact(nn.MLP([2, 3, 1], seed=2))
        opt = optim.SGD(model.parameters(), lr=Fraction(1, 8), **hyper)
        x, y = to_fractions(np.ones((4, 2))), to_fractions(np.zeros((4, 1)))
        for _ in range(3):
            step(model, nn.MSELoss(), opt, x, y, sizes=[1, 3])
        assert all(isinstance(v, (Fraction, int)) for p in model.parameters()
                   for v in p.data.ravel())
        assert all(isinstance(v, Fraction) for m in opt.state[0].mu for v in m.ravel())


def test_exact_mode_refuses_float_hyperparameters_and_square_roots():
    model = to_exact(nn.MLP([2, 3, 1], seed=2))
    with pytest.raises(TypeError, match=r"lr=0.1 is a float.*lr=Fraction\(1, 10\)"):
        optim.SGD(model.parameters(), lr=0.1)
    with pytest.raises(TypeError, match=r"momentum=0.9 is a float"):
        optim.SGD(model.parameters(), lr=Fraction(1, 10), momentum=0.9)
    with pytest.raises(TypeError, match="Adam needs square roots"):
        optim.Adam(model.parameters(), lr=Fraction(1, 10))
    opt = optim.SGD(model.parameters(), lr=1)  # an integral float or int is exact: kept
    assert opt.lr == 1
    with pytest.raises(TypeError, match="lr=0.5 is a float"):
        opt.lr = 0.5  # what a schedule returning floats would do
    assert opt.lr == 1
    opt.lr = Fraction(1, 2)
    assert opt.lr == Fraction(1, 2)


# ----- arguments that cannot be exact are refused, naming them --------------------------------
def test_to_exact_needs_a_module():
    with pytest.raises(TypeError, match="^model must be an nn.Module, got str$"):
        to_exact("model")


def test_to_fractions_converts_numbers_of_any_kind_exactly():
    values = to_fractions([0.1, 3, Fraction(1, 3), True])
    assert values.tolist() == [Fraction(3602879701896397, 2**55), 3, Fraction(1, 3), 1]
    assert to_fractions(np.array([False, True])).tolist() == [0, 1]


@pytest.mark.parametrize("a, error, message", [
    ([1.0, float("nan")], ValueError, "^a holds NaN or inf, which have no exact Fraction value$"),
    (np.array([[float("inf")]]), ValueError, "^a holds NaN or inf"),
    ([Fraction(1, 2), -float("inf")], ValueError, "^a holds NaN or inf"),
    ("abc", TypeError, "^a must hold real numbers, got str of dtype <U3$"),
    ([1.0, "2"], TypeError, "^a must hold real numbers, got list of dtype <U32$"),
    ([Fraction(1, 2), "2"], TypeError, "^a must hold real numbers, got str '2' in list$"),
    ([None], TypeError, "^a must hold real numbers, got NoneType None in list$"),
    ([1 + 2j], TypeError, "^a must hold real numbers, got list of dtype complex128$"),
    ([[1.0], [1.0, 2.0]], TypeError, "^a must be numbers or an array of them, got list: "),
])
def test_to_fractions_refuses_what_has_no_exact_value(a, error, message):
    with pytest.raises(error, match=message):
        to_fractions(a)


def counted(factory):
    """``factory`` that counts its calls in ``.calls``: a refused call builds no model."""
    def build():
        build.calls += 1
        return factory()
    build.calls = 0
    return build


X, Y = ONE_WEIGHT_DATA


@pytest.mark.parametrize("kwargs, error, message", [
    (dict(sizes=[2, 2]), ValueError, r"^micro-batch sizes \[2, 2\] must be positive and sum "
                                     "to the batch size 3$"),
    (dict(sizes=[0, 3]), ValueError, r"^sizes\[0\] must be a positive int, got 0$"),
    (dict(sizes=3), TypeError, "^sizes must be a sequence of positive ints, got int$"),
    (dict(normalize="mean"), ValueError, "^normalize must be one of 'items', 'micro_batch_mean', "
                                         "'sum', got 'mean'$"),
    (dict(x=X.tolist() + [[float("nan")]]), ValueError, "^x holds NaN or inf"),
    (dict(y=np.zeros((2, 1))), ValueError, "^x has 3 samples but y has 2$"),
])
def test_gradients_equal_checks_its_arguments_before_building_a_model(kwargs, error, message):
    factory = counted(one_weight_model)
    arguments = {"x": X, "y": Y, "sizes": [1, 2], **kwargs}
    with pytest.raises(error, match=message):
        gradients_equal(factory, **arguments)
    assert factory.calls == 0


@pytest.mark.parametrize("kwargs, error, message", [
    (dict(lr=float("nan")), ValueError, "^lr must be a finite number with lr >= 0, got nan$"),
    (dict(lr="0.1"), TypeError, "^lr must be a real number, got str '0.1'$"),
    (dict(momentum=-0.5), ValueError, "^momentum must be a finite number with momentum >= 0"),
    (dict(dampening=float("inf")), ValueError, "^dampening must be a finite number"),
    (dict(weight_decay=None), TypeError, "^weight_decay must be a real number, got NoneType"),
    (dict(nesterov=1), TypeError, "^nesterov must be True or False, got int 1$"),
    (dict(batches=[(X, Y, Y)]), TypeError, r"^batches\[0\] must be an \(x, y\) pair, got tuple$"),
    (dict(batches=[(X, Y), (X, [[float("inf")]] * 3)]), ValueError,
     r"^batches\[1\] y holds NaN or inf"),
    (dict(batches=[(X, Y), (X[:2], Y[:2])]), ValueError,
     "^micro-batch sizes .* sum to the batch size 2$"),
    (dict(batches=X), TypeError, r"^batches\[0\] must be an \(x, y\) pair, got ndarray$"),
    (dict(batches=None), TypeError, r"^batches must be a sequence of \(x, y\) pairs, got "
                                    "NoneType$"),
])
def test_trajectories_equal_checks_its_arguments_before_building_a_model(kwargs, error,
                                                                         message):
    factory = counted(one_weight_model)
    arguments = {"batches": [(X, Y)], "sizes": [1, 2], "lr": Fraction(1, 10), **kwargs}
    with pytest.raises(error, match=message):
        trajectories_equal(factory, **arguments)
    assert factory.calls == 0


@pytest.mark.parametrize("factory, given", [(one_weight_model(), "Linear"), (None, "NoneType")])
def test_a_model_instead_of_a_model_factory_is_refused(factory, given):
    message = (r"^model_factory must be a function returning a new model \(e.g. lambda: "
               rf"nn.MLP\(...\)\), got {given}$")
    with pytest.raises(TypeError, match=message):
        gradients_equal(factory, X, Y, [1, 2])
    with pytest.raises(TypeError, match=message):
        trajectories_equal(factory, [(X, Y)], [1, 2], lr=Fraction(1, 10))
