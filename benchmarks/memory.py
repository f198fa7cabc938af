"""Peak memory of one training step against the micro-batch count: minigrad vs the step
written by hand in NumPy, both seen by tracemalloc (NumPy reports every array buffer to it);
with ``--device gpu``, minigrad on CuPy vs the hand-written CuPy step and PyTorch CUDA, seen
by their GPU allocators.

What is measured is everything the step holds at its peak, from the moment its
implementation exists: the parameters, Adam's state, the gradients, the activations and any
buffers, minus the shared input data. The hand-written step allocates all of that once and
then works in place, so it is the floor; minigrad makes fresh arrays and frees them (the
reverse walk releases each node's arrays as soon as its backward has run; the update
validates, then writes the parameters and Adam's moments in place through a workspace of two
arrays). Each is measured in its own process, on the second step (the first one warms caches),
beside minigrad's theoretical peak (``minigrad.analysis.memory.theoretical_peak``) of one
update. On the CPU it also counts the page faults per step (``faults.py``).

    python benchmarks/memory.py [--shape large] [--dtype float32] [--counts 1,2,4,8,16]
        [--fault-steps 12] [--device cpu|gpu] [--json FILE] [--docs PAGE [--gpu-results FILE]]
    python benchmarks/memory.py --from-json FILE [--gpu-results FILE] --docs PAGE

On the GPU the same quantity is counted by the allocators: CuPy's memory pool through a
memory hook (the bytes of the blocks it hands out less those given back; blocks the pool
caches do not count) and PyTorch's ``torch.cuda.max_memory_allocated`` (likewise), both in
512-byte blocks, less the device copy of the input data. Before measuring, each process
runs one step of a throwaway copy, so that what a library creates once and keeps (cuBLAS's
workspace, which PyTorch takes from its allocator and CuPy does not) counts for none of
them, as BLAS workspace counts for none on the CPU.

The page and the targets (issue 34: minigrad's peak <= 1.10x the hand-written step's on the
CPU, <= 1.10x PyTorch CUDA's on the GPU, at every count) are ``memory_page.py``'s.
"""

import argparse
import dataclasses
import gc
import json
import subprocess
import sys
import tracemalloc
from pathlib import Path

import faults
import memory_page

HERE = Path(__file__).resolve().parent
# Per device: the implementations measured, each in a process of its own.
IMPLS = {"cpu": ("numpy", "minigrad"), "gpu": ("cupy", "torch-cuda", "minigrad-cupy")}


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
    if impl in IMPLS["gpu"]:
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
        workspace = sum(b.nbytes for pair in step.opt.workspace.buffers.values() for b in pair)
        # parameters, Adam's two moments and the update's workspace, made by the first step
        out["held_before"] = 3 * held + workspace
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
    parser.add_argument("--fault-steps", type=int, default=faults.STEPS,
                        help="on the CPU: the steps whose page faults are counted, after one "
                             f"warm-up step (default: {faults.STEPS})")
    parser.add_argument("--device", choices=sorted(IMPLS), default="cpu",
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
    title, table, target = memory_page.summary(data)
    print(f"{title}\n{table}\n\n{target}")
    if "faults" in data:
        print(f"\n{faults.table(data['faults'])}\n\n{faults.target_line(data['faults'])}")
    if args.json and not args.from_json:
        args.json.write_text(json.dumps(data, indent=1))
    if args.docs:
        gpu = (json.loads(args.gpu_results.read_text()), args.gpu_results) \
            if args.gpu_results else None
        args.docs.write_text(memory_page.page(data, gpu))
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
        for impl in IMPLS[args.device]:
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
    if args.device == "cpu":
        data["faults"] = faults.run(args.dtype, args.fault_steps)
    return data


if __name__ == "__main__":
    sys.exit(main())
