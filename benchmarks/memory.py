"""Peak memory of one training step against the micro-batch count: minigrad vs the step
written by hand in NumPy, both seen by tracemalloc (NumPy reports every array buffer to it);
with ``--device gpu``, minigrad on CuPy vs the hand-written CuPy step and PyTorch CUDA, seen
by their GPU allocators.

What is measured is everything the step holds at its peak, from the moment its
implementation exists: the parameters, Adam's state, the gradients, the activations and any
buffers, minus the shared input data. The hand-written step allocates all of that once and
then works in place, so it is the floor; minigrad makes fresh arrays and frees them (the
reverse walk releases each node's arrays as soon as its backward has run). Each is measured in
its own process, on the second step (the first one warms caches), beside minigrad's
theoretical peak (``minigrad.analysis.memory.theoretical_peak``) of one update.

    python benchmarks/memory.py [--shape large] [--dtype float32] [--counts 1,2,4,8,16]
        [--device cpu|gpu] [--json FILE] [--docs PAGE [--gpu-results FILE]]
    python benchmarks/memory.py --from-json FILE [--gpu-results FILE] --docs PAGE

On the GPU the same quantity is counted by the allocators: CuPy's memory pool through a
memory hook (the bytes of the blocks it hands out less those given back; blocks the pool
caches do not count) and PyTorch's ``torch.cuda.max_memory_allocated`` (likewise), both in
512-byte blocks, less the device copy of the input data. Before measuring, each process
runs one step of a throwaway copy, so that what a library creates once and keeps (cuBLAS's
workspace, which PyTorch takes from its allocator and CuPy does not) counts for none of
them, as BLAS workspace counts for none on the CPU.

Targets (issue 10): on the CPU, minigrad's peak <= 1.3x the hand-written step's at every
count; on the GPU, minigrad on CuPy's peak <= 1.3x PyTorch CUDA's at every count.
"""

import argparse
import dataclasses
import gc
import json
import subprocess
import sys
import tracemalloc
from pathlib import Path

HERE = Path(__file__).resolve().parent
TARGET = 1.3
# Per device: the implementations measured, the subject, and the one the target divides by.
DEVICES = {"cpu": (("numpy", "minigrad"), "minigrad", "numpy"),
           "gpu": (("cupy", "torch-cuda", "minigrad-cupy"), "minigrad-cupy", "torch-cuda")}


def build(impl, problem, count):
    """The step of ``impl`` for ``problem``; minigrad's always through ``accumulate.step``
    with ``count`` micro-batches and the plain optimizer (the benchmark's RecordingAdam keeps
    the last gradients alive)."""
    from minigrad import optim

    from common import ADAM
    from steps.hand import HandWritten
    from steps.minigrad_step import MinigradStep
    from steps.torch_step import TorchStep

    if impl in ("numpy", "cupy"):
        return HandWritten(problem) if impl == "numpy" else HandWritten.on_cupy(problem)
    if impl == "torch-cuda":
        return TorchStep.on_cuda(problem)
    step = MinigradStep(problem) if impl == "minigrad" else MinigradStep.on_cupy(problem)
    step.opt = optim.Adam(step.model.parameters(), **ADAM)
    step.micro_batch = problem.shape.batch // count
    return step


def measure(impl, shape_name, dtype, count):
    """Bytes held at the peak of the second step of ``impl`` (one process per call)."""
    from minigrad import nn
    from minigrad.analysis.memory import theoretical_peak

    import steps  # noqa: F401  (before tracing starts: imports allocate too, torch's a lot)
    from common import SHAPES, make_problem

    base = SHAPES[shape_name]
    micro = None if count == 1 else base.batch // count
    shape = dataclasses.replace(base, micro_batch=micro)
    problem = make_problem(shape, dtype)
    if impl in DEVICES["gpu"][0]:
        step, peak = _gpu_peak(impl, problem, count)
    else:
        tracemalloc.start()
        start = tracemalloc.get_traced_memory()[0]
        step = build(impl, problem, count)
        step.step()
        tracemalloc.reset_peak()
        step.step()
        peak = tracemalloc.get_traced_memory()[1] - start
        tracemalloc.stop()
    out = {"implementation": impl, "count": count, "peak": peak}
    if impl.startswith("minigrad"):
        model = step.model
        held = sum(p.data.nbytes for p in model.parameters())
        out["held_before"] = 3 * held  # parameters and Adam's two moments
        out["theory"] = out["held_before"] + theoretical_peak(
            model, nn.CrossEntropyLoss(), step.opt, problem.x, [base.batch // count] * count)
    return out


def _blocks(nbytes):
    """``nbytes`` rounded up to the 512-byte blocks that CuPy's and PyTorch's allocators
    hand out."""
    return -(-nbytes // 512) * 512


def _gpu_peak(impl, problem, count):
    """``(step, peak)``: the bytes the GPU allocator held at the peak of the second step of
    ``impl``, counted from before it was built, less its device copy of the data."""
    warm = build(impl, problem, count)  # creates what a library keeps once (cuBLAS's workspace)
    warm.step()
    del warm
    gc.collect()
    if impl == "torch-cuda":
        import torch

        start = torch.cuda.memory_allocated()
        step = build(impl, problem, count)
        step.step()
        torch.cuda.reset_peak_memory_stats()
        step.step()
        peak = torch.cuda.max_memory_allocated() - start
    else:
        with _pool_counter() as pool:
            step = build(impl, problem, count)
            step.step()
            pool.peak = pool.now
            step.step()
        peak = pool.peak
    return step, peak - _blocks(step.x.nbytes) - _blocks(step.y.nbytes)


def _pool_counter():
    """A CuPy memory hook: ``now``, the bytes of the pool's blocks handed out and not given
    back since it was entered, and ``peak``, the most of ``now``."""
    from cupy.cuda import memory_hook

    class PoolCount(memory_hook.MemoryHook):
        name = "benchmarks.memory.PoolCount"

        def __init__(self):
            self.now = self.peak = 0
            self.blocks = {}  # pointer -> bytes of the blocks handed out since

        def malloc_postprocess(self, device_id, size, mem_size, mem_ptr, pmem_id):
            self.blocks[mem_ptr] = mem_size
            self.now += mem_size
            self.peak = max(self.peak, self.now)

        def free_postprocess(self, device_id, mem_size, mem_ptr, pmem_id):
            self.now -= self.blocks.pop(mem_ptr, 0)  # older blocks never counted

    return PoolCount()


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shape", default="large")
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--counts", default="1,2,4,8,16")
    parser.add_argument("--device", choices=sorted(DEVICES), default="cpu",
                        help="cpu: NumPy through tracemalloc; gpu: CuPy and PyTorch CUDA "
                             "through their allocators")
    parser.add_argument("--json", type=Path)
    parser.add_argument("--docs", type=Path, help="write this run as a Markdown page")
    parser.add_argument("--gpu-results", type=Path, metavar="FILE",
                        help="a --device gpu run's --json, added to the --docs page")
    parser.add_argument("--from-json", type=Path, metavar="FILE",
                        help="render --docs from this saved run instead of measuring")
    parser.add_argument("--one", nargs=2, metavar=("IMPL", "COUNT"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.one:
        print(json.dumps(measure(args.one[0], args.shape, args.dtype, int(args.one[1]))))
        return 0
    data = json.loads(args.from_json.read_text()) if args.from_json else run(args)
    title, table, target = summary(data)
    print(f"{title}\n{table}\n\n{target}")
    if args.json and not args.from_json:
        args.json.write_text(json.dumps(data, indent=1))
    if args.docs:
        gpu = (json.loads(args.gpu_results.read_text()), args.gpu_results) \
            if args.gpu_results else None
        args.docs.write_text(page(data, gpu))
    return 0


def run(args):
    """Measure every implementation of ``args.device`` at every count, each in a process of
    its own; the record that --json writes."""
    from common import environment, gpu_environment

    data = {"shape": args.shape, "dtype": args.dtype, "environment": environment()}
    if args.device == "gpu":
        data |= {"device": "gpu", "gpu": gpu_environment(), "command": "python "
                 "benchmarks/memory.py " + " ".join(sys.argv[1:])}
    rows = []
    for count in [int(c) for c in args.counts.split(",")]:
        row = {"count": count}
        for impl in DEVICES[args.device][0]:
            done = subprocess.run([sys.executable, __file__, "--shape", args.shape, "--dtype",
                                   args.dtype, "--one", impl, str(count)], cwd=HERE,
                                  capture_output=True, text=True)
            if done.returncode != 0:
                raise SystemExit(f"{impl} at {count} micro-batches failed:\n{done.stderr}")
            row[impl] = json.loads(done.stdout)
            print(f"  {impl} at {count} micro-batches: {row[impl]['peak'] / 2**20:.1f} MiB",
                  file=sys.stderr, flush=True)
        rows.append(row)
    data["rows"] = rows
    return data


def summary(data):
    """``(title, table, target line)`` of a run's record."""
    device = data.get("device", "cpu")
    _, subject, reference = DEVICES[device]
    rows = data["rows"]
    worst = max(row[subject]["peak"] / row[reference]["peak"] for row in rows)
    verdict = "met" if worst <= TARGET else "NOT met"
    if device == "cpu":
        target = (f"target: minigrad <= {TARGET}x the hand-written step at every count: "
                  f"worst {worst:.2f}x, {verdict}")
        how = "tracemalloc"
    else:
        target = (f"target: minigrad on CuPy <= {TARGET}x PyTorch CUDA at every count: "
                  f"worst {worst:.2f}x, {verdict}")
        how = "GPU allocators"
    title = (f"peak memory of one Adam step, {data['shape'].upper()} {data['dtype']} ({how}, "
             "MiB)")
    table = _table(rows) if device == "cpu" else _gpu_table(rows)
    return title, table, target


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


def _gpu_table(rows):
    mib = 2.0**20
    lines = ["| micro-batches | hand-written CuPy (MiB) | PyTorch CUDA (MiB) | minigrad on CuPy "
             "(MiB) | minigrad / PyTorch | minigrad / hand | minigrad's theory (MiB) | "
             "measured / theory |", "|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for row in rows:
        hand, torch, mg = (row[name]["peak"] for name in DEVICES["gpu"][0])
        theory = row["minigrad-cupy"]["theory"]
        lines.append(f"| {row['count']} | {hand / mib:.1f} | {torch / mib:.1f} | "
                     f"{mg / mib:.1f} | {mg / torch:.2f}x | {mg / hand:.2f}x | "
                     f"{theory / mib:.1f} | {mg / theory:.3f} |")
    return "\n".join(lines)


def page(data, gpu=None):
    """The Markdown page of a CPU run, with a GPU run's section when given (``gpu``: its
    --json record and the file it is saved in)."""
    from common import SHAPES, blas_line

    env = data["environment"]
    shape = SHAPES[data["shape"]]
    model = "MLP " + "-".join(map(str, shape.sizes))
    counts = ", ".join(str(row["count"]) for row in data["rows"])
    _, table, target = summary(data)
    text = f"""# Memory benchmark

Generated by `python benchmarks/memory.py --docs docs/benchmarks-memory.md` (part of
`make bench`) on {env["date"]}: {env["cpu"]}, {env["cores"]} cores, NumPy {env["numpy"]},
{blas_line(env)}.

The peak bytes held during one Adam step of the {data["shape"].upper()} shape ({model}, a
global batch of {shape.batch}, {data["dtype"]}) split into {counts} micro-batches, as `tracemalloc`
sees them: parameters, Adam's moments, gradients,
activations and temporaries, not the shared input data. The hand-written NumPy step
allocates all its buffers once and works in place, so it is the floor; minigrad makes fresh
arrays and its reverse walk frees each node's arrays once its backward has run. Each number
is measured in a process of its own, on the second step. The theory is
`minigrad.analysis.memory.theoretical_peak` plus the parameters and Adam's moments.

{table}

{target}.
"""
    return text if gpu is None else text + "\n" + _gpu_section(*gpu)


def _gpu_section(data, path):
    import shlex

    from common import SHAPES, gpu_line

    command = shlex.split(data["command"])
    if "--json" in command:  # the file it wrote on the GPU machine is the one saved here
        command[command.index("--json") + 1] = str(path)
    shape = SHAPES[data["shape"]]
    counts = ", ".join(str(row["count"]) for row in data["rows"])
    _, table, target = summary(data)
    return f"""## On a GPU

Measured with `{shlex.join(command)}` (`make bench-gpu`; `make bench` and
`make bench-pages` render its record, `{path}`, here) on {data["environment"]["date"]}:
{gpu_line(data["gpu"])}.

The same step ({data["shape"].upper()}, {data["dtype"]}, {counts} micro-batches; {shape.batch}
samples in all) on the GPU, as its allocators count it: CuPy's memory pool through a memory
hook (blocks handed out less blocks given back; blocks the pool caches do not count) and
PyTorch's `torch.cuda.max_memory_allocated`, both in 512-byte blocks, less the device copy
of the input data. Before measuring, each process runs one step of a throwaway copy, so
that what a library creates once and keeps (cuBLAS's workspace, which PyTorch takes from its
allocator) counts for none of them. PyTorch runs its default CUDA code path: `torch.optim.Adam`
with `foreach` and, with micro-batches, `(loss sum / N).backward()` per micro-batch. The
theory counts Adam's NumPy path (m, v, one temporary and the denominator); on CuPy minigrad's
Adam takes the plain path, which holds one more array of a parameter's size at its peak.

{table}

{target}.
"""


if __name__ == "__main__":
    sys.exit(main())
