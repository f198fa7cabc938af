"""Where minigrad's training step spends its time: cProfile over many steps of one shape.

It runs run.py's minigrad step (forward, cross-entropy, backward, Adam; ACCUM through
``accumulate.step``; LM, the language model's). First, without the profiler, the median
time per step and, for SMALL, LARGE, XL and LM, per phase (forward, loss, backward,
optimizer step), with the kernel's share (system time) and the page faults per step: fresh
large arrays cost page faults that a preallocated step does not pay. Then cProfile: the
functions with the most time of their own (tottime) and, separately, including what they
call (cumtime), as shares of the profiled total (cProfile's per-call cost inflates the
share of small Python functions relative to BLAS).

    python benchmarks/profile_step.py [--shape small|large|accum|xl|lm] [--dtype float32]
        [--steps 200]
"""

import argparse
import cProfile
import pstats
import resource
import statistics
import time

from common import SHAPES, make_problem, median_ms
from steps.minigrad_step import MinigradLanguageStep, MinigradStep


def where(func):
    filename, line, name = func
    for root in ("/minigrad/", "/numpy/", "/array_api_compat/"):
        if root in filename:
            filename = root.strip("/") + "/" + filename.split(root, 1)[1]
            break
    return f"{name} ({filename}:{line})" if line else name


def phases(step, steps):
    """Median ms per phase of the plain (one-batch) step, and per step: system time and
    page faults."""
    model, loss_fn, opt = step.model, step.loss_fn, step.opt
    times = {"forward": [], "loss": [], "backward": [], "optimizer": []}
    before = resource.getrusage(resource.RUSAGE_SELF)
    for _ in range(steps):
        t0 = time.perf_counter()
        opt.zero_grad()
        out = model(step.inputs)
        t1 = time.perf_counter()
        loss = loss_fn(out, step.y)
        t2 = time.perf_counter()
        loss.backward()
        t3 = time.perf_counter()
        opt.step()
        t4 = time.perf_counter()
        for name, a, b in (("forward", t0, t1), ("loss", t1, t2), ("backward", t2, t3),
                           ("optimizer", t3, t4)):
            times[name].append(b - a)
    after = resource.getrusage(resource.RUSAGE_SELF)
    total = sum(statistics.median(t) for t in times.values())
    print("phase      ms/step  share")
    for name, t in times.items():
        print(f"{name:<9} {1e3 * statistics.median(t):8.3f} {statistics.median(t) / total:6.1%}")
    print(f"per step: {1e3 * (after.ru_stime - before.ru_stime) / steps:.1f} ms system time, "
          f"{(after.ru_minflt - before.ru_minflt) / steps:.0f} page faults")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shape", default="small", choices=list(SHAPES))
    parser.add_argument("--dtype", default="float32", choices=["float32", "float64"])
    parser.add_argument("--steps", type=int, default=None,
                        help="profiled steps (default: 500 for small, 100 for lm, 10 "
                             "otherwise)")
    parser.add_argument("--top", type=int, default=20)
    args = parser.parse_args(argv)
    steps = args.steps or {"small": 500, "lm": 100}.get(args.shape, 10)
    shape = SHAPES[args.shape]
    build = MinigradLanguageStep if shape.kind == "charlm" else MinigradStep
    step = build(make_problem(shape, args.dtype))
    seconds = []
    for _ in range(3 + steps):
        start = time.perf_counter()
        step.step()
        seconds.append(time.perf_counter() - start)
    print(f"minigrad {args.shape.upper()} {args.dtype}: {median_ms(seconds[3:]):.3f} ms per "
          f"step (median of {steps}, no profiler)")
    if step.micro_batch is None:
        phases(step, steps)
    profiler = cProfile.Profile()
    profiler.enable()
    for _ in range(steps):
        step.step()
    profiler.disable()
    stats = pstats.Stats(profiler).stats  # func -> (calls, primitive calls, tottime, cumtime, _)
    total = sum(s[2] for s in stats.values())
    print(f"profiled {steps} steps: {1e3 * total / steps:.3f} ms per step under cProfile")
    for title, key in (("own time (tottime)", 2), ("including callees (cumtime)", 3)):
        print(f"\ntop {args.top} by {title}:")
        print(f"{'share':>6} {'ms/step':>8} {'calls/step':>10}  function")
        ranked = sorted(stats.items(), key=lambda item: item[1][key], reverse=True)
        for func, s in ranked[:args.top]:
            print(f"{s[key] / total:6.1%} {1e3 * s[key] / steps:8.3f} {s[0] / steps:10.1f}  "
                  f"{where(func)}")


if __name__ == "__main__":
    main()
