"""The benchmark suite: one training step through minigrad and the other implementations.

The step is forward, mean cross-entropy, backward and one Adam update (torch's semantics,
lr 1e-3) of a ReLU MLP, on identical data and initial weights, at each shape:

    SMALL  batch 64, 784-128-10
    LARGE  batch 4096, 784-1024-1024-10
    ACCUM  LARGE as 8 micro-batches of 512, one update
    XL     batch 16384, 784-4096-4096-10 (only on a GPU)

and, recorded on its own (``--shapes lm``), one update of a character language model:

    LM     256 names of the corpus, padded; nn.CharMLP context 8, embedding 16, hidden 256
           (language.py), through minigrad and PyTorch eager

First every implementation must agree with minigrad (``check.py`` derives the tolerance);
then each shape is timed in interleaved rounds, beside its GEMM floor. It prints the times,
the ratios and the speed targets, and writes JSON, a plot and a docs page on request.

    python benchmarks/run.py [--shapes small,large,accum] [--dtypes float32,float64]
        [--rounds 30 | --rounds small=30,large=5] [--warmup 2] [--impls minigrad,numpy]
        [--json PATH] [--plot PATH] [--docs PATH [--lm-results PATH] [--gpu-results PATH]]
        [--quick]
    python benchmarks/run.py --from-json PATH --docs PATH [--lm-results PATH]
        [--gpu-results PATH]
"""

import argparse
import dataclasses
import gc
import importlib.metadata
import importlib.util
import json
import os
import shlex
import sys

import numpy as np

import check
import report
import steps
import targets
from common import (
    SHAPES,
    IdleGate,
    environment,
    gpu_environment,
    interleaved,
    make_problem,
    median_ms,
    spread,
)
from language import workload
from provenance import earlier_update

ROUNDS = {"small": 30, "large": 10, "accum": 10, "xl": 10, "lm": 30}
QUICK_ROUNDS = {"small": 5, "large": 2, "accum": 2, "xl": 2, "lm": 5}


def parse_rounds(text):
    """``"7"`` (every shape) or ``"small=30,large=5"`` (the others keep their defaults)."""
    if text.isdigit() and int(text) >= 1:
        return dict.fromkeys(SHAPES, int(text))
    rounds = dict(ROUNDS)
    for item in text.split(","):
        shape, _, count = item.partition("=")
        if shape.lower() not in SHAPES or not count.isdigit() or int(count) < 1:
            raise argparse.ArgumentTypeError(f"--rounds takes N or SHAPE=N,...; got {item!r}")
        rounds[shape.lower()] = int(count)
    return rounds


def names(text, allowed, what):
    chosen = [t.strip().lower() for t in text.split(",") if t.strip()]
    unknown = [t for t in chosen if t not in allowed]
    if unknown or not chosen:
        raise argparse.ArgumentTypeError(f"unknown {what} {unknown}; choose from {allowed}")
    return chosen


def parse_args(argv):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    all_impls = ["minigrad", "numpy", "autograd", "torch", "jax", "minigrad-cupy", "cupy",
                 "torch-cuda"]
    parser.add_argument("--shapes", default=None,
                        type=lambda t: names(t, list(SHAPES), "shape"),
                        help="comma-separated, of small,large,accum,xl,lm (default: the "
                             "MLP's, small,large,accum,xl, xl only on a GPU; lm, the language "
                             "model, is recorded on its own)")
    parser.add_argument("--dtypes", default=["float32"],
                        type=lambda t: names(t, ["float32", "float64"], "dtype"),
                        help="comma-separated float32,float64 (default: float32)")
    parser.add_argument("--rounds", type=parse_rounds, default=None,
                        help=f"timed rounds: N for every shape, or SHAPE=N,... "
                             f"(default: {','.join(f'{k}={v}' for k, v in ROUNDS.items())})")
    parser.add_argument("--warmup", type=int, default=2,
                        help="untimed rounds first (default: 2)")
    parser.add_argument("--impls", default=None,
                        type=lambda t: names(t, all_impls, "implementation"),
                        help=f"comma-separated, of {','.join(all_impls)} (default: all that "
                             "run here); minigrad is always included, as the reference")
    parser.add_argument("--pause", type=float, default=None,
                        help="seconds of sleep before each measurement, so that the last "
                             "one's spinning thread pools are idle (default: 0.2)")
    parser.add_argument("--wait-idle", type=float, default=0.0, metavar="SECONDS",
                        help="drop a round during which other processes used more than 0.1 "
                             "core and redo it once the machine is quiet, waiting at most "
                             "SECONDS per shape and dtype in all (default: 0, keep every "
                             "round)")
    parser.add_argument("--json", metavar="PATH", help="write the results and every round")
    parser.add_argument("--plot", metavar="PATH", help="write the bar chart (PNG)")
    parser.add_argument("--docs", metavar="PATH",
                        help="write the markdown page, with its plot in assets/benchmarks.png "
                             "beside it (e.g. docs/benchmarks.md)")
    parser.add_argument("--lm-results", metavar="PATH",
                        help="a --shapes lm run's --json, added to the --docs page as its own "
                             "section (its plot as assets/benchmarks-lm.png beside the page)")
    parser.add_argument("--gpu-results", metavar="PATH",
                        help="a GPU run's --json, added to the --docs page as its own section "
                             "(its plot as assets/benchmarks-gpu.png beside the page)")
    parser.add_argument("--from-json", metavar="PATH",
                        help="write --docs/--plot from this saved --json instead of measuring")
    parser.add_argument("--quick", action="store_true",
                        help=f"a smoke test: rounds {QUICK_ROUNDS} unless given")
    args = parser.parse_args(argv)
    args.rounds = args.rounds or (QUICK_ROUNDS if args.quick else ROUNDS)
    args.pause = 0.2 if args.pause is None else args.pause
    if args.warmup < 1 or args.pause < 0 or args.wait_idle < 0:
        parser.error("--warmup must be >= 1 (it sizes the repeats), --pause and --wait-idle "
                     ">= 0")
    return args


def versions():
    found = {"python": sys.version.split()[0], "numpy": np.__version__}
    for package in ("minigrad", "torch", "autograd", "jax", "cupy", "threadpoolctl"):
        try:
            found[package] = importlib.metadata.version(package)
        except importlib.metadata.PackageNotFoundError:
            continue
    return found


def check_all(problem, instances):
    """Take one step with each and compare with minigrad; exit 1 if any disagrees."""
    reference = None
    if problem.dtype == "float32":
        x = problem.x.astype(np.float64) if problem.x.dtype.kind == "f" else problem.x
        wide = dataclasses.replace(problem, dtype="float64", x=x,
                                   weights=tuple(w.astype(np.float64) for w in problem.weights))
        exact = steps.reference(wide)
        exact.step()
        reference = check.flat(exact.gradients())
    for step in instances.values():
        step.step()
    base = instances["minigrad"] if "minigrad" in instances else instances["minigrad-cupy"]
    records, failures = [], []
    for name, step in instances.items():
        record = check.compare(problem, base, step, reference)
        record |= {"shape": problem.shape.name, "dtype": problem.dtype, "name": name}
        records.append(record)
        flips = f", {record['sign_flips']} other-sign steps" if record["sign_flips"] else ""
        ref = "" if reference is None else f", to float64 {record['grad_gap_float64']:.1e}"
        loss = "" if "loss_gap" not in record else \
            f"; loss gap {record['loss_gap']:.1e} (bound {record['loss_tol']:.1e})"
        print(f"  {name:>14}: gradient gap {record['grad_gap']:.1e} (bound "
              f"{record['grad_tol']:.1e}{ref}){loss}; parameters: "
              f"{record['param_rounding_used']:.2f} of the rounding allowance{flips}", flush=True)
        if not record["ok"]:
            failures.append(check.describe_failure(name, problem, record))
    if failures:
        print("\n".join(failures), file=sys.stderr)
        raise SystemExit(1)
    return records


def gemm_floor(problem, device):
    """The GEMM floor on ``device``: NumPy's matmul on the CPU, CuPy's (else torch's) on
    the GPU."""
    if device == "cpu":
        return steps.GemmFloor(problem)
    library = "cupy" if importlib.util.find_spec("cupy") else "torch-cuda"
    return steps.GemmFloor(problem, library=library)


def run_shape(shape, dtype, makers, args, problem):
    """Check, then time, every implementation in ``makers`` at one shape and dtype."""
    instances = {name: make(problem) for name, (_, make) in makers.items()}
    print(f"{shape.name.upper()} {dtype} ({shape.describe()}): checking agreement", flush=True)
    records = check_all(problem, instances)
    entries = {name: step.step for name, step in instances.items()}
    devices = {name: step.device for name, step in instances.items()}
    flops = {}
    for device in sorted(set(devices.values())):
        floor = gemm_floor(problem, device)
        entries[floor.name], devices[floor.name] = floor.step, device
        flops[floor.name] = floor.flops()
    rounds = args.rounds[shape.name]
    print(f"  timing {len(entries)} entries: {rounds} rounds after {args.warmup} warm-up",
          flush=True)
    gate = IdleGate(args.wait_idle) if args.wait_idle > 0 else None
    timed, log = interleaved(entries, rounds, args.warmup, args.pause, min_sample=0.05,
                             gate=gate)
    results = {}
    for name, (seconds, kernel, inner) in timed.items():
        results[name] = {"rounds_ms": [1e3 * s for s in seconds], "inner": inner,
                         "median_ms": median_ms(seconds), "spread": spread(seconds),
                         "kernel_rounds_ms": [1e3 * s for s in kernel],
                         "kernel_ms": median_ms(kernel), "device": devices[name]}
        if name in flops:  # the machine's speed at matrix products, for comparing runs
            results[name]["gflops"] = flops[name] / (1e6 * results[name]["median_ms"])
        print(f"  {name:>14}: {results[name]['median_ms']:9.3f} ms per step "
              f"(median of {rounds} rounds of {inner}; spread {results[name]['spread']:.0%}; "
              f"kernel {results[name]['kernel_ms']:.3g} ms)", flush=True)
    others = summarize_log(log)
    if others is not None:
        print(f"  meanwhile other processes used {others['other_cores']:.2f} cores on average"
              f" in the kept rounds; {others['dropped']} disturbed rounds dropped and redone",
              flush=True)
    return records, results, others


def summarize_log(log):
    """Other processes' cores over the kept rounds (a time-weighted mean), and the count of
    rounds dropped; None where /proc/stat could not be read."""
    kept = [r for r in log if r["kept"]]
    if any(r["other_cores"] is None for r in log) or not kept:
        return None
    seconds = sum(r["seconds"] for r in kept)
    return {"other_cores": sum(r["other_cores"] * r["seconds"] for r in kept) / seconds,
            "seconds": seconds, "dropped": len(log) - len(kept), "rounds": log}


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    args = parse_args(argv)
    if args.from_json:
        with open(args.from_json) as f:
            saved = json.load(f)
        write(args, saved)
        return 0
    makers, skipped = steps.available()
    if args.impls is not None:
        for name in args.impls:
            if name in skipped:
                print(f"{name}: skipped, {skipped[name]}")
        makers = {name: m for name, m in makers.items()
                  if name in args.impls or name == "minigrad"}
    else:
        for name, reason in skipped.items():
            print(f"{name}: skipped, {reason}")
    gpu = steps.gpu_name()
    shapes = args.shapes or [s for s in SHAPES
                             if SHAPES[s].kind == "mlp" and (not SHAPES[s].gpu_only or gpu)]
    ran = [n for n in makers if any(n in steps.for_shape(SHAPES[s], makers) for s in shapes)]
    for name in [n for n in makers if n not in ran]:
        skipped[name] = f"no step written for {', '.join(s.upper() for s in shapes)}"
        print(f"{name}: skipped, {skipped[name]}")
    env = environment()
    if gpu:
        env["gpu"] = gpu_environment()
    settings = {
        "command": ".venv/bin/python benchmarks/run.py " + shlex.join(argv),
        "shapes": shapes, "dtypes": args.dtypes, "rounds": {s: args.rounds[s] for s in shapes},
        "warmup": args.warmup, "pause": args.pause, "gpu": gpu, "versions": versions(),
        "skipped": {k: v for k, v in skipped.items()
                    if args.impls is None or k in args.impls},
        "implementations": ran, "workloads": {},
    }
    settings["rounds_text"] = ", ".join(f"{s.upper()} {n}" for s, n in
                                        settings["rounds"].items())
    print(report.machine_line(env, gpu))
    checks, results, others = [], {}, {}
    for name in shapes:
        shape = SHAPES[name]
        here = steps.for_shape(shape, makers)
        if not any(n in here for n in ("minigrad", "minigrad-cupy")):
            print(f"{name.upper()}: skipped, it needs a GPU with CuPy (for minigrad on CuPy)")
            continue
        for dtype in args.dtypes:
            problem = make_problem(shape, dtype)
            if shape.kind == "charlm":
                settings["workloads"][name] = workload(problem)
            records, timed, busy = run_shape(shape, dtype, here, args, problem)
            checks += records
            results.setdefault(name, {})[dtype] = timed
            others.setdefault(name, {})[dtype] = busy
            gc.collect()
    rows = report.summary(results)
    found = targets.judge(results)
    for dtype in args.dtypes:
        print(f"\n{dtype}\n{report.timing_table(rows, dtype)}")
    accum = report.accum_table(rows)
    if accum:
        print(f"\n{accum}")
    print(f"\n{report.targets_table(found)}")
    for shape, dtype, cores in report.disturbed(others):
        print(f"WARNING: other processes used {cores:.2f} cores on average while {shape.upper()}"
              f" {dtype} was timed: those times are not this machine's own", file=sys.stderr)
    record = {"environment": env, "settings": settings, "checks": checks, "results": results,
              "interference": others, "summary": rows, "targets": found}
    if args.json:
        with open(args.json, "w") as f:
            json.dump(record, f, indent=1)
    write(args, record)
    return 0


def write(args, record):
    """The plot and the docs page that ``args`` ask for, from one run's ``record`` (and,
    with --lm-results and --gpu-results, the records of a language-model run and of a GPU
    run, each a section of the page)."""
    env, settings, results = record["environment"], record["settings"], record["results"]
    rows = report.summary(results)
    found = targets.judge(results, judged=not earlier_update(env))
    if args.plot:
        report.plot(results, args.plot, env, settings)
    if args.docs:
        assets = os.path.join(os.path.dirname(os.path.abspath(args.docs)), "assets")
        report.plot(results, os.path.join(assets, "benchmarks.png"), env, settings)
        sections = {}
        for key, path in (("lm", args.lm_results), ("gpu", args.gpu_results)):
            if path:
                with open(path) as f:
                    other = json.load(f)
                image = f"assets/benchmarks-{key}.png"
                report.plot(other["results"], os.path.join(assets, os.path.basename(image)),
                            other["environment"], other["settings"])
                sections[key] = (other, path, image)
        with open(args.docs, "w") as f:
            f.write(report.docs_page(rows, found, record["checks"], record["interference"],
                                     env, settings, "assets/benchmarks.png", **sections))


if __name__ == "__main__":
    raise SystemExit(main())
