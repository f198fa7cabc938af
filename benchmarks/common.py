"""What the benchmarks share: the shapes, the problem (data and initial weights), Adam's
constants, an in-place Adam, the interleaved timer and a description of the machine."""

import datetime
import math
import os
import platform
import statistics
import sys
import time
from dataclasses import dataclass

import numpy as np

from minigrad import nn

from language import LanguageShape

# torch.optim.Adam's defaults; every implementation takes these.
ADAM = {"lr": 1e-3, "betas": (0.9, 0.999), "eps": 1e-8}


@dataclass(frozen=True)
class Shape:
    """A training step's size: ``batch`` samples through an MLP of layer ``sizes``; with
    ``micro_batch`` the batch is split into micro-batches of that size (one update)."""

    name: str
    batch: int
    sizes: tuple
    micro_batch: int | None = None
    gpu_only: bool = False
    kind = "mlp"

    @property
    def micro_batches(self):
        """``[(start, stop), ...]``: the slices one update adds up (one slice: no split)."""
        size = self.micro_batch or self.batch
        return [(i, min(i + size, self.batch)) for i in range(0, self.batch, size)]

    def describe(self):
        split = f" as {len(self.micro_batches)} x {self.micro_batch}" if self.micro_batch else ""
        return f"batch {self.batch}{split}, MLP {'-'.join(map(str, self.sizes))}"


SHAPES = {
    "small": Shape("small", 64, (784, 128, 10)),
    "large": Shape("large", 4096, (784, 1024, 1024, 10)),
    "accum": Shape("accum", 4096, (784, 1024, 1024, 10), micro_batch=512),
    "xl": Shape("xl", 16384, (784, 4096, 4096, 10), gpu_only=True),
    # issue 36: one update of a character language model, recorded on its own (language.py)
    "lm": LanguageShape("lm", 256, context=8, embedding_dim=16, hidden=256),
}


@dataclass(frozen=True)
class Problem:
    """Identical inputs for every implementation: ``x`` (batch, sizes[0]) of ``dtype``,
    integer targets ``y``, and ``weights``, minigrad's initial parameters as NumPy arrays
    in ``named_parameters`` order (W of shape (out, in), then b, per layer). For the
    language model, ``x`` (rows, L, C) and ``y`` (rows, L) are token ids and targets, and
    the embedding table comes first."""

    shape: Shape | LanguageShape
    dtype: str
    x: np.ndarray
    y: np.ndarray
    weights: tuple
    names: tuple


def make_problem(shape, dtype, seed=0):
    """Standard normal inputs, uniform labels, and ``nn.MLP(sizes, dtype=dtype, seed=0)``;
    for the language model, the padded windows of the names and ``nn.CharMLP``."""
    if shape.kind == "charlm":
        windows, vocab = shape.windows()
        x, y = windows.x, windows.y
        model = nn.CharMLP(vocab, shape.context, shape.embedding_dim, shape.hidden, seed=seed,
                           dtype=dtype)
    else:
        rng = np.random.default_rng(seed)
        x = rng.standard_normal((shape.batch, shape.sizes[0])).astype(dtype)
        y = rng.integers(0, shape.sizes[-1], size=shape.batch)
        model = nn.MLP(list(shape.sizes), dtype=dtype, seed=seed)
    named = [(name, np.array(p.data, copy=True)) for name, p in model.named_parameters()]
    return Problem(shape, dtype, x, y, tuple(w for _, w in named), tuple(n for n, _ in named))


def unit_roundoff(dtype):
    """u = 2^-p for p-bit significands: 2^-24 (float32), 2^-53 (float64)."""
    return float(np.finfo(dtype).eps) / 2


class InPlaceAdam:
    """``torch.optim.Adam`` (single-tensor path) on arrays of ``xp``, updating in place.

    m <- b1 m + (1 - b1) g;  v <- b2 v + (1 - b2) g^2;
    p <- p - lr / (1 - b1^t) * m / (sqrt(v) / sqrt(1 - b2^t) + eps).
    The bias corrections are computed in Python floats, as torch does.
    """

    def __init__(self, xp, params, lr, betas, eps):
        self.xp, self.lr, self.betas, self.eps = xp, lr, betas, eps
        self.m = [xp.zeros_like(p) for p in params]
        self.v = [xp.zeros_like(p) for p in params]
        self.tmp = [xp.empty_like(p) for p in params]
        self.t = 0

    def step(self, params, grads):
        xp, (b1, b2) = self.xp, self.betas
        self.t += 1
        step_size = self.lr / (1 - b1**self.t)
        bias_correction2_sqrt = math.sqrt(1 - b2**self.t)
        for p, g, m, v, tmp in zip(params, grads, self.m, self.v, self.tmp):
            m *= b1
            xp.multiply(g, 1 - b1, out=tmp)
            m += tmp
            v *= b2
            xp.multiply(g, g, out=tmp)
            tmp *= 1 - b2
            v += tmp
            xp.sqrt(v, out=tmp)
            tmp /= bias_correction2_sqrt
            tmp += self.eps
            xp.divide(m, tmp, out=tmp)
            tmp *= step_size
            p -= tmp


def interleaved(entries, rounds, warmup, pause, min_sample, gate=None):
    """Seconds per call of each entry, measured round-robin.

    Returns ``({name: (per_round, kernel, inner)}, log)``: per round, the seconds per call
    and the system (kernel) seconds per call, where page faults on fresh memory show.
    ``entries`` maps names to zero-argument callables. Every round calls each entry once
    (in a rotated order, so none always follows the same one), so drift in the machine's
    speed hits all alike. Before each entry the timer sleeps ``pause`` seconds: a BLAS or
    OpenMP pool that has just finished spin-waits for a while and would steal a core from
    the next entry (OpenBLAS's threads spin ~0.1 s; that doubled a torch matmul here). A
    sample repeats the call ``inner`` times, chosen from the fastest warm-up call so that
    a sample lasts ``min_sample`` seconds, and divides by ``inner``.

    ``log`` has one record per round: how many cores other processes used during it
    (``other_cores``, None without /proc/stat), its duration, and whether it was kept.
    With a ``gate`` (an ``IdleGate``), a round during which other processes were busy is
    dropped and run again once the machine is quiet, while the gate's time lasts.
    """
    names = list(entries)
    fastest = dict.fromkeys(names, math.inf)
    for _ in range(warmup):
        for name in names:
            time.sleep(pause)
            start = time.perf_counter()
            entries[name]()
            fastest[name] = min(fastest[name], time.perf_counter() - start)
    inner = {name: max(1, math.ceil(min_sample / fastest[name])) for name in names}
    samples = {name: ([], []) for name in names}
    log = []
    while len(samples[names[0]][0]) < rounds:
        r = len(log)
        this_round = {}
        before, start = cpu_seconds(), time.perf_counter()
        for name in names[r % len(names):] + names[:r % len(names)]:
            fn, k = entries[name], inner[name]
            time.sleep(pause)
            kernel = os.times().system
            begin = time.perf_counter()
            for _ in range(k):
                fn()
            this_round[name] = ((time.perf_counter() - begin) / k,
                                (os.times().system - kernel) / k)
        wall = time.perf_counter() - start
        busy = other_cores(before, cpu_seconds(), wall)
        kept = gate is None or busy is None or busy <= gate.threshold or not gate.wait()
        log.append({"other_cores": busy, "seconds": wall, "kept": kept})
        if kept:
            for name, (seconds, kernel) in this_round.items():
                samples[name][0].append(seconds)
                samples[name][1].append(kernel)
    return {name: (*samples[name], inner[name]) for name in names}, log


class IdleGate:
    """Waits, up to ``budget`` seconds in all, for other processes to use at most
    ``threshold`` cores (measured over 1 s windows)."""

    def __init__(self, budget, threshold=0.1):
        self.budget, self.threshold, self.waited = budget, threshold, 0.0

    def wait(self):
        """Wait for a quiet second; False (keep the disturbed round) once the budget is
        spent."""
        print(f"  (other processes are busy: waiting up to {self.budget - self.waited:.0f} s "
              "for a quiet second to redo this round)", flush=True)
        while self.waited < self.budget:
            before = cpu_seconds()
            time.sleep(1.0)
            self.waited += 1.0
            if other_cores(before, cpu_seconds(), 1.0) <= self.threshold:
                return True
        return False


def median_ms(seconds):
    return 1e3 * statistics.median(seconds)


def spread(seconds):
    """The interquartile range as a fraction of the median: how noisy the rounds were."""
    if len(seconds) < 2:
        return 0.0
    q1, _, q3 = statistics.quantiles(seconds, n=4)
    return (q3 - q1) / statistics.median(seconds)


def cpu_seconds():
    """``(busy, stolen, own)``: seconds of CPU that the whole machine spent busy and that
    the hypervisor took away (summed over cores, from /proc/stat), and this process's own;
    ``None`` where /proc/stat is missing. The difference of two readings tells how much
    else ran during a measurement: other programs compete for the same cores."""
    try:
        with open("/proc/stat") as f:
            fields = [int(v) for v in f.readline().split()[1:]]
    except OSError:
        return None
    hz = os.sysconf("SC_CLK_TCK")
    user, nice, system, _idle, _iowait, irq, softirq, steal = (fields + [0] * 8)[:8]
    own = os.times()
    return (user + nice + system + irq + softirq) / hz, steal / hz, own.user + own.system


def other_cores(before, after, wall):
    """Cores used on average over ``wall`` seconds by everything but this process, from
    two ``cpu_seconds()`` readings (stolen time counts as used); None without them."""
    if before is None or after is None:
        return None
    busy, steal, own = (b - a for a, b in zip(before, after))
    return max(busy + steal - own, 0.0) / wall


def cpu_model():
    """The "model name" line of /proc/cpuinfo (or what ``platform`` knows elsewhere)."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def environment():
    """What CPU timings depend on: versions, BLAS (library, version, kernel, threads),
    CPU, core count, OPENBLAS_CORETYPE, the load before the run, the commit measured. No
    host name."""
    from threadpoolctl import threadpool_info

    from provenance import commit

    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        cores = os.cpu_count()
    return {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "cpu": cpu_model(),
        "cores": cores,
        "machine": platform.machine(),
        "system": f"{platform.system()} {platform.release()}",
        "numpy": np.__version__,
        "python": sys.version.split()[0],
        "cpu_count": os.cpu_count(),
        # Other processes on the cores slow a spin-waiting BLAS pool far more than their share.
        "load_average_1min": os.getloadavg()[0] if hasattr(os, "getloadavg") else None,
        "OPENBLAS_CORETYPE": os.environ.get("OPENBLAS_CORETYPE"),
        "threadpools": [{k: pool.get(k) for k in ("user_api", "internal_api", "version",
                                                  "architecture", "num_threads")}
                        | {"library": os.path.basename(pool["filepath"])}
                        for pool in threadpool_info()],
    } | commit()


def blas_line(env):
    """One line per BLAS pool: library, version, kernel, threads."""
    return "; ".join(f"{p['internal_api']} {p['version']} ({p['architecture']}), "
                     f"{p['num_threads']} threads"
                     for p in env["threadpools"] if p["user_api"] == "blas") or "no BLAS found"


def gpu_environment():
    """What GPU timings depend on: the GPU, its driver, the CUDA runtime CuPy uses, the
    versions of CuPy and PyTorch (and the CUDA PyTorch was built for); None without a GPU."""
    import importlib.util
    import subprocess

    if importlib.util.find_spec("cupy") is None:
        return None
    import cupy

    try:
        props = cupy.cuda.runtime.getDeviceProperties(0)
    except cupy.cuda.runtime.CUDARuntimeError:
        return None

    def version(v):  # CUDA writes 12.4 as 12040
        return f"{v // 1000}.{v % 1000 // 10}"

    found = {"name": props["name"].decode(), "memory_gib": props["totalGlobalMem"] / 2**30,
             "cuda_runtime": version(cupy.cuda.runtime.runtimeGetVersion()),
             "cuda_driver": version(cupy.cuda.runtime.driverGetVersion()),
             "cupy": cupy.__version__}
    try:
        smi = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=30)
        found["driver"] = smi.stdout.split()[0] if smi.returncode == 0 else None
    except (OSError, IndexError, subprocess.TimeoutExpired):
        found["driver"] = None
    if importlib.util.find_spec("torch") is not None:
        import torch

        found["torch"], found["torch_cuda"] = torch.__version__, torch.version.cuda
    return found


def gpu_line(gpu):
    """The GPU and its software in one line."""
    line = (f"{gpu['name']} ({gpu['memory_gib']:.0f} GiB), driver {gpu['driver']}, "
            f"CUDA runtime {gpu['cuda_runtime']} (driver API {gpu['cuda_driver']}), "
            f"CuPy {gpu['cupy']}")
    if gpu.get("torch"):
        line += f", PyTorch {gpu['torch']} (CUDA {gpu['torch_cuda']})"
    return line
