"""The graph drawing: one box per node with its op (or name) and shape, one arrow per input,
colours by kind, the output at the right."""

import matplotlib

matplotlib.use("Agg")

import numpy as np  # noqa: E402
import pytest  # noqa: E402

from minigrad import Tensor, nn  # noqa: E402
from minigrad.engine.introspect import nodes  # noqa: E402
from minigrad.nn import functional as F  # noqa: E402
from minigrad.studies.graphs import BOX_WIDTH, COLORS, XLABEL, draw_graph, layout  # noqa: E402


def parts(fig):
    ax = fig.axes[0]
    boxes = [t for t in ax.texts if t.get_gid() == "node"]
    arrows = [t for t in ax.texts if t.get_gid() == "edge"]
    assert len([p for p in ax.patches if p.get_gid() == "node"]) == len(boxes)
    return ax, boxes, arrows


def test_the_expression_is_drawn_box_by_box():
    a = Tensor([1.0, -2.0], requires_grad=True)
    b = Tensor([3.0, 4.0], requires_grad=True)
    c = Tensor([0.5, 0.5])
    fig = draw_graph((a * b + c).relu().sum(), {"a": a, "b": b, "c": c}, title="the title")
    ax, boxes, arrows = parts(fig)
    assert ax.get_title() == "the title" and ax.get_xlabel() == XLABEL
    assert [t.get_text() for t in boxes] == ["a\n(2,)", "b\n(2,)", "mul\n(2,)", "c\n(2,)",
                                             "add\n(2,)", "relu\n(2,)", "sum\nscalar"]
    assert len(arrows) == 6  # a, b -> mul; mul, c -> add; add -> relu; relu -> sum
    colors = [matplotlib.colors.to_hex(p.get_facecolor()) for p in ax.patches
              if p.get_gid() == "node"]
    assert colors == [COLORS["leaf with grad"]] * 2 + [COLORS["operation"],
                                                       COLORS["leaf without grad"]] \
        + [COLORS["operation"]] * 2 + [COLORS["output"]]
    assert [t.get_text() for t in ax.get_legend().get_texts()] == list(COLORS)
    # each arrow runs from the right edge of an input's box to the left edge of its consumer's
    centres = {t.get_text(): t.get_position() for t in boxes}
    ends = {(a.xyann, a.xy) for a in arrows}

    def edge(start, end):
        (x0, y0), (x1, y1) = centres[start], centres[end]
        return (x0 + BOX_WIDTH / 2, y0), (x1 - BOX_WIDTH / 2, y1)

    assert edge("a\n(2,)", "mul\n(2,)") in ends
    assert edge("relu\n(2,)", "sum\nscalar") in ends
    assert all(start[0] < end[0] for start, end in ends)


def test_the_layout_puts_each_node_left_of_its_consumers_and_never_on_another():
    model = nn.MLP([3, 4, 4, 2], seed=0)
    x = Tensor(np.ones((5, 3)))
    loss = F.mse_loss(model(x), np.zeros((5, 2)))
    listed = nodes(loss, dict(model.named_parameters()))
    where = layout(listed)
    for n in listed:
        for p in n.parents:
            assert where[p][0] < where[n.index][0]
    root_x = where[listed[-1].index][0]
    assert root_x == max(x for x, _ in where.values())
    for i, (x1, y1) in where.items():
        for j, (x2, y2) in where.items():
            if i < j and x1 == x2:
                assert abs(y1 - y2) >= 1.0 - 1e-12  # a unit apart in the same column
    fig = draw_graph(loss, dict(model.named_parameters()), title="MLP")
    _, boxes, arrows = parts(fig)
    assert len(boxes) == len(listed)
    assert len(arrows) == sum(len(n.parents) for n in listed)
    texts = [t.get_text().split("\n")[0] for t in boxes]
    assert {"0.weight", "2.bias", "4.weight", "linear", "relu"} <= set(texts)


def test_a_repeated_input_gets_two_arrows_and_an_existing_axis_is_used():
    import matplotlib.pyplot as plt
    fig, (left, right) = plt.subplots(1, 2)
    x = Tensor([2.0], requires_grad=True)
    out = draw_graph(x * x, {"x": x}, title="x * x", ax=right)
    assert out is fig and right.get_title() == "x * x"
    arrows = [t for t in right.texts if t.get_gid() == "edge"]
    assert len(arrows) == 2
    assert {a.arrow_patch.get_connectionstyle().rad for a in arrows} == {0.0, 0.5}
    assert not left.texts
    plt.close(fig)


def test_bad_arguments_come_from_introspect():
    with pytest.raises(TypeError, match="root must be a minigrad Tensor"):
        draw_graph(np.ones(2), title="t")
