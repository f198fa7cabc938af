"""Figures and the verdict table of notebook 08 (what the articles say, tested).

Each claim gets a verdict from what its experiment measured (``verdict``), and the table
of all of them is Markdown built from those results (``verdict_table``), so that no verdict
is typed by hand. matplotlib is imported only when a figure is made.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from minigrad.apps.plotting import axes, finish

VERDICTS = ("holds", "holds only if", "does not hold")


def verdict(holds: bool, breaks_without_condition: bool = False) -> str:
    """The verdict on a claim from two measured facts.

    ``holds``: the claim held where the article says it does (under the condition the
    experiment names, if any); ``breaks_without_condition``: it failed once that condition
    was dropped. Held and never broke: "holds"; held but broke without the condition: "holds
    only if"; did not hold: "does not hold".
    """
    holds = _flag("holds", holds)
    breaks_without_condition = _flag("breaks_without_condition", breaks_without_condition)
    if not holds:
        return "does not hold"
    return "holds only if" if breaks_without_condition else "holds"


def _flag(name, value):
    """``value`` as a Python bool: a bool or a NumPy bool (a comparison of arrays), nothing
    else (a list or a number would be truthy by accident)."""
    if not isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{name} must be a bool, got {type(value).__name__} {value!r}")
    return bool(value)


def _cell(text) -> str:
    """One table cell: a string with its pipes escaped and no line breaks."""
    return str(text).replace("|", "\\|").replace("\n", " ")


COLUMNS = ("article", "claim (paraphrased)", "what we measured", "verdict")


def verdict_table(rows: Sequence[Mapping[str, str]]) -> str:
    """A Markdown table, one row per claim: ``article``, ``claim``, ``measured`` and
    ``verdict`` (one of ``VERDICTS``), with ``condition`` appended after "holds only if"."""
    lines = ["| # | " + " | ".join(COLUMNS) + " |", "|---|" + "---|" * len(COLUMNS)]
    for i, row in enumerate(rows, 1):
        missing = {"article", "claim", "measured", "verdict"} - set(row)
        if missing:
            raise ValueError(f"row {i} lacks {sorted(missing)}")
        if row["verdict"] not in VERDICTS:
            raise ValueError(f"row {i}: verdict must be one of {VERDICTS}, got {row['verdict']!r}")
        said = f"**{row['verdict']}**"
        if row["verdict"] == "holds only if":
            if not row.get("condition"):
                raise ValueError(f"row {i}: 'holds only if' needs a condition")
            said += f" {row['condition']}"
        cells = (row["article"], row["claim"], row["measured"], said)
        lines.append(f"| {i} | " + " | ".join(_cell(c) for c in cells) + " |")
    return "\n".join(lines)


def check_panel(result: Mapping, label: str) -> dict:
    """A ``minigrad.analysis.check`` result in the shape ``optimizers.gap_figure`` draws:
    the largest parameter gap and the largest bound entry per update."""
    return {"gap": {label: [u["max_abs"] for u in result["updates"]]},
            "bound": [u["bound"] for u in result["updates"]]}


def accuracy_figure(accuracies: Mapping[str, tuple[float, float]], *,
                    title: str = "Test accuracy: full batch vs accumulated"):
    """Grouped bars: per model (label -> (full-batch accuracy, accumulated accuracy)), in
    percent, each bar labelled with its value."""
    fig, (ax,) = axes(title, "model", "test accuracy (%)", width=7.0, height=4.2)
    names = list(accuracies)
    width = 0.38
    for offset, which, colour in ((-width / 2, 0, "tab:blue"), (width / 2, 1, "tab:orange")):
        values = [100 * accuracies[n][which] for n in names]
        bars = ax.bar([i + offset for i in range(len(names))], values, width, color=colour,
                      label=("full batch", "accumulated")[which])
        ax.bar_label(bars, fmt="%.1f", fontsize=9)
    ax.set_xticks(range(len(names)))
    ax.set_xticklabels(names)
    ax.set_ylim(0, 119)  # room above the bars for the legend
    ax.legend(frameon=False, loc="upper left", ncol=2)
    return finish(fig, legend=False)


def direction_figure(cosines: Mapping[str, Sequence[float]], samples: Sequence[int],
                     losses: Mapping[str, Sequence[float]]):
    """Left: boxes of the cosine between each batch's gradient and the whole training set's
    (label -> cosines). Right: the training-set loss against the samples processed (label ->
    one loss per entry of ``samples``)."""
    fig, (left, right) = axes(
        ["Direction: cosine to the full-data gradient", "Progress per sample processed"],
        ["", "samples processed"], ["cosine", "training-set loss (cross-entropy)"],
        width=6.0, height=4.2)
    left.boxplot(list(cosines.values()), tick_labels=list(cosines), widths=0.5)
    left.set_ylim(-0.05, 1.05)
    for label, values in losses.items():
        right.plot(samples, values, marker=".", label=label)
    return finish(fig)


def costs_figure(micro_batch_sizes: Sequence[int], reports: Sequence[Mapping[str, int]],
                 milliseconds: Mapping[int, float], *, global_batch: int, timed_batch: int):
    """Left: one update's peak memory split into parameters, gradients, optimizer state and
    activations (stacked, KiB) per micro-batch size (``reports`` from
    ``analysis.memory.update_memory``). Right: milliseconds per update against the
    micro-batch size (``milliseconds``: size -> ms), log axes."""
    fig, (left, right) = axes(
        [f"Peak memory of one update, global batch {global_batch}",
         f"Time per update, global batch {timed_batch}"],
        "micro-batch size (samples)", ["peak memory (KiB)", "time per update (ms, log)"],
        width=6.0, height=4.2)
    parts = ("parameters", "gradients", "optimizer_state", "activations")
    positions = range(len(micro_batch_sizes))
    bottom = [0.0] * len(micro_batch_sizes)
    for part in parts:
        values = [r[part] / 1024 for r in reports]
        left.bar(positions, values, 0.6, bottom=bottom, label=part.replace("_", " "))
        bottom = [b + v for b, v in zip(bottom, values)]
    left.set_xticks(list(positions))
    left.set_xticklabels([str(m) for m in micro_batch_sizes])
    sizes = sorted(milliseconds)
    right.plot(sizes, [milliseconds[m] for m in sizes], "o-", label="measured (best of runs)")
    right.set_xscale("log")
    right.set_yscale("log")
    right.set_xticks(sizes)
    right.set_xticklabels([str(m) for m in sizes])
    right.minorticks_off()
    return finish(fig)


__all__ = ["COLUMNS", "VERDICTS", "accuracy_figure", "check_panel", "costs_figure",
           "direction_figure", "verdict", "verdict_table"]
