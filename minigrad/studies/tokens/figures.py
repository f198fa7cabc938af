"""Token-level figures (notebook 13): each rule's gradient error against the spread of the
micro-batches' token counts, each micro-batch's share of the gradient under each rule, and
how padding and packing lay the names out in rows.

>>> fig = spread_errors([0, 4, 9], {"item-weighted": [1e-16, 2e-16, 1e-16],
...                                 "textbook": [1e-16, 0.05, 0.1]}, [1e-13, 1e-13, 1e-13],
...                     title="two micro-batches")
>>> [line.get_label() for line in fig.axes[0].lines]
['item-weighted', 'textbook', 'rounding bound']
"""

from __future__ import annotations

import numpy as np

from minigrad.studies.figures import COLOURS, axes, finish, series

MARKERS = ["o", "s", "^", "D"]
ERROR_LABEL = "max |g_acc − g_full| / max |g_full| (log)"
"""The error axis' label: the normwise relative gradient error."""


def spread_errors(spreads, errors, bound, *, title,
                  xlabel="token-count spread between the micro-batches (max − min tokens)"):
    """The relative gradient error of each rule (``errors``: label -> one per spread) against
    the spread of token counts, on a log axis, beside the most rounding may give
    (``bound``, dashed). An error of exactly 0 has no place on a log axis: it is left out and
    counted in the legend. Returns the figure."""
    x, errors = series(spreads, errors, "errors", most=len(MARKERS))
    bound = series(x, {"bound": bound}, "bound", most=len(MARKERS))[1]["bound"]
    if np.any(bound <= 0):
        raise ValueError(f"bound must be > 0 everywhere (a log axis), got {bound.tolist()}")
    fig, (ax,) = axes(title, xlabel, ERROR_LABEL, width=6.4, height=4.2)
    for i, (label, v) in enumerate(errors.items()):
        keep = v > 0
        zeros = int(np.sum(~keep))
        shown = f"{label} (exactly 0 at {zeros} of {v.size}: not drawn)" if zeros else label
        ax.plot(x[keep], v[keep], marker=MARKERS[i], color=COLOURS[i], linewidth=1.4,
                markerfacecolor=COLOURS[i] if i == 0 else "none", label=shown)
    ax.plot(x, bound, "--", color="black", linewidth=1.0, label="rounding bound")
    ax.set_yscale("log")
    return finish(fig)


def micro_batch_shares(tokens, shares, *, title):
    """Grouped bars: each micro-batch's share of the accumulated gradient under each rule
    (``shares``: label -> one share per micro-batch), the micro-batches labelled with their
    token counts ``tokens``. Returns the figure."""
    j = np.arange(1, len(tokens) + 1, dtype=np.float64)
    _, shares = series(j, shares, "shares", most=len(MARKERS))
    fig, (ax,) = axes(title, "micro-batch j (its real tokens)",
                      "share of the accumulated gradient", width=6.4, height=4.0)
    width = 0.8 / len(shares)
    for i, (label, v) in enumerate(shares.items()):
        ax.bar(j + (i - (len(shares) - 1) / 2) * width, v, width, color=COLOURS[i],
               label=label)
    ax.set_xticks(j, [f"{int(k)} ({n})" for k, n in zip(j, tokens)])
    ax.set_ylim(0, 1.4 * max(float(v.max()) for v in shares.values()))  # room for the legend
    return finish(fig)


def layouts(windows, *, title, rows=6):
    """How each layout (``windows``: label -> ``text.Windows``) puts the names in rows: the
    first ``rows`` rows, one cell per position, coloured by the name it belongs to, white
    where it is padding. Returns the figure."""
    if not isinstance(windows, dict) or not windows:
        raise TypeError(f"windows must be a non-empty dict of label -> text.Windows, got "
                        f"{type(windows).__name__}")
    fig, panels = axes(list(windows), "position in the row", "row", suptitle=title,
                       width=4.6, height=2.6)
    for ax, w in zip(panels, windows.values()):
        sequence = np.asarray(w.sequence[:rows], dtype=np.float64)
        shown = np.where(sequence >= 0, sequence % 10, np.nan)  # ten colours, in turn
        ax.imshow(shown, cmap="tab10", vmin=0, vmax=10, aspect="auto", interpolation="none")
        ax.set_yticks(range(sequence.shape[0]))
        ax.grid(False)
    return finish(fig, legend=False)


__all__ = ["ERROR_LABEL", "layouts", "micro_batch_shares", "spread_errors"]
