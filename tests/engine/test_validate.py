"""The one validation module: each kind of value judged the same everywhere, with messages
that name the argument, the value and what is allowed."""

from fractions import Fraction
from types import SimpleNamespace

import numpy as np
import pytest
from blobs import blobs

from minigrad import nn, optim
from minigrad.accumulate import split_sizes
from minigrad.engine import backend, validate
from minigrad.studies import data


def test_integer_accepts_numpy_integers_and_refuses_bools_and_floats():
    assert validate.integer("n", np.int64(4)) == 4
    assert type(validate.integer("n", np.int32(4))) is int
    assert validate.integer("n", np.asarray(7)) == 7  # a 0-d integer array is an index
    for bad in (True, np.bool_(True), 2.0, "3", None, np.asarray(2.0)):
        with pytest.raises(TypeError, match=r"^n must be an integer, got "):
            validate.integer("n", bad)


@pytest.mark.parametrize("value, low, high, message", [
    (0, 1, None, "k must be an integer >= 1, got 0"),
    (6, None, 5, "k must be an integer <= 5, got 6"),
    (6, 1, 5, r"k must be an integer in \[1, 5\], got 6"),
])
def test_integer_ranges(value, low, high, message):
    with pytest.raises(ValueError, match=message):
        validate.integer("k", value, low=low, high=high)


def test_positive_int():
    assert validate.positive_int("size", np.int64(3)) == 3
    with pytest.raises(ValueError, match="size must be a positive int, got 0"):
        validate.positive_int("size", 0)
    with pytest.raises(TypeError, match="size must be a positive int, got bool True"):
        validate.positive_int("size", True)


@pytest.mark.parametrize("value", [float("nan"), float("inf"), -float("inf"), -1e-300])
def test_real_refuses_non_finite_and_out_of_range(value):
    with pytest.raises(ValueError, match=r"lr must be a finite number with lr >= 0, got"):
        validate.real("lr", value)


def test_real_ranges_and_types():
    assert validate.real("x", np.float32(0.5)) == 0.5
    assert type(validate.real("x", np.float32(0.5))) is float
    assert validate.real("x", Fraction(1, 3)) == Fraction(1, 3)  # exact mode keeps it
    assert validate.real("x", -2, low=None) == -2.0
    with pytest.raises(ValueError, match=r"0 < eps <= 1"):
        validate.real("eps", 0.0, strict_low=True, high=1.0)
    with pytest.raises(ValueError, match=r"0 <= beta < 1"):
        validate.real("beta", 1.0, high=1.0, strict_high=True)
    with pytest.raises(ValueError, match=r"x must be a finite number with any value"):
        validate.real("x", float("nan"), low=None)
    for bad in (True, "0.1", None, [0.1], 1j):
        with pytest.raises(TypeError, match="x must be a real number"):
            validate.real("x", bad)


def test_probability_boolean_choice_optional_shape():
    assert validate.probability("p", 1) == 1.0
    with pytest.raises(ValueError, match=r"0 <= p <= 1"):
        validate.probability("p", 1.5)
    assert validate.boolean("flag", np.bool_(False)) is False
    with pytest.raises(TypeError, match="flag must be True or False, got int 1"):
        validate.boolean("flag", 1)
    assert validate.choice("norm", None, (None, "batch")) is None
    with pytest.raises(ValueError, match=r"norm must be one of None, 'batch', got 'Batch'"):
        validate.choice("norm", "Batch", (None, "batch"))
    with pytest.raises(ValueError, match="got True"):  # True == 1, but it is not the choice 1
        validate.choice("n", True, (1, 2))
    assert validate.optional(validate.positive_int, "g", None) is None
    assert validate.shape("s", 3) == (3,)
    assert validate.shape("s", [2, np.int64(3)]) == (2, 3)
    with pytest.raises(ValueError, match=r"s\[1\] must be a positive int, got 0"):
        validate.shape("s", (2, 0))
    with pytest.raises(ValueError, match="non-empty"):
        validate.shape("s", ())


# ----- the same input judged the same in every layer ------------------------------------------
SIZE_USERS = [
    ("split_sizes", lambda v: split_sizes(8, micro_batch_size=v)),
    ("Linear", lambda v: nn.Linear(v, 2)),
    ("BatchNorm1d", lambda v: nn.BatchNorm1d(v)),
    ("GroupNorm", lambda v: nn.GroupNorm(1, v)),
    ("LayerNorm", lambda v: nn.LayerNorm(v)),
    ("MLP", lambda v: nn.MLP([2, v, 1])),
    ("spirals", lambda v: data.spirals(n_samples=4, n_classes=2, seed=v)),
    ("Accumulator.every", lambda v: _accumulator(every=v)),
    ("step_decay", lambda v: optim.step_decay(0.1, v)),
]


def _accumulator(**kwargs):
    from minigrad.accumulate import Accumulator

    model = nn.MLP([2, 2, 1])
    return Accumulator(model, nn.MSELoss(), optim.SGD(model.parameters(), lr=0.1), **kwargs)


@pytest.mark.parametrize("name, build", SIZE_USERS, ids=[n for n, _ in SIZE_USERS])
def test_sizes_refuse_bools_and_floats_and_accept_numpy_ints_everywhere(name, build):
    with pytest.raises(TypeError, match="must be a positive int|must be an integer"):
        build(True)
    with pytest.raises(TypeError, match="must be a positive int|must be an integer"):
        build(2.0)
    build(np.int64(2))  # no error


@pytest.mark.parametrize("build", [
    lambda: nn.BatchNorm1d(3, eps=-1e-5),
    lambda: nn.LayerNorm(3, eps=float("nan")),
    lambda: nn.GroupNorm(1, 3, eps=-1.0),
    lambda: nn.BatchNorm1d(3, momentum=1.5),
    lambda: nn.Dropout(p=float("nan")),
    lambda: nn.MLP([2, 3, 1], dropout=-0.1),
    lambda: blobs(spread=float("inf")),
    lambda: data.digits(test_fraction=1.0),
])
def test_non_finite_and_out_of_range_values_are_refused(build):
    with pytest.raises(ValueError, match="must be a finite number"):
        build()


@pytest.mark.parametrize("build, name", [
    (lambda: nn.GroupNorm(0, 4), "num_groups"),
    (lambda: nn.GroupNorm(2, -4), "num_channels"),
    (lambda: nn.LayerNorm(0), "normalized_shape"),
    (lambda: nn.LayerNorm((2, -1)), r"normalized_shape\[1\]"),
    (lambda: nn.MLP([2, 0, 1]), r"sizes\[1\]"),
])
def test_zero_and_negative_sizes_are_refused(build, name):
    with pytest.raises(ValueError, match=f"^{name} must be a positive int"):
        build()


def test_out_of_memory_while_probing_a_namespace_is_not_blamed_on_it():
    # resolve_namespace probes xp with xp.asarray(0.0); a machine short of memory is no
    # reason to call the argument "not an array-API namespace".
    def starved(value):
        raise MemoryError("injected: no memory for one float")

    with pytest.raises(MemoryError, match="injected"):
        backend.resolve_namespace(SimpleNamespace(__name__="starved", asarray=starved))
    with pytest.raises(TypeError, match="xp must be an array-API namespace"):
        backend.resolve_namespace(SimpleNamespace(__name__="broken", asarray=None))
