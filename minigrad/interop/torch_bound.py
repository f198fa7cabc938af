"""The rounding bound of ``check_accumulation`` (``minigrad.interop.torch``), for any torch
model: how far an accumulated gradient may be from the full-batch one in floating point.

    |g_acc - g_ref| <= 2 gamma_{N+1} S + 2 gamma_m kappa S_norm      (elementwise)

* S = (1/n) sum_i |a_i|, a_i the gradient of sample i's summed loss (a backward of each row
  of the full-batch output), n the item count: both runs sum the same N terms in some
  order, each sum within gamma_{N+1} of exact (Higham, *Accuracy and Stability of Numerical
  Algorithms*, 3.1), so together 2 gamma_{N+1} S. Scaling by a power of two (``GradScaler``)
  is exact and adds nothing; so is a sum over simulated ranks (more terms of the same sum).
* m = L (6W + 60) + 2C + 10 roundings along one sample's forward and backward pass (L
  modules with parameters, W their widest dimension, C the output's last size), kappa >= 1
  how much a normalisation or MSE's residual amplifies them, S_norm = (1/n) sum_i max|a_i|:
  the first-order model of ``minigrad.analysis.bounds`` (its docstring derives it).

gamma_m = m u / (1 - m u), u the unit roundoff of the parameters' dtype (2^-53 for float64,
2^-24 for float32).
"""

import copy
import math

import torch

UNIT_ROUNDOFF = {torch.float64: 2.0**-53, torch.float32: 2.0**-24,
                 torch.bfloat16: 2.0**-8, torch.float16: 2.0**-11}
NORMS = (torch.nn.LayerNorm, torch.nn.GroupNorm, torch.nn.modules.batchnorm._BatchNorm)


def gamma(m, u):
    """Higham's gamma_m = m u / (1 - m u) (infinite where m u >= 1: no bound)."""
    return m * u / (1 - m * u) if m * u < 1 else math.inf


def count_items(loss_fn, y):
    """Items of ``y`` for a mean loss: kept targets of an integer ``y`` (``ignore_index``
    of ``loss_fn``, else -100), every element of a floating ``y``."""
    if y.is_floating_point():
        return y.numel()
    return int((y != getattr(loss_fn, "ignore_index", -100)).sum())


def _kappa(model, loss_fn, x, y):
    """kappa >= 1 and the output: max (|W||h| + |b| + mean) / sigma per normalisation group,
    max (|out| + |y|) / max |out - y| for MSE (``minigrad.analysis.bounds.condition_number``)."""
    magnitude, factors = {}, [1.0]

    def linear(module, inputs, out):
        w, b = module.weight.abs(), module.bias
        magnitude[id(out)] = inputs[0].abs() @ w.T + (0 if b is None else b.abs())

    def norm(module, inputs):
        z = inputs[0]
        mag = magnitude.get(id(z), z.abs())
        if isinstance(module, torch.nn.GroupNorm):
            z, mag = z.reshape(z.shape[0], module.num_groups, -1), mag.reshape(z.shape[0],
                                                                          module.num_groups, -1)
        elif isinstance(module, torch.nn.LayerNorm):
            z, mag = z.reshape(*z.shape[:1], -1), mag.reshape(*z.shape[:1], -1)
        else:  # BatchNorm: each feature over the batch
            z, mag = z.transpose(0, -1).reshape(z.shape[1], -1), mag.transpose(0, -1).reshape(
                z.shape[1], -1)
        sigma = (z.var(dim=-1, unbiased=False, keepdim=True) + module.eps).sqrt()
        ratio = (mag + mag.mean(dim=-1, keepdim=True)) / sigma
        factors.append(max(1.0, float(ratio.max())))

    hooks = [m.register_forward_hook(linear) for m in model.modules()
             if isinstance(m, torch.nn.Linear)]
    hooks += [m.register_forward_pre_hook(norm) for m in model.modules() if isinstance(m, NORMS)]
    try:
        with torch.no_grad():
            out = model(x)
    finally:
        for hook in hooks:
            hook.remove()
    if isinstance(loss_fn, torch.nn.MSELoss):
        residual = float((out - y).abs().max())
        factors.append(max(1.0, float((out.abs() + y.abs()).max()) / residual)
                       if residual > 0 else math.inf)
    return math.prod(factors), out


def _roundings(model, out):
    """m = L (6W + 60) + 2C + 10 (``minigrad.analysis.bounds.per_item_roundings``)."""
    leaves = [m for m in model.modules() if not list(m.children())
              and any(True for _ in m.parameters(recurse=False))]
    width = max([max(p.shape) for m in leaves for p in m.parameters(recurse=False)] or [1])
    classes = out.shape[-1] if out.ndim > 1 else 1
    return len(leaves) * (6 * width + 60) + 2 * classes + 10


def gradient_bound(model, loss_fn, x, y, seed=0):
    """Name -> elementwise float64 bound on |g_acc - g_ref| (the module docstring's formula)."""
    model = copy.deepcopy(model)
    params = {name: p for name, p in model.named_parameters() if p.requires_grad}
    u = UNIT_ROUNDOFF.get(next(iter(params.values())).dtype, 2.0**-24)
    torch.manual_seed(seed)
    kappa, _ = _kappa(model, loss_fn, x, y)
    torch.manual_seed(seed)
    out = model(x)
    total = {name: torch.zeros_like(p, dtype=torch.float64) for name, p in params.items()}
    s_norm, n = 0.0, count_items(loss_fn, y)
    for i in range(x.shape[0]):
        items = count_items(loss_fn, y[i:i + 1])
        if items == 0:
            continue
        grads = torch.autograd.grad(loss_fn(out[i:i + 1], y[i:i + 1]) * items,
                                    list(params.values()), retain_graph=True, allow_unused=True)
        grads = [torch.zeros_like(p) if g is None else g for p, g in zip(params.values(), grads)]
        s_norm += max(float(g.abs().max()) for g in grads)
        for name, g in zip(params, grads):
            total[name] += g.double().abs()
    per_item = 2 * gamma(_roundings(model, out), u) * kappa * s_norm
    summation = 2 * gamma(x.shape[0] + 1, u)
    return {name: (summation * s + per_item) / max(n, 1) for name, s in total.items()}


def clipped_bound(bound, raw, max_norm, dtype):
    """The bound after ``clip_grad_norm_(max_norm)``: g' = c g, c = min(1, max_norm / (|g| +
    1e-6)). A gap d in g moves |g| by at most |d|_2 <= |b|_2, so c by a relative
    |b|_2 / |g|, and c g rounds once per run:

        |g'_acc - g'_ref| <= c b + c |g| (|b|_2 / |g|_2 + 2 gamma_2)

    (``raw`` is the unclipped full-batch gradient g, name -> tensor)."""
    u = UNIT_ROUNDOFF.get(dtype, 2.0**-24)
    norm = math.sqrt(sum(float((g.double() ** 2).sum()) for g in raw.values()))
    b_norm = math.sqrt(sum(float((b ** 2).sum()) for b in bound.values()))
    c = min(1.0, max_norm / (norm + 1e-6))
    moved = b_norm / norm + 2 * gamma(2, u) if norm > 0 else 0.0
    return {name: c * b + c * raw[name].double().abs() * moved for name, b in bound.items()}
