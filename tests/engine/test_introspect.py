"""introspect: the nodes below a Tensor, the primitive that made each, and their inputs."""

import numpy as np
import pytest

from minigrad import Tensor, maximum, nn, primitive, take_along_axis
from minigrad.engine import embedding
from minigrad.engine.introspect import nodes, op_name
from minigrad.nn import functional as F


def test_a_small_expression_is_listed_inputs_first():
    a = Tensor([1.0, -2.0], requires_grad=True)
    b = Tensor([3.0, 4.0], requires_grad=True)
    c = Tensor([0.5, 0.5])
    listed = nodes((a * b + c).relu().sum(), {"a": a, "b": b, "c": c})
    assert [(n.op, n.name, n.parents) for n in listed] == [
        (None, "a", ()), (None, "b", ()), ("mul", None, (0, 1)), (None, "c", ()),
        ("add", None, (2, 3)), ("relu", None, (4,)), ("sum", None, (5,))]
    assert [n.index for n in listed] == list(range(7))
    assert [n.shape for n in listed] == [(2,)] * 6 + [()]
    assert [n.requires_grad for n in listed] == [True, True, True, False, True, True, True]
    assert listed[0].is_leaf and not listed[2].is_leaf


def test_a_shared_input_is_one_node_listed_twice_as_a_parent():
    x = Tensor([2.0], requires_grad=True)
    listed = nodes(x * x)
    assert len(listed) == 2 and listed[1].parents == (0, 0)


def test_a_diamond_lists_each_node_once_after_its_parents():
    x = Tensor([2.0, 3.0], requires_grad=True)
    s = x.exp()
    listed = nodes((s * 2.0 + s.tanh()).sum())
    assert sum(n.op == "exp" for n in listed) == 1
    for n in listed:
        assert all(p < n.index for p in n.parents)


def test_an_mlp_with_cross_entropy_names_every_primitive():
    model = nn.MLP([3, 4, 2], seed=0)
    x = Tensor(np.ones((5, 3)))
    loss = F.cross_entropy(model(x), np.zeros(5, dtype=np.int64))
    listed = nodes(loss, dict(model.named_parameters()) | {"x": x})
    ops = [n.op for n in listed if not n.is_leaf]
    assert ops == ["linear", "relu", "linear", "cross_entropy"]
    named = {n.name: n for n in listed if n.name}
    assert set(named) == {"x", "0.weight", "0.bias", "2.weight", "2.bias"}
    assert named["0.weight"].shape == (4, 3) and named["0.weight"].requires_grad
    assert not named["x"].requires_grad


@pytest.mark.parametrize("make, expected", [
    (lambda x, y: x - y, "add"),  # x + (-y): a neg node below it
    (lambda x, y: x / y, "div"),
    (lambda x, y: x ** 3, "pow"),
    (lambda x, y: 2.0 ** x, "rpow"),
    (lambda x, y: x @ y, "matmul"),
    (lambda x, y: x.log(), "log"),
    (lambda x, y: x.sqrt(), "sqrt"),
    (lambda x, y: x.reshape(4), "reshape"),
    (lambda x, y: x.T, "transpose"),
    (lambda x, y: maximum(x, y), "maximum"),
    (lambda x, y: take_along_axis(x, np.zeros((2, 1), dtype=np.int64)), "take_along_axis"),
    (lambda x, y: embedding(np.array([1, 0, 1]), x), "embedding"),
    (lambda x, y: F.sigmoid(x), "sigmoid"),
])
def test_op_names(make, expected):
    x = Tensor(np.full((2, 2), 1.5), requires_grad=True)
    y = Tensor(np.full((2, 2), 0.5), requires_grad=True)
    assert op_name(make(x, y)) == expected


def test_a_custom_primitive_has_the_name_it_is_given():
    def cube(x):
        return primitive(x.data ** 3, (x,), lambda g: g * 3 * x.data ** 2, name="my cube")

    assert op_name(cube(Tensor([2.0], requires_grad=True))) == "my cube"


def test_a_primitive_without_a_name_is_refused_by_name():
    x = Tensor([2.0], requires_grad=True)
    with pytest.raises(TypeError, match="required keyword-only argument: 'name'"):
        primitive(x.data, (x,), lambda g: g)
    for bad in ("", None, 3):
        with pytest.raises(TypeError, match=r"name of a primitive must be a non-empty str, "
                                            r"the operation a graph shows \(e.g. name='cube'\)"
                                            rf", got {type(bad).__name__} {bad!r}"):
            primitive(x.data, (x,), lambda g: g, name=bad)


def _every_primitive(x, y):
    """Each primitive of the package once, by the name a graph shows: name -> result."""
    from minigrad.accumulate.exact_batchnorm import GlobalStatistics
    from minigrad.accumulate.precision import rounded
    from minigrad.engine import linear
    from minigrad.engine.primitives import softmax

    stats = GlobalStatistics(nn.BatchNorm1d(2))
    stats.finish_stats([(2, np.zeros((1, 2)), np.full((1, 2), 2.0))])
    labels = np.zeros((2, 1), dtype=np.int64)
    return {
        "add": x + y, "neg": -x, "mul": x * y, "div": x / y, "pow": x ** 3, "rpow": 2.0 ** x,
        "exp": x.exp(), "log": x.log(), "sqrt": x.sqrt(), "tanh": x.tanh(), "relu": x.relu(),
        "sigmoid": F.sigmoid(x), "maximum": maximum(x, y),
        "sum": x.sum(), "reshape": x.reshape(4), "transpose": x.T,
        "take_along_axis": take_along_axis(x, np.zeros((2, 1), dtype=np.int64)),
        "embedding": embedding(np.array([1, 0, 1]), x),
        "matmul": x @ y, "linear": linear(x, y),
        "log_softmax": F.log_softmax(x),
        "cross_entropy": softmax.cross_entropy_rows(x, labels, None, "sum", None, (2,)),
        "recompute": nn.recompute(nn.Tanh(), x),
        "rounded": rounded(x, "float16"),
        "standardize": stats.standardize(x, (0,)),
    }


def test_every_primitive_of_the_package_carries_its_name():
    x = Tensor(np.full((2, 2), 1.5), requires_grad=True)
    y = Tensor(np.full((2, 2), 0.5), requires_grad=True)
    made = _every_primitive(x, y)
    assert len(made) == 25
    for name, out in made.items():
        assert op_name(out) == name
        assert nodes(out)[-1].op == name


def test_every_primitive_call_of_the_package_names_its_node_and_is_listed_above():
    """Each ``primitive(...)`` call in minigrad's source passes ``name=`` a string, and the
    names are those ``_every_primitive`` runs: a new primitive has to be added there."""
    import ast
    from pathlib import Path

    import minigrad

    names = []
    for path in Path(minigrad.__file__).parent.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "primitive":
                (name,) = [k.value for k in node.keywords if k.arg == "name"]
                assert isinstance(name, ast.Constant) and isinstance(name.value, str), path
                names.append(name.value)
    x = Tensor(np.full((2, 2), 1.5), requires_grad=True)
    assert sorted(names) == sorted(_every_primitive(x, x))


def test_the_name_is_the_node_s_own_not_read_from_its_backward():
    x = Tensor([1.0, 2.0], requires_grad=True)
    out = x * x
    out._backward = lambda g: (g, g)  # a closure defined here, named after this test
    assert op_name(out) == "mul"


def test_backward_frees_the_graph_unless_retained():
    x = Tensor([1.0, 2.0], requires_grad=True)
    kept = (x * x).sum()
    kept.backward(retain_graph=True)
    assert [n.op for n in nodes(kept)] == [None, "mul", "sum"]
    freed = (x * x).sum()
    freed.backward()
    assert [(n.op, n.parents) for n in nodes(freed)] == [("freed", ())]


def test_no_graph_under_no_grad_and_for_constants():
    from minigrad import no_grad

    x = Tensor([1.0], requires_grad=True)
    with no_grad():
        y = x * 2.0
    assert [n.op for n in nodes(y)] == [None]
    assert op_name(Tensor([1.0]) * 2.0) is None


def test_a_long_chain_needs_no_recursion():
    y = Tensor([1.0], requires_grad=True)
    for _ in range(5000):
        y = y * 1.0
    listed = nodes(y)
    assert len(listed) == 5001 + 5000  # x, each product and each lifted constant 1.0


def test_every_namespace(xp):
    a = Tensor(xp.asarray([1.0, 2.0]), requires_grad=True)
    listed = nodes((a * a).sum(), {"a": a})
    assert [(n.op, n.name) for n in listed] == [(None, "a"), ("mul", None), ("sum", None)]
    assert listed[0].dtype == str(a.dtype)


def test_bad_arguments_are_named():
    with pytest.raises(TypeError, match="root must be a minigrad Tensor, got ndarray"):
        nodes(np.ones(2))
    with pytest.raises(TypeError, match="tensor must be a minigrad Tensor, got list"):
        op_name([1.0])
    x = Tensor([1.0], requires_grad=True)
    with pytest.raises(TypeError, match="names must map names to Tensors"):
        nodes(x, [("x", x)])
    with pytest.raises(TypeError, match="names must map str names to Tensors, got 'x': "
                                        "ndarray"):
        nodes(x, {"x": np.ones(1)})
