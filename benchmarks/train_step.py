"""Time one float32 training step of minigrad against the same step written in NumPy.

The step is forward, mean cross-entropy and backward through a 784-1024-1024-10 ReLU MLP.
Both versions are first checked to compute the same loss and gradients; then they are
timed alternately (so drift in the machine's speed hits both alike) after a warm-up.

    python benchmarks/train_step.py [--batch 4096] [--repeats 10] [--json PATH]
"""

import argparse
import json
import math
import statistics
import time

import numpy as np

from minigrad import nn
from minigrad.engine.tensor import Tensor
from minigrad.nn import functional as F

from common import environment

SIZES = (784, 1024, 1024, 10)
TARGET = 1.3  # minigrad's best time should stay within this factor of hand-written NumPy's


def minigrad_step(model, x, y):
    """Forward, loss, backward with the engine; the gradients land in ``p.grad``."""
    model.zero_grad()
    loss = F.cross_entropy(model(x), y)
    loss.backward()
    return loss.item(), [p.grad for p in model.parameters()]


def numpy_step(weights, x, y):
    """The same step by hand; ``weights`` is [W1, b1, W2, b2, W3, b3], W of shape (out, in).

    Forward a_l = relu(a_{l-1} @ W_l.T + b_l); loss = -mean log softmax(z)[y].
    Backward dz = (softmax(z) - onehot(y)) / N, dW = dz.T @ a, db = sum(dz), and
    da_{l-1} = dz @ W_l masked by relu'(h) = (h > 0).
    """
    n = x.shape[0]
    acts = [x]
    pre = []
    for i in range(0, len(weights), 2):
        h = acts[-1] @ weights[i].T + weights[i + 1]
        pre.append(h)
        acts.append(np.maximum(h, 0) if i + 2 < len(weights) else h)
    z = acts.pop()
    shifted = z - z.max(axis=1, keepdims=True)
    log_p = shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))
    loss = -log_p[np.arange(n), y].mean()
    dz = np.exp(log_p)
    dz[np.arange(n), y] -= 1
    dz *= np.float32(1.0 / n)
    grads = []
    for i in range(len(weights) - 2, -1, -2):
        a = acts.pop()
        grads[:0] = [dz.T @ a, dz.sum(axis=0)]
        if i > 0:
            dz = (dz @ weights[i]) * (pre[i // 2 - 1] > 0)
    return float(loss), grads


def check_same(model, x, y):
    """Assert both steps give the same loss and gradients, up to float32 rounding.

    Both run the same float32 operations, but BLAS and the reductions may sum in different
    orders. Each gradient entry is a sum of K products (K = batch, or 1024 for the hidden
    activations' gradients), and a float32 sum of K signed terms is typically within
    sqrt(K) * u of exact, relative to the array's scale (u = 2^-24; K * u is the rarely
    approached worst case). So we allow 4 sqrt(K) u of the largest entry: a factor 2 for
    two independently rounded results, 2 for the three layers the error passes through.
    At batch 4096 that is 1.5e-5, ten times the gap between this float32 step and the same
    step in float64 (1.4e-6 of the scale, measured with numpy_step on float64 copies).
    """
    loss_mg, grads_mg = minigrad_step(model, Tensor(x), y)
    weights = [p.data for p in model.parameters()]
    loss_np, grads_np = numpy_step(weights, x, y)
    tol = 4.0 * math.sqrt(max(x.shape[0], max(SIZES))) * 2.0**-24
    np.testing.assert_allclose(loss_mg, loss_np, rtol=tol)
    worst = 0.0
    for (name, _), g_mg, g_np in zip(model.named_parameters(), grads_mg, grads_np):
        assert g_mg.dtype == np.float32 and g_np.dtype == np.float32, (g_mg.dtype, g_np.dtype)
        scale = float(np.max(np.abs(g_np)))
        np.testing.assert_allclose(g_mg, g_np, rtol=0, atol=tol * scale, err_msg=name)
        worst = max(worst, float(np.max(np.abs(g_mg - g_np))) / scale)
    return {"loss_minigrad": loss_mg, "loss_numpy": loss_np, "max_grad_diff_rel": worst,
            "tolerance_rel": tol}


def time_steps(steps, repeats, warmup):
    """Seconds per call of each step, calling them in turn; warm-up calls are dropped."""
    times = {name: [] for name in steps}
    for i in range(warmup + repeats):
        for name, step in steps.items():
            start = time.perf_counter()
            step()
            seconds = time.perf_counter() - start
            if i >= warmup:
                times[name].append(seconds)
    return times


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=4096, help="batch size (default: 4096)")
    parser.add_argument("--repeats", type=int, default=10, help="timed steps each (default: 10)")
    parser.add_argument("--warmup", type=int, default=2, help="untimed steps each (default: 2)")
    parser.add_argument("--json", metavar="PATH", help="also write the results to PATH")
    args = parser.parse_args(argv)
    if args.batch < 1 or args.repeats < 1 or args.warmup < 0:
        parser.error("--batch and --repeats must be >= 1, --warmup >= 0")

    env = environment()
    generator = np.random.default_rng(0)
    x = generator.standard_normal((args.batch, SIZES[0])).astype(np.float32)
    y = generator.integers(0, SIZES[-1], size=args.batch)
    model = nn.MLP(list(SIZES), dtype="float32", seed=0)
    check = check_same(model, x, y)
    weights = [p.data for p in model.parameters()]
    x_tensor = Tensor(x)
    times = time_steps({"minigrad": lambda: minigrad_step(model, x_tensor, y),
                        "numpy": lambda: numpy_step(weights, x, y)},
                       args.repeats, args.warmup)

    print(f"one float32 training step, MLP {'-'.join(map(str, SIZES))}, batch {args.batch}, "
          f"best / median of {args.repeats} (after {args.warmup} warm-up)")
    load = env["load_average_1min"]
    print(f"numpy {env['numpy']}, python {env['python']}, {env['machine']}, "
          f"{env['cpu_count']} CPUs (load average {'?' if load is None else f'{load:.2f}'} "
          f"before the run), OPENBLAS_CORETYPE={env['OPENBLAS_CORETYPE'] or 'unset'}")
    for pool in env["threadpools"]:
        print(f"{pool['user_api']}: {pool['internal_api']} {pool.get('version')}, "
              f"kernel {pool.get('architecture')}, {pool['num_threads']} threads "
              f"({pool['library']})")
    print(f"same loss and gradients: loss {check['loss_minigrad']:.6f} vs "
          f"{check['loss_numpy']:.6f}, largest gradient difference "
          f"{check['max_grad_diff_rel']:.1e} of the gradient's scale "
          f"(tolerance {check['tolerance_rel']:.1e})")
    summary = {}
    for name, seconds in times.items():
        summary[name] = {"best_ms": 1e3 * min(seconds),
                         "median_ms": 1e3 * statistics.median(seconds),
                         "all_ms": [1e3 * s for s in seconds]}
        print(f"{name:>9}: {summary[name]['best_ms']:8.1f} ms best  "
              f"{summary[name]['median_ms']:8.1f} ms median")
    ratio = {key: summary["minigrad"][key] / summary["numpy"][key]
             for key in ("best_ms", "median_ms")}
    # The best time is the step's own cost; slower repeats measure whatever else ran.
    verdict = "within" if ratio["best_ms"] <= TARGET else "NOT within"
    print(f"minigrad / numpy: {ratio['best_ms']:.2f} best, {ratio['median_ms']:.2f} median "
          f"({verdict} the {TARGET}x target)")

    if args.json:
        result = {"sizes": SIZES, "batch": args.batch, "repeats": args.repeats,
                  "warmup": args.warmup, "check": check, "times": summary,
                  "ratio_best": ratio["best_ms"], "ratio_median": ratio["median_ms"],
                  "target": TARGET, "environment": env}
        with open(args.json, "w") as f:
            json.dump(result, f, indent=2)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
