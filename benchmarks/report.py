"""Tables, the plot and the docs page, all from one run's results (the speed targets' verdicts
are ``targets.py``'s).

``results[shape][dtype][name]`` holds ``{"rounds_ms": [...], "inner": k, "median_ms": t,
"device": "cpu" | "gpu"}`` for each implementation and GEMM floor that was timed.
"""

import os
import shlex

from common import SHAPES, blas_line, gpu_line
from provenance import code_line, earlier_update, earlier_update_note
from targets import judge

# Per device: the hand-written step, PyTorch eager and the GEMM floor (ratios divide by these).
BASELINES = {
    "cpu": {"hand": "numpy", "torch": "torch", "gemm": "gemm"},
    "gpu": {"hand": "cupy", "torch": "torch-cuda", "gemm": ("gemm-cupy", "gemm-torch-cuda")},
}

def baseline(timed, device, role):
    names = BASELINES[device][role]
    for name in (names,) if isinstance(names, str) else names:
        if name in timed:
            return timed[name]["median_ms"]
    return None


def summary(results):
    """One row per (shape, dtype, implementation): ms and the ratios to the baselines."""
    rows = []
    for shape, by_dtype in results.items():
        for dtype, timed in by_dtype.items():
            for name, t in timed.items():
                row = {"shape": shape, "dtype": dtype, "name": name, "device": t["device"],
                       "ms": t["median_ms"], "spread": t["spread"], "kernel_ms": t["kernel_ms"],
                       "rounds": len(t["rounds_ms"]), "gflops": t.get("gflops")}
                for role in ("hand", "torch", "gemm"):
                    base = baseline(timed, t["device"], role)
                    row[f"over_{role}"] = None if base is None else t["median_ms"] / base
                accum, large = by_dtype_of(results, "accum", dtype), by_dtype_of(
                    results, "large", dtype)
                if shape == "accum" and name in large:
                    row["accum_over_large"] = accum[name]["median_ms"] / large[name]["median_ms"]
                rows.append(row)
    return rows


def by_dtype_of(results, shape, dtype):
    return results.get(shape, {}).get(dtype, {})


def _ratio(x):
    return "" if x is None else f"{x:.2f}x"


def _ms(x):
    """Milliseconds to 3 significant digits, without exponents."""
    if x == 0:
        return "0"
    return f"{x:.0f}" if x >= 100 else f"{x:#.3g}"  # "#": 1.00, not 1


def timing_table(rows, dtype):
    """Markdown: per shape, ms per step and the ratios, for one dtype."""
    lines = ["| shape | implementation | ms / step | spread | kernel ms | / hand-written | "
             "/ PyTorch | / GEMM floor |", "|---|---|---:|---:|---:|---:|---:|---:|"]
    for row in rows:
        if row["dtype"] != dtype:
            continue
        shape = SHAPES[row["shape"]]
        name = row["name"] if row["gflops"] is None else \
            f"{row['name']} floor ({row['gflops']:.0f} GFLOP/s)"
        lines.append(f"| {row['shape'].upper()} ({shape.describe()}) | {name} | "
                     f"{_ms(row['ms'])} | {row['spread']:.0%} | {_ms(row['kernel_ms'])} | "
                     f"{_ratio(row['over_hand'])} | "
                     f"{_ratio(row['over_torch'])} | {_ratio(row['over_gemm'])} |")
    return "\n".join(lines)


def accum_table(rows):
    lines = ["| dtype | implementation | ACCUM ms | ACCUM / LARGE |", "|---|---|---:|---:|"]
    for row in rows:
        if "accum_over_large" in row:
            lines.append(f"| {row['dtype']} | {row['name']} | {_ms(row['ms'])} | "
                         f"{row['accum_over_large']:.2f}x |")
    return "\n".join(lines) if len(lines) > 2 else ""


def targets_table(found):
    lines = ["| target (float32) | issue | measured ratio | verdict |", "|---|---:|---:|---|"]
    for t in found:
        lines.append(f"| {t['target']} | {t['issue']} | {_ratio(t['ratio'])} | "
                     f"{t['verdict']} |")
    return "\n".join(lines)


def checks_table(checks):
    """Markdown: one row per check; the loss's gap and bound where the steps reported a
    loss (the language model's)."""
    losses = any("loss_gap" in c for c in checks)
    loss_head, loss_rule = (" loss gap | loss bound |", "---:|---:|") if losses else ("", "")
    lines = ["| shape | dtype | implementation | gradient gap | bound | gap to float64 |"
             f"{loss_head} parameters: rounding used | steps of the other sign |",
             f"|---|---|---|---:|---:|---:|{loss_rule}---:|---:|"]
    for c in checks:
        ref = "" if c["grad_gap_float64"] is None else f"{c['grad_gap_float64']:.1e}"
        loss = f" {c['loss_gap']:.1e} | {c['loss_tol']:.1e} |" if losses else ""
        lines.append(f"| {c['shape'].upper()} | {c['dtype']} | {c['name']} | "
                     f"{c['grad_gap']:.1e} | {c['grad_tol']:.1e} | {ref} |{loss} "
                     f"{c['param_rounding_used']:.2f} | {c['sign_flips']} |")
    return "\n".join(lines)


DISTURBED = 0.1  # cores used by other processes, on average, above which we warn


def disturbed(others):
    """``[(shape, dtype, cores), ...]`` where other processes used more than DISTURBED."""
    return [(shape, dtype, o["other_cores"]) for shape, by_dtype in others.items()
            for dtype, o in by_dtype.items() if o is not None and o["other_cores"] > DISTURBED]


def interference_table(others):
    lines = ["| shape | dtype | kept rounds took | other processes used | rounds dropped |",
             "|---|---|---:|---:|---:|"]
    for shape, by_dtype in others.items():
        for dtype, o in by_dtype.items():
            if o is not None:
                lines.append(f"| {shape.upper()} | {dtype} | {o['seconds']:.0f} s | "
                             f"{o['other_cores']:.2f} cores | {o['dropped']} |")
    return "\n".join(lines) if len(lines) > 2 else ""


def machine_line(env, gpu=None):
    """The machine in one line, without its host name."""
    line = (f"{env['cpu']}, {env['cores']} cores, {blas_line(env)}; Python {env['python']}, "
            f"NumPy {env['numpy']}")
    return line + (f"; GPU {gpu}" if gpu else "")


def plot(results, path, env, settings):
    """Grouped bars (log scale): ms per step of each implementation per shape, one panel
    per dtype, the GEMM floor hatched."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    dtypes = sorted({d for by_dtype in results.values() for d in by_dtype})
    names = []
    for by_dtype in results.values():
        for timed in by_dtype.values():
            names += [n for n in timed if n not in names]
    colors = dict(zip(names, plt.cm.tab10.colors))
    fig, axes = plt.subplots(1, len(dtypes), figsize=(6.5 * len(dtypes), 5), squeeze=False)
    for ax, dtype in zip(axes[0], dtypes):
        shapes = [s for s in results if dtype in results[s]]
        width = 0.8 / max(len(names), 1)
        for i, name in enumerate(names):
            xs, ys = [], []
            for j, shape in enumerate(shapes):
                if name in results[shape][dtype]:
                    xs.append(j - 0.4 + (i + 0.5) * width)
                    ys.append(results[shape][dtype][name]["median_ms"])
            if xs:
                floor = name.startswith("gemm")
                label = f"GEMM floor ({name})" if floor else name
                bars = ax.bar(xs, ys, width, label=label,
                              color="0.8" if floor else colors[name],
                              hatch="//" if floor else None, edgecolor="0.3", linewidth=0.5)
                ax.bar_label(bars, labels=[_ms(y) for y in ys], fontsize=6, rotation=90,
                             padding=2)
        ax.set_yscale("log")
        low = min(t["median_ms"] for s in shapes for t in results[s][dtype].values())
        high = max(t["median_ms"] for s in shapes for t in results[s][dtype].values())
        ax.set_ylim(low / 3, high * 4)
        ax.set_xticks(range(len(shapes)))
        ax.set_xticklabels([f"{s.upper()}\n" + SHAPES[s].describe().replace(", ", "\n")
                            for s in shapes], fontsize=8)
        ax.set_ylabel("ms per step (median; log scale)")
        ax.set_title(dtype)
        ax.grid(axis="y", which="both", alpha=0.3)
    axes[0][0].legend(fontsize=8)
    fig.suptitle("One training step (forward, cross-entropy, backward, Adam): "
                 f"median of interleaved rounds\n{machine_line(env, settings.get('gpu'))}",
                 fontsize=9)
    fig.tight_layout()
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)


def docs_page(rows, found, checks, others, env, settings, image, lm=None, gpu=None):
    """The markdown page: what was run, on what, the checks, the times, the targets; with
    ``lm`` and ``gpu`` (each ``(record, path, image)``: the --json record of a language-model
    run or of a GPU run, the file it is saved in and its plot), their sections after the
    CPU run's."""
    parts = [
        "# Benchmarks",
        "",
        "<!-- Generated by benchmarks/run.py from one run; edit the script, not this page. -->",
        "",
        "One training step of a ReLU MLP (forward, mean cross-entropy, backward, one Adam "
        "update with lr 1e-3, betas (0.9, 0.999), eps 1e-8), on identical data and initial "
        "weights, through each implementation that this machine runs. "
        "`benchmarks/README.md` describes the implementations, the agreement check and the "
        "targets.",
        "",
        "Regenerate this page (and its plot) with:",
        "",
        "```sh",
        settings["command"],
        "```",
        "",
    ]
    parts += run_sections(rows, found, checks, others, env, settings, image, level=2,
                          remeasure="make bench")
    if lm is not None:
        parts += lm_section(*lm)
    if gpu is not None:
        parts += gpu_section(*gpu)
    return "\n".join(parts)


def saved_command(settings, path):
    """The command of a record's run, with its --json as the file the record is saved in."""
    command = shlex.split(settings["command"])
    if "--json" in command:
        command[command.index("--json") + 1] = path
    return shlex.join(command)


def lm_section(record, path, image):
    """The page's section for the language model's run (``record``: its --json, saved at
    ``path``), the same tables one heading level down, with its own target."""
    settings, env = record["settings"], record["environment"]
    w = settings["workloads"]["lm"]
    shape = SHAPES["lm"]
    parts = [
        "## One update of a character language model (issue 36)",
        "",
        f"One Adam update of `nn.CharMLP` (embedding, concatenation, tanh hidden layer, "
        f"logits; context {shape.context}, embedding {shape.embedding_dim}, hidden "
        f"{shape.hidden}, a vocabulary of {w['vocab']}: the corpus's characters and the "
        f"boundary) on the first {w['rows']} names of `studies.text.names_corpus(seed=0)`, "
        f"one per row, padded to {w['length']} positions: {w['positions']:,} positions, of "
        f"which {w['tokens']:,} are real tokens, the items of the loss (the mean "
        "cross-entropy with `ignore_index=-100`; padding positions are computed and "
        "ignored). minigrad as a user writes it (`model(x)` on the padded windows, "
        "`nn.CrossEntropyLoss()`, `optim.Adam`) against PyTorch eager on the CPU "
        "(`torch.nn.Embedding`, `Linear`, `tanh`, `Linear` with minigrad's initial weights, "
        "the logits flattened for `F.cross_entropy(..., ignore_index=-100)`, "
        "`torch.optim.Adam`), on the same windows; no hand-written step. The agreement "
        "check also compares the two losses; `benchmarks/check.py` derives its bounds "
        "for this model. The GEMM floor is the step's six matrix products with the "
        "positions as rows (the embeddings' gradient included).",
        "",
        f"Measured with `make bench` (its record is `{path}`, which `make bench` and "
        "`make bench-pages` render here):",
        "",
        "```sh",
        saved_command(settings, path),
        "```",
        "",
    ]
    found = judge(record["results"], judged=not earlier_update(env))
    parts += run_sections(summary(record["results"]), found, record["checks"],
                          record["interference"], env, settings, image, level=3,
                          remeasure="make bench")
    return parts


def gpu_section(record, path, image):
    """The page's section for a GPU run (``record``: its --json, saved at ``path``): the
    same tables one heading level down, and only the GPU targets, judged here (the record's
    own verdicts are those of the targets of its day)."""
    settings, env = record["settings"], record["environment"]
    found = [t for t in judge(record["results"], judged=not earlier_update(env))
             if t["target"].startswith("GPU")]
    parts = [
        "## On a GPU",
        "",
        f"Measured on {record['environment']['gpu']['name']} (`make bench-gpu`; its record is "
        f"`{path}`, which `make bench` and `make bench-pages` render here) with:",
        "",
        "```sh",
        saved_command(settings, path),  # the file it wrote on the GPU machine is this one
        "```",
        "",
        "The CPU rows (minigrad on the GPU machine's own processor) are the reference of the "
        "agreement check; the CPU targets are judged on the CPU run above, so only the GPU "
        "targets are listed here. A gradient gap far above the others' yet within the bound, "
        "in the layers below a ReLU and not in the last layer (`grad_gap_by_param` in the "
        "record), is a pre-activation within rounding of 0 that switched sides between the "
        "two computations: `benchmarks/check.py` derives the bound with room for such "
        "switches.",
        "",
    ]
    parts += run_sections(record["summary"], found, record["checks"], record["interference"],
                          env, settings, image, level=3, remeasure="make bench-gpu")
    return parts


def run_sections(rows, found, checks, others, env, settings, image, level, remeasure):
    """A run's machine, agreement, times and targets, under headings of ``level``; a record
    of the earlier update says so first (``remeasure``: the make target that measures the
    new one)."""
    h2, h3 = "#" * level, "#" * (level + 1)
    dtypes = sorted({r["dtype"] for r in rows})
    gpu = settings.get("gpu")
    gpu_text = gpu_line(env["gpu"]) if env.get("gpu") else gpu or "none"
    parts = [earlier_update_note(env, remeasure), ""] if earlier_update(env) else []
    parts += [
        f"{h2} Machine",
        "",
        f"- date: {env['date']}" + (f" ({code_line(env)})" if code_line(env) else ""),
        f"- CPU: {env['cpu']} ({env['cores']} cores available, {env['machine']}, "
        f"{env['system']})",
        f"- BLAS: {blas_line(env)}; OPENBLAS_CORETYPE={env['OPENBLAS_CORETYPE'] or 'unset'}",
        f"- GPU: {gpu_text}",
        "- versions: " + ", ".join(f"{k} {v}" for k, v in settings["versions"].items()),
        f"- load average before the run: {env['load_average_1min']:.2f}"
        if env["load_average_1min"] is not None else "- load average: unknown",
    ]
    if settings["skipped"]:
        parts += ["- not run here: " + "; ".join(f"{k} ({v})"
                                                 for k, v in settings["skipped"].items())]
    parts += [
        "",
        f"{h2} Agreement, checked before timing",
        "",
        "Each implementation's gradients against minigrad's (norm-wise relative gap, and the "
        "bound 2 P K_max u derived in `benchmarks/check.py`), the gap of its float32 "
        "gradients to a float64 computation of the same step, and its parameters after one "
        "Adam step: the largest gap to minigrad's beyond what the two gradients' difference "
        "explains, as a fraction of the rounding allowed (at most 1; negative: less than "
        "the gradients explain), with the count of entries whose first step has the other "
        "sign." + (" The loss gap is the relative gap of the two losses, within the bound "
                   "2 (L + 1) K u derived there." if any("loss_gap" in c for c in checks)
                   else ""),
        "",
        checks_table(checks),
        "",
        f"{h2} Time per step",
        "",
        f"Median over interleaved rounds ({settings['rounds_text']}; {settings['warmup']} "
        f"warm-up rounds; {settings['pause']} s pause before each measurement). The spread "
        "is the interquartile range of the rounds over their median; kernel ms is the "
        "system time per step (median), where page faults on freshly allocated memory show: "
        "the hand-written step allocates nothing. Ratios divide by the "
        "hand-written step, by PyTorch eager and by the GEMM floor (the step's matrix "
        "products alone, as plain matmuls) on the same device.",
        "",
    ]
    for dtype in dtypes:
        parts += [f"{h3} {dtype}", "", timing_table(rows, dtype), ""]
    accum = accum_table(rows)
    if accum:
        parts += [f"{h3} One update from 8 micro-batches of 512 against one batch of 4096", "",
                  accum, ""]
    for shape, dtype, cores in disturbed(others):
        parts += [f"**Disturbed:** other processes used {cores:.2f} cores on average while "
                  f"{shape.upper()} {dtype} was timed; those times are not this machine's "
                  "own.", ""]
    busy = interference_table(others)
    if busy:
        parts += [f"{h3} What else ran", "",
                  "CPU time that other processes used (and the hypervisor took) while each "
                  "shape was timed, from /proc/stat less this process's own, averaged over the "
                  "kept rounds: anything well above 0 slowed the measurements down. With "
                  "`--wait-idle`, a round during which others used more than 0.1 core was "
                  "dropped and run again once the machine was quiet.", "", busy, ""]
    parts += [f"{h2} Targets", "", targets_table(found), "", f"![ms per step]({image})", ""]
    return parts
