"""A drawing of the graph a Tensor recorded: one box per node, one arrow per input.

Data flows left to right as in the forward pass; ``backward()`` walks the arrows right to
left, from the output (orange) back to the leaves that require a gradient (green). Grey
leaves are inputs and constants without a gradient; blue boxes are primitives, named as
``minigrad.engine.introspect.op_name`` reads them, with the shape of their result.

>>> from minigrad import Tensor
>>> a, b = Tensor([1.0, 2.0], requires_grad=True), Tensor([3.0, 4.0], requires_grad=True)
>>> fig = draw_graph((a * b).sum(), {"a": a, "b": b}, title="a * b, summed")
>>> sorted(t.get_text() for t in fig.axes[0].texts if t.get_gid() == "node")
['a\\n(2,)', 'b\\n(2,)', 'mul\\n(2,)', 'sum\\nscalar']
"""

from __future__ import annotations

from minigrad.engine import introspect
from minigrad.studies.figures import axes, finish

COLORS = {
    "leaf with grad": "#b8e186",
    "leaf without grad": "#e0e0e0",
    "operation": "#a6cee3",
    "output": "#fdb863",
}
"""The fill of each kind of node (``kind``)."""
XLABEL = "forward pass, left to right (backward() walks the arrows right to left)"


def kind(node, root_index):
    """Which of ``COLORS`` a node is drawn as."""
    if node.index == root_index:
        return "output"
    if node.is_leaf:
        return "leaf with grad" if node.requires_grad else "leaf without grad"
    return "operation"


def label(node):
    """Two lines: the given name, else the op ("const" for an unnamed leaf); the shape."""
    first = node.name or node.op or ("leaf" if node.requires_grad else "const")
    shape = "scalar" if node.shape == () else str(node.shape)
    return f"{first}\n{shape}"


def layout(listed):
    """Index -> (x, y): the output sits at its depth (the longest chain of operations below
    it), every other node one column left of its first consumer; y spreads each column
    around the mean height of the nodes it feeds."""
    consumers = {n.index: [] for n in listed}
    depth = {}
    for n in listed:
        for p in n.parents:
            consumers[p].append(n.index)
        depth[n.index] = 1 + max((depth[p] for p in n.parents), default=-1)
    for n in reversed(listed):  # as late as possible: one column left of its first consumer
        if consumers[n.index]:
            depth[n.index] = min(depth[c] for c in consumers[n.index]) - 1
    lowest = min(depth.values())
    columns = {}
    for n in listed:
        columns.setdefault(depth[n.index] - lowest, []).append(n.index)
    y = {}
    for x in sorted(columns, reverse=True):  # from the output back: consumers are placed
        wanted = {i: sum(y[c] for c in consumers[i]) / len(consumers[i]) if consumers[i]
                  else 0.0 for i in columns[x]}
        ranked = sorted(columns[x], key=lambda i: (wanted[i], i))
        placed = []
        for i in ranked:  # at least one unit apart, as near the wanted height as that allows
            placed.append(max(wanted[i], placed[-1] + 1.0) if placed else wanted[i])
        shift = (sum(wanted.values()) - sum(placed)) / len(placed)
        y.update({i: p + shift for i, p in zip(ranked, placed)})
    return {n.index: (float(depth[n.index] - lowest), y[n.index]) for n in listed}


# Box size in data units: columns are 1 apart, rows at least 1 apart.
BOX_WIDTH = 0.6
"""A node's box width, in units of one column."""
BOX_HEIGHT = 0.5
"""A node's box height, in units of one row."""
INCHES_PER_COLUMN, INCHES_PER_ROW = 1.35, 0.8


def draw_graph(root, names=None, *, title, ax=None):
    """Draw the graph below ``root`` (``names`` as in ``introspect.nodes``); returns the
    figure. Draws into ``ax`` when given, else into a new figure sized to the graph.

    Boxes and arrows are laid out in data coordinates (an arrow runs from the right edge of
    an input's box to the left edge of its consumer's), so the drawing does not depend on
    the renderer or on how the figure is saved.
    """
    from matplotlib.patches import FancyBboxPatch, Patch

    listed = introspect.nodes(root, names)
    where = layout(listed)
    columns = max(x for x, _ in where.values()) + 1
    ys = [y for _, y in where.values()]
    rows = max(ys) - min(ys) + 1
    if ax is None:
        fig, (ax,) = axes(title, XLABEL, "", width=max(6.0, INCHES_PER_COLUMN * columns + 0.6),
                          height=INCHES_PER_ROW * (rows + 0.4) + 1.4)
    else:
        fig = ax.figure
        ax.set_xlabel(XLABEL)
    root_index = listed[-1].index
    for n in listed:
        x, y = where[n.index]
        ax.add_patch(FancyBboxPatch((x - BOX_WIDTH / 2, y - BOX_HEIGHT / 2), BOX_WIDTH,
                                    BOX_HEIGHT, boxstyle="round,pad=0,rounding_size=0.08",
                                    facecolor=COLORS[kind(n, root_index)],
                                    edgecolor="#555555", gid="node", zorder=2))
        ax.text(x, y, label(n), ha="center", va="center", fontsize=8.5, gid="node", zorder=3)
    for n in listed:
        seen = set()
        for p in n.parents:
            bend = 0.5 if p in seen else 0.0  # x * x: the second arrow curves
            seen.add(p)
            (x0, y0), (x1, y1) = where[p], where[n.index]
            ax.annotate("", xy=(x1 - BOX_WIDTH / 2, y1), xytext=(x0 + BOX_WIDTH / 2, y0),
                        gid="edge", zorder=1,
                        arrowprops={"arrowstyle": "-|>", "color": "#444444", "shrinkA": 0,
                                    "shrinkB": 0, "connectionstyle": f"arc3,rad={bend}"})
    ax.set_xlim(-0.55, columns - 0.45)
    ax.set_ylim(max(ys) + 0.6, min(ys) - 0.6)  # downwards: a node's first input on top
    ax.set_xticks([])
    ax.set_yticks([])
    ax.grid(False)
    for spine in ax.spines.values():
        spine.set_visible(False)
    ax.legend(handles=[Patch(facecolor=c, edgecolor="#555555", label=k)
                       for k, c in COLORS.items()],
              loc="lower center", bbox_to_anchor=(0.5, 1.0), ncol=4, frameon=False)
    ax.set_title(title, pad=28)
    return finish(fig, legend=False)


__all__ = ["BOX_HEIGHT", "BOX_WIDTH", "COLORS", "draw_graph", "kind", "label", "layout"]
