"""Peak memory of one training step against the micro-batch count: minigrad vs the step
written by hand in NumPy, both seen by tracemalloc (NumPy reports every array buffer to it).

What is measured is everything the step holds at its peak, from the moment its
implementation exists: the parameters, Adam's state, the gradients, the activations and any
buffers, minus the shared input data. The hand-written step allocates all of that once and
then works in place, so it is the floor; minigrad makes fresh arrays and frees them (the
reverse walk releases each node's arrays as soon as its backward has run). Each is measured in
its own process, on the second step (the first one warms caches), beside minigrad's
theoretical peak (``minigrad.analysis.memory.theoretical_peak``) of one update.

    python benchmarks/memory.py [--shape large] [--dtype float32] [--counts 1,2,4,8,16]
        [--json FILE]

Target (issue 10): minigrad's peak <= 1.3x the hand-written step's at every count.
"""

import argparse
import dataclasses
import json
import subprocess
import sys
import tracemalloc
from pathlib import Path

HERE = Path(__file__).resolve().parent
TARGET = 1.3


def measure(impl, shape_name, dtype, count):
    """Bytes held at the peak of the second step of ``impl`` (one process per call)."""
    from minigrad import nn, optim
    from minigrad.analysis.memory import theoretical_peak

    from common import ADAM, SHAPES, make_problem
    from steps.hand import HandWritten
    from steps.minigrad_step import MinigradStep

    base = SHAPES[shape_name]
    micro = None if count == 1 else base.batch // count
    shape = dataclasses.replace(base, micro_batch=micro)
    problem = make_problem(shape, dtype)
    tracemalloc.start()
    start = tracemalloc.get_traced_memory()[0]
    if impl == "numpy":
        step = HandWritten(problem)
    else:
        step = MinigradStep(problem)
        # the plain optimizer: the benchmark's RecordingAdam keeps the last gradients alive
        step.opt = optim.Adam(step.model.parameters(), **ADAM)
        step.micro_batch = base.batch // count  # every count through accumulate.step
    step.step()
    tracemalloc.reset_peak()
    step.step()
    peak = tracemalloc.get_traced_memory()[1] - start
    tracemalloc.stop()
    out = {"implementation": impl, "count": count, "peak": peak}
    if impl == "minigrad":
        model = step.model
        held = sum(p.data.nbytes for p in model.parameters())
        out["held_before"] = 3 * held  # parameters and Adam's two moments
        out["theory"] = out["held_before"] + theoretical_peak(
            model, nn.CrossEntropyLoss(), step.opt, problem.x, [base.batch // count] * count)
    return out


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shape", default="large")
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--counts", default="1,2,4,8,16")
    parser.add_argument("--json", type=Path)
    parser.add_argument("--docs", type=Path, help="write this run as a Markdown page")
    parser.add_argument("--one", nargs=2, metavar=("IMPL", "COUNT"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.one:
        print(json.dumps(measure(args.one[0], args.shape, args.dtype, int(args.one[1]))))
        return 0
    from common import environment

    env = environment()
    rows = []
    for count in [int(c) for c in args.counts.split(",")]:
        row = {"count": count}
        for impl in ("numpy", "minigrad"):
            done = subprocess.run([sys.executable, __file__, "--shape", args.shape, "--dtype",
                                   args.dtype, "--one", impl, str(count)], cwd=HERE,
                                  capture_output=True, text=True, check=True)
            row[impl] = json.loads(done.stdout)
        rows.append(row)
    table = _table(rows)
    worst = max(row["minigrad"]["peak"] / row["numpy"]["peak"] for row in rows)
    verdict = "met" if worst <= TARGET else "NOT met"
    target = (f"target: minigrad <= {TARGET}x the hand-written step at every count: worst "
              f"{worst:.2f}x, {verdict}")
    title = f"peak memory of one Adam step, {args.shape.upper()} {args.dtype} (tracemalloc, MiB)"
    print(f"{title}\n{table}\n\n{target}")
    if args.json:
        args.json.write_text(json.dumps({"shape": args.shape, "dtype": args.dtype,
                                         "environment": env, "rows": rows}, indent=1))
    if args.docs:
        args.docs.write_text(_page(args, env, table, target))
    return 0


def _table(rows):
    mib = 2.0**20
    lines = ["| micro-batches | hand-written NumPy (MiB) | minigrad (MiB) | minigrad / hand "
             "| minigrad's theory (MiB) | measured / theory |", "|---:|---:|---:|---:|---:|---:|"]
    for row in rows:
        hand, mg = row["numpy"]["peak"], row["minigrad"]["peak"]
        theory = row["minigrad"]["theory"]
        lines.append(f"| {row['count']} | {hand / mib:.1f} | {mg / mib:.1f} | {mg / hand:.2f}x "
                     f"| {theory / mib:.1f} | {mg / theory:.3f} |")
    return "\n".join(lines)


def _page(args, env, table, target):
    from common import SHAPES, blas_line

    shape = SHAPES[args.shape]
    model = "MLP " + "-".join(map(str, shape.sizes))
    counts = args.counts.replace(",", ", ")
    return f"""# Memory benchmark

Generated by `python benchmarks/memory.py --docs docs/benchmarks-memory.md` (part of
`make bench`) on {env["date"]}: {env["cpu"]}, {env["cores"]} cores, NumPy {env["numpy"]},
{blas_line(env)}.

The peak bytes held during one Adam step of the {args.shape.upper()} shape ({model}, a
global batch of {shape.batch}, {args.dtype}) split into {counts} micro-batches, as `tracemalloc`
sees them: parameters, Adam's moments, gradients,
activations and temporaries, not the shared input data. The hand-written NumPy step
allocates all its buffers once and works in place, so it is the floor; minigrad makes fresh
arrays and its reverse walk frees each node's arrays once its backward has run. Each number
is measured in a process of its own, on the second step. The theory is
`minigrad.analysis.memory.theoretical_peak` plus the parameters and Adam's moments.

{table}

{target}.
"""



if __name__ == "__main__":
    sys.exit(main())
