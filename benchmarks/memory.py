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
    parser.add_argument("--one", nargs=2, metavar=("IMPL", "COUNT"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.one:
        print(json.dumps(measure(args.one[0], args.shape, args.dtype, int(args.one[1]))))
        return 0
    rows = []
    for count in [int(c) for c in args.counts.split(",")]:
        row = {"count": count}
        for impl in ("numpy", "minigrad"):
            done = subprocess.run([sys.executable, __file__, "--shape", args.shape, "--dtype",
                                   args.dtype, "--one", impl, str(count)], cwd=HERE,
                                  capture_output=True, text=True, check=True)
            row[impl] = json.loads(done.stdout)
        rows.append(row)
    mib = 2.0**20
    print(f"peak memory of one Adam step, {args.shape.upper()} {args.dtype} (tracemalloc, MiB)")
    print("| micro-batches | hand-written NumPy | minigrad | minigrad / hand | minigrad theory |"
          " measured / theory |")
    print("|---:|---:|---:|---:|---:|---:|")
    for row in rows:
        hand, mg = row["numpy"]["peak"], row["minigrad"]["peak"]
        theory = row["minigrad"]["theory"]
        print(f"| {row['count']} | {hand / mib:.1f} | {mg / mib:.1f} | {mg / hand:.2f}x "
              f"| {theory / mib:.1f} | {mg / theory:.3f} |")
    worst = max(row["minigrad"]["peak"] / row["numpy"]["peak"] for row in rows)
    verdict = "met" if worst <= TARGET else "NOT met"
    print(f"\ntarget: minigrad <= {TARGET}x the hand-written step at every count: worst "
          f"{worst:.2f}x, {verdict}")
    if args.json:
        args.json.write_text(json.dumps({"shape": args.shape, "dtype": args.dtype,
                                         "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
