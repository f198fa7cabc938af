"""The rounding bound of ``check_accumulation`` (``minigrad.interop.torch``), for any torch
model, from one full-batch pass: how far an accumulated gradient may be from the full-batch
one in floating point.

    |g_acc - g_ref| <= 2 gamma_{T+1} S + 2 gamma_m kappa S_norm      (elementwise)

* S = sum over the T terms of the parameter's gradient of |term|. A Linear layer's weight
  gradient is sum_rows delta_r^T h_r (delta the gradient at its output, h its input, a row a
  sample or a token of one), so S = |delta|^T |h|: one matrix product of what the layer saw
  in the full-batch pass, captured by hooks (``BoundRecorder``); the bias has S = sum |delta|,
  an Embedding the |delta| added at each index, a normalisation's affine parameters
  sum |delta| |x_hat| and sum |delta|. Both runs add the same T terms in some order, each
  within gamma_{T+1} of exact (Higham, *Accuracy and Stability of Numerical Algorithms*,
  3.1), so together 2 gamma_{T+1} S: rigorous. A power-of-two scale (``GradScaler``) is exact
  and adds nothing; so is a sum over simulated ranks (more terms of the same sum).
* The per-item terms are rounded differently in a micro-batch and in the full batch (BLAS
  picks kernels by shape). m counts the roundings along one sample's forward and backward
  pass, layer by layer from the sizes each layer actually used: in + out + 20 per Linear (an
  inner product each way, the bias, an activation), 4 D + 20 per normalisation over groups of
  D values (two statistics each way), 20 + 2 x (its input's last size) for any other module
  without children, 2 C + 10 for the loss over C outputs. kappa >= 1 is how much the
  normalisations (and MSE's residual) amplify them, the product over the layers of each
  one's worst group: (max (|W||h| + |b|) + mean) / max |z - mean|, the rounding of the
  centred input (the magnitudes of a Linear layer's inner product, and of the mean) against
  its largest value, normwise like the term it scales (``minigrad.analysis.bounds`` divides
  by sigma elementwise, which compounds to 5^L over L LayerNorms of Gaussian inputs where
  nothing cancels). S_norm = sum_i max |a_i|, a_i
  sample i's share of the gradient, bounded per layer by max |delta_i| max |h_i| (summed over
  a sample's tokens). This term is a first-order model, normwise because cancellation inside
  one sample's computation makes a componentwise one false (``minigrad.analysis.bounds``).

gamma_m = m u / (1 - m u), u the unit roundoff of the dtype (2^-53 for float64, 2^-24 for
float32); infinite where m u >= 1 (no bound). A parameter the hooks do not cover (a module
type not listed, a weight used outside its module's forward) is bounded from per-sample
gradients (one backward per sample, ``per_sample_sums``) instead.
"""

import math

import torch
import torch.nn.functional as F

UNIT_ROUNDOFF = {torch.float64: 2.0**-53, torch.float32: 2.0**-24,
                 torch.bfloat16: 2.0**-8, torch.float16: 2.0**-11}
NORMS = (torch.nn.LayerNorm, torch.nn.GroupNorm, torch.nn.RMSNorm,
         torch.nn.modules.batchnorm._BatchNorm)


def gamma(m, u):
    """Higham's gamma_m = m u / (1 - m u) (infinite where m u >= 1: no bound)."""
    return m * u / (1 - m * u) if m * u < 1 else math.inf


def count_items(loss_fn, y):
    """Items of ``y`` for a mean loss: kept targets of an integer ``y`` (``ignore_index``
    of ``loss_fn``, else -100), every element of a floating ``y``."""
    if y.is_floating_point():
        return y.numel()
    return int((y != getattr(loss_fn, "ignore_index", -100)).sum())


def _normalized(module, x):
    """x_hat of a normalisation without its affine parameters (what its weight multiplies)."""
    if isinstance(module, torch.nn.LayerNorm):
        return F.layer_norm(x, module.normalized_shape, eps=module.eps)
    if isinstance(module, torch.nn.RMSNorm):
        return F.rms_norm(x, module.normalized_shape, eps=module.eps)
    if isinstance(module, torch.nn.GroupNorm):
        return F.group_norm(x, module.num_groups, eps=module.eps)
    batch_stats = module.training or module.running_mean is None
    return F.batch_norm(x, None if batch_stats else module.running_mean,
                        None if batch_stats else module.running_var,
                        training=batch_stats, eps=module.eps)


def _group_size(module, x):
    if isinstance(module, (torch.nn.LayerNorm, torch.nn.RMSNorm)):
        return math.prod(module.normalized_shape)
    if isinstance(module, torch.nn.GroupNorm):
        return x[0].numel() // module.num_groups
    return x.numel() // x.shape[1]


class BoundRecorder:
    """Forward and gradient hooks that gather S, the term counts T, S_norm, m and kappa
    during one full-batch forward and backward (the module docstring's quantities)."""

    def __init__(self, model, samples, need_kappa):
        self.samples, self.need_kappa = samples, need_kappa
        self.sums, self.terms = {}, {}
        self.sample_max, self.extra = None, 0.0
        self.roundings, self.factors, self.magnitude = 0, [1.0], {}
        self.handles = []
        for module in model.modules():
            if isinstance(module, (torch.nn.Linear, torch.nn.Embedding)):
                self.handles.append(module.register_forward_hook(self._affine))
            elif isinstance(module, NORMS):
                self.handles.append(module.register_forward_hook(self._norm))
            elif not list(module.children()):
                self.handles.append(module.register_forward_hook(self._other))

    def remove(self):
        for handle in self.handles:
            handle.remove()

    def _add(self, param, total, rows, per_sample):
        if param is None or not param.requires_grad:
            return
        key = id(param)
        self.sums[key] = self.sums.get(key, 0) + total.double()
        self.terms[key] = self.terms.get(key, 0) + rows
        per_sample = per_sample.double()
        if per_sample.numel() % self.samples == 0:
            per_sample = per_sample.reshape(self.samples, -1).sum(1)
            self.sample_max = (per_sample if self.sample_max is None
                               else torch.maximum(self.sample_max, per_sample))
        else:  # rows that are not whole samples: every sample may hold all of them
            self.extra += float(per_sample.sum())

    def _affine(self, module, inputs, out):
        inp = inputs[0].detach()
        linear = isinstance(module, torch.nn.Linear)
        self.roundings += module.in_features + module.out_features + 20 if linear else 4
        if linear and self.need_kappa:
            with torch.no_grad():
                mag = inp.abs() @ module.weight.abs().T
                mag = mag if module.bias is None else mag + module.bias.abs()
                self.magnitude[id(out)] = (out, mag)  # the tensor too: ids are reused
        if out.requires_grad:
            out.register_hook(lambda g: self._affine_grad(module, inp, g.detach()))

    def _affine_grad(self, module, inp, g):
        width = g.shape[-1]
        d = g.reshape(-1, width).abs().double()
        if isinstance(module, torch.nn.Embedding):
            total = torch.zeros(module.weight.shape, dtype=torch.float64, device=g.device)
            total.index_add_(0, inp.reshape(-1), d)
            self._add(module.weight, total, d.shape[0], d.amax(-1))
            return
        h = inp.reshape(-1, inp.shape[-1]).abs().double()
        d_max, h_max = d.amax(-1), h.amax(-1)
        self._add(module.weight, d.T @ h, d.shape[0], d_max * h_max)
        self._add(module.bias, d.sum(0), d.shape[0], d_max)

    def _norm(self, module, inputs, out):
        x = inputs[0].detach()
        self.roundings += 4 * _group_size(module, x) + 20
        if self.need_kappa:
            held, mag = self.magnitude.get(id(inputs[0]), (None, None))
            self.factors.append(_kappa(module, x, mag if held is inputs[0] else x.abs()))
        if out.requires_grad and module.weight is not None:
            with torch.no_grad():
                x_hat = _normalized(module, x)
            out.register_hook(lambda g: self._norm_grad(module, x_hat, g.detach()))

    def _norm_grad(self, module, x_hat, g):
        d = g.abs().double()
        last = isinstance(module, (torch.nn.LayerNorm, torch.nn.RMSNorm))
        for param, term in ((module.weight, d * x_hat.abs().double()),
                            (getattr(module, "bias", None), d)):
            if param is None:
                continue
            # each sample's share, shaped like the parameter: the affine dims last (LayerNorm,
            # RMSNorm) or the channels along dim 1 (GroupNorm, BatchNorm)
            per_sample = (term.reshape(g.shape[0], -1, *param.shape).sum(1) if last
                          else term.reshape(g.shape[0], g.shape[1], -1).sum(-1))
            self._add(param, per_sample.sum(0), g.numel() // param.numel(),
                      per_sample.reshape(g.shape[0], -1).amax(1))

    def _other(self, module, inputs, out):
        last = inputs[0].shape[-1] if inputs and torch.is_tensor(inputs[0]) and inputs[
            0].ndim else 1
        self.roundings += 20 + 2 * last

    def s_norm(self):
        return (0.0 if self.sample_max is None else float(self.sample_max.sum())) + self.extra


def _kappa(module, z, mag):
    """max over the normalisation groups of ``module`` of (max (|W||h| + |b|) + mean) /
    max |z - mean| (the mean 0 for RMSNorm): how much the centring amplifies the rounding of
    its input, relative to the largest normalised value (normwise, as the term it scales)."""
    if isinstance(module, torch.nn.GroupNorm):
        z, mag = (t.reshape(t.shape[0], module.num_groups, -1) for t in (z, mag))
    elif isinstance(module, (torch.nn.LayerNorm, torch.nn.RMSNorm)):
        z, mag = (t.reshape(-1, math.prod(module.normalized_shape)) for t in (z, mag))
    else:  # BatchNorm: each feature over the batch
        z, mag = (t.transpose(0, 1).reshape(t.shape[1], -1) for t in (z, mag))
    centred = isinstance(module, torch.nn.RMSNorm)
    spread = (z if centred else z - z.mean(dim=-1, keepdim=True)).abs().amax(dim=-1)
    top = mag.amax(dim=-1) + (0 if centred else mag.mean(dim=-1))
    ratio = torch.where(spread > 0, top / spread.clamp_min(1e-300), torch.where(
        top > 0, math.inf, 1.0))
    return max(1.0, float(ratio.max()))


def mse_factor(loss_fn, out, y):
    """kappa's factor for MSE: max (|out| + |y|) / max |out - y| (>= 1)."""
    if not isinstance(loss_fn, torch.nn.MSELoss):
        return 1.0
    residual = float((out - y).abs().max())
    return max(1.0, float((out.abs() + y.abs()).max()) / residual) if residual > 0 else math.inf


def _rows(out, i):
    """Sample i of a model's output: row i of a tensor, or of each tensor in a tuple, list or
    dict (a ``ModelOutput`` keeps its type where it can be rebuilt from its items)."""
    if torch.is_tensor(out):
        return out[i:i + 1]
    if isinstance(out, dict):
        items = {k: _rows(v, i) for k, v in out.items()}
        try:
            return type(out)(**items)
        except TypeError:
            return items
    if isinstance(out, (list, tuple)):
        return type(out)(_rows(v, i) for v in out)
    return out


def per_sample_sums(model, loss_fn, x, y, params, n):
    """S and the per-sample maxima of ``params`` (name -> parameter of ``model``) from one
    backward per sample: the bound of parameters the hooks do not cover."""
    out = model(x)
    sums = {name: torch.zeros_like(p, dtype=torch.float64) for name, p in params.items()}
    s_norm = 0.0
    for i in range(x.shape[0]):
        items = count_items(loss_fn, y[i:i + 1])
        if items == 0:
            continue
        grads = torch.autograd.grad(loss_fn(_rows(out, i), y[i:i + 1]) * (items / n),
                                    list(params.values()), retain_graph=True,
                                    allow_unused=True)
        grads = [g.abs().double() for g in grads if g is not None]
        s_norm += max((float(g.max()) for g in grads), default=0.0)
        for name, g in zip(params, grads):
            sums[name] += g
    return sums, s_norm


def bounds(sums, terms, s_norm, roundings, kappa, u):
    """Name -> the elementwise float64 bound 2 gamma_{T+1} S + 2 gamma_m kappa S_norm."""
    per_item = 2 * gamma(roundings, u) * kappa * s_norm
    return {name: 2 * gamma(terms[name] + 1, u) * s + per_item if math.isfinite(per_item)
            else torch.full_like(s, math.inf) for name, s in sums.items()}


def clipped_bound(bound, raw, max_norm, u):
    """The bound after ``clip_grad_norm_(max_norm)``: g' = c g, c = min(1, max_norm / (|g| +
    1e-6)). A gap d in g moves |g| by at most |d|_2 <= |b|_2, so c by a relative
    |b|_2 / |g|, and c g rounds once per run:

        |g'_acc - g'_ref| <= c b + c |g| (|b|_2 / |g|_2 + 2 gamma_2)

    (``raw`` is the unclipped full-batch gradient g, name -> tensor)."""
    norm = math.sqrt(sum(float((g.double() ** 2).sum()) for g in raw.values()))
    b_norm = math.sqrt(sum(float((b ** 2).sum()) for b in bound.values()))
    c = min(1.0, max_norm / (norm + 1e-6))
    moved = b_norm / norm + 2 * gamma(2, u) if norm > 0 else 0.0
    return {name: c * b + c * raw[name].double().abs() * moved for name, b in bound.items()}
