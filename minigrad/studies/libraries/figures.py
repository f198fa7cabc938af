"""The figure of the array-library comparison: loss curves overlaid, and each library's
parameter gap to NumPy beside its derived bound (``minigrad.studies.libraries.runs``: the bound
of the element that decides gap / bound).

A gap of exactly 0 cannot be drawn on a log axis: the legend says how many updates had one,
and a library whose gap is 0 at every update has a legend entry saying so instead.
"""

from __future__ import annotations

from minigrad.studies.figures import axes, finish

MARKERS = ("o", "s", "^", "D", "v")
STYLES = ("-", "--", ":", "-.", (0, (5, 1)))


def plot_libraries(runs, *, title):
    """Two panels from ``compare_libraries``' result (name -> ``LibraryRun``, the reference
    first): the loss per update of every library, and for every other library its gap
    (markers, where it is not 0) and its bound (dashed; only beside a gap that is not 0)."""
    names = list(runs)
    fig, (left, right) = axes(
        ["loss per update, every library", "largest parameter gap to NumPy, and its bound"],
        "update", ["mean cross-entropy loss (nats)", "|theta - theta_numpy| (parameter units)"],
        suptitle=title, width=6.0, height=4.4)
    for i, name in enumerate(names):
        run = runs[name]
        updates = range(1, len(run.losses) + 1)
        left.plot(updates, run.losses, linestyle=STYLES[i % len(STYLES)],
                  marker=MARKERS[i % len(MARKERS)], markersize=8 - 2 * i % 6,
                  fillstyle="none", label=name, color=f"C{i}")
    exact = []
    for i, name in enumerate(names):
        if i == 0:
            continue  # the reference: its gap is 0 by definition
        run = runs[name]
        updates = list(range(1, len(run.gaps) + 1))
        positive = [(t, g) for t, g in zip(updates, run.gaps) if g > 0]
        zeros = len(run.gaps) - len(positive)
        if not positive:  # nothing to compare its bound with
            exact.append(name)
            continue
        right.plot(updates, run.bounds, linestyle="--", color=f"C{i}",
                   label=f"{name}: derived bound")
        note = f" ({zeros} of {len(run.gaps)} exactly 0, not drawn)" if zeros else ""
        right.plot(*zip(*positive), marker=MARKERS[i % len(MARKERS)], color=f"C{i}",
                   linestyle="none", label=f"{name}: gap{note}")
    for name in exact:  # a legend entry without a line: nothing to draw on a log axis
        right.plot([], [], linestyle="none", label=f"{name}: gap exactly 0 at every update")
    right.set_yscale("log")
    return finish(fig)


__all__ = ["plot_libraries"]
