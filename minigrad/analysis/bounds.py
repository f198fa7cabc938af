"""The derived rounding bound on one gradient: how far an accumulated gradient may be from
the full-batch one in floating point (``gradient_bound``). The equivalence tests and
``minigrad check`` judge the measured gap against it, and ``minigrad.analysis.trajectory``
carries it through the optimizer, update by update.

The gradient bound (``gradient_bound``)
=======================================
Let a_i be the gradient of sample i's loss (summed over its items), N the number of samples
and ``items`` the divisor (samples times outputs for MSE, kept targets for cross-entropy). In
exact arithmetic both runs compute g = (1/items) sum_i a_i. In floating point (unit roundoff
u of the dtype, ``unit_roundoff``; gamma_m = m u / (1 - m u)) they differ in two ways.

1. The sum over samples. Full batch: each element of g is one matrix product (or sum) over
   the N samples and one division, so (Higham, *Accuracy and Stability of Numerical
   Algorithms*, 3.1) its error is at most gamma_{N+1} sum_i |a_i| / items. Accumulated: a term
   of micro-batch j goes through at most n_j roundings inside its micro-batch's product and
   k - 1 in the running sum ``p.grad + g_j``; n_j + k - 1 <= N, so the same bound holds. For
   the two runs together: 2 gamma_{N+1} S, S = (1/items) sum_i |a_i| (elementwise).

2. The per-item terms themselves. BLAS picks its kernels by shape, so the same sample is
   rounded differently in a batch of n_j and in a batch of N. Each run computes a_i to within
   gamma_{m_item} kappa max|a_i| (first-order model), where
   * m_item = L (6W + 60) + 2C + 10 counts the roundings along the longest chain of one
     sample's forward and backward pass (``per_item_roundings``: per Linear layer of width
     <= W an inner product, a normalisation's two statistics and an activation, forward and
     backward; a log-sum-exp over C classes and its derivative; 4N more per layer for the
     batch sums of BatchNorm in training mode, used in ``tests/analysis/test_reference.py``);
   * kappa >= 1 (``condition_number``) is how much the network amplifies those roundings: a
     normalisation divides x - mean(x), whose error is relative to |W||h| + |b| + |mean|, by
     sigma = sqrt(var + eps); MSE's residual out - y likewise.
   This part is normwise (S_norm = (1/items) sum_i max|a_i|, the max over every element of
   every parameter): cancellation inside a sample's own computation makes a componentwise
   relative model false. A 2-feature LayerNorm of two distant values saturates (x_hat = +-1
   up to eps/d^2): the gradient through it (1e-6 to 1e-4 in the case we met) is a difference
   of much larger terms, and their roundings (1e-17) are what differs between the runs; the
   componentwise model was exceeded 45 times there.

        |g_acc - g_full| <= 2 gamma_{N+1} S + 2 gamma_{m_item} kappa S_norm

The first part is rigorous, the second a first-order model (about 1e-13 kappa S_norm for
these sizes in float64). What the model assumes: no pre-activation lies within its rounding
error of the ReLU kink (relu' would flip between the runs, an O(1) change of one sample's
gradient; for continuous random data the chance is ~1e-15 per unit in float64, and a
1-feature normalisation group, which gives exact zeros, gives them in both runs). Where
hypothesis' ``target()`` pushed hardest, the worst ratio error / bound seen in the long
profile (500 examples per namespace) was 0.013; without kappa one example
(``test_nearly_equal_values_in_a_layer_norm``) reached 4.5.

float32
=======
Everything above is written in u, and nothing else changes with the dtype: float32 has u =
2^-24 (``numpy.finfo(numpy.float32).eps / 2``) where float64 has 2^-53, so every gamma_m, and
with them this bound and the trajectory bound, grows by 2^29 (about 5e8): about 1e-4 kappa
S_norm for the sizes above instead of 1e-13. The model is first order, so it needs m u << 1
(``gamma`` is infinite, no bound at all, once m u >= 1). The kink assumption is what float32
strains: a pre-activation within rounding of 0 is 5e8 times likelier, and where one takes
different signs in a batch of n_j and a batch of N, relu' is 0 in one run and 1 in the other.
That is a real difference of the two computations, not rounding the bound should absorb, so it
is never widened for it: ``minigrad.analysis.check`` compares in the dtype asked, counts the
ReLU inputs that flip sign between the full-batch and the micro-batch forward passes, and
names a flip as the cause when the gap exceeds the bound.
"""

import math

import numpy as np

from minigrad import nn
from minigrad.accumulate import accumulated_gradients
from minigrad.engine import Tensor, backend, no_grad

U64, U32 = 2.0**-53, 2.0**-24  # unit roundoff of float64 and float32


def unit_roundoff(dtype):
    """u of ``dtype`` ("float64", "float32", or a NumPy or array-namespace dtype)."""
    name = str(dtype).rsplit(".", 1)[-1].strip("'>")  # torch.float32, <class 'numpy.float32'>
    units = {"float64": U64, "float32": U32}
    if name not in units:
        raise ValueError(f"dtype must be float64 or float32, got {dtype!r}")
    return units[name]


def gamma(m, u=U64):
    """Higham's gamma_m = m u / (1 - m u): the relative error of m successive roundings
    (infinite where m u >= 1: no bound)."""
    return m * u / (1 - m * u) if m * u < 1 else math.inf


# ----- per-item gradients and the gradient bound ------------------------------------------------
class OneItem:
    """The loss of sample ``i`` alone, computed on the whole batch (other rows weigh 0)."""

    def __init__(self, loss, i):
        self.loss, self.i = loss, i

    def __call__(self, out, y, reduction="sum"):
        per_row = self.loss(out, y, reduction="none")
        mask = np.zeros((out.shape[0],) + (1,) * (per_row.ndim - 1))
        mask[self.i] = 1.0
        return (per_row * out.xp.asarray(mask, dtype=out.dtype, device=out.device)).sum()

    def num_items(self, y):
        return 1


def per_item_gradients(model, loss, x, y, step_index=0):
    """a_i for each sample i: the gradient of its loss (summed over its items), as NumPy
    float64.

    Computed on the whole batch, so BatchNorm in training mode couples the samples as it
    does in training, and dropout masks are keyed by (step_index, i) as ``step`` keys them.
    """
    return [{name: np.array(backend.to_numpy(g), dtype=np.float64)
             for name, g in accumulated_gradients(model, OneItem(loss, i), x, y,
                                                  normalize="sum",
                                                  step_index=step_index).items()}
            for i in range(x.shape[0])]


def summed_terms(x):
    """N of ``gradient_bound``: the most terms an element of a batch's gradient is summed
    from. A Linear layer's gradient is one product over the samples, x.shape[0] terms; an
    embedding's row is the sum over every context slot that holds its token, so for token ids
    (an integer ``x`` (N, C)) every id is a term: N C.

    >>> summed_terms(np.zeros((5, 3))), summed_terms(np.zeros((5, 3), dtype=np.int64))
    (5, 15)
    """
    if backend.is_integral(backend.get_namespace(x), x):
        return int(backend.size(x))
    return int(x.shape[0])


def linear_widths(model):
    """The widths of ``model``'s Linear layers, inputs first: ``MLP.sizes`` for an MLP,
    (C D, H, V) for a ``CharMLP``; what ``per_item_roundings`` counts along.

    >>> linear_widths(nn.MLP([3, 5, 2])), linear_widths(nn.CharMLP(7, 3, 2, 4))
    ([3, 5, 2], [6, 4, 7])
    """
    layers = [m for _, m in model.named_modules() if isinstance(m, nn.Linear)]
    if not layers:
        raise ValueError(f"model must hold Linear layers, got {type(model).__name__}")
    return [layers[0].in_features, *(layer.out_features for layer in layers)]


def per_item_roundings(sizes, batch_norm_samples=0):
    """m_item: roundings along the longest chain of one sample's forward and backward pass.

    Per Linear layer (fan-in and width <= W): forward 3W + 30 (the inner product, the two
    statistics of a normalisation, an activation), backward 3W + 30 (the same in reverse);
    the loss 2C + 10 (a log-sum-exp over C classes and its derivative). In training mode a
    BatchNorm layer also sums over the batch: 4 sums of ``batch_norm_samples`` terms.
    """
    layers, width, classes = len(sizes) - 1, max(sizes), sizes[-1]
    return layers * (6 * width + 60 + 4 * batch_norm_samples) + 2 * classes + 10


def condition_number(model, loss, x, y, step_index=0):
    """kappa >= 1: by how much the network amplifies the roundings of its intermediate values.

    A normalisation divides x - mean(x), whose rounding error is relative to the magnitude
    |W||h| + |b| of the Linear layer before it (plus |mean|), by sigma = sqrt(var + eps); so
    it multiplies the relative error of everything after it by
    kappa_l = max (|W||h| + |b| + |mean|) / sigma: about 2-5 for well-spread values, large
    when the values of a group nearly coincide. MSE's residual out - y does the same with
    max(|out| + |y|) / max|out - y|. kappa is the product.

    A model that is not a ``Sequential`` (``CharMLP``) is walked as one layer: it may hold
    no normalisation.
    """
    layers = model if isinstance(model, nn.Sequential) else [model]
    norms = (nn.LayerNorm, nn.GroupNorm, nn.BatchNorm1d)
    if not isinstance(model, nn.Sequential) and any(
            isinstance(m, norms) for _, m in model.named_modules()):
        raise TypeError(f"condition_number walks a Sequential's layers; a "
                        f"{type(model).__name__} with normalisation inside is not walked")
    h, magnitude, kappa = Tensor(x), np.abs(backend.to_numpy(x)), 1.0
    with no_grad(), nn.dropout_keys.rows(step_index, x):
        for layer in layers:
            z, h = backend.to_numpy(h.data), layer(h)
            if isinstance(layer, nn.Linear):
                w, b = (np.abs(backend.to_numpy(p.data)) for p in (layer.weight, layer.bias))
                magnitude = magnitude @ w.T + b
                continue
            if isinstance(layer, (nn.LayerNorm, nn.GroupNorm, nn.BatchNorm1d)):
                kappa *= max(1.0, _normalisation_kappa(layer, z, magnitude))
            magnitude = np.abs(backend.to_numpy(h.data))
    if isinstance(loss, nn.MSELoss):
        out, y = backend.to_numpy(h.data), backend.to_numpy(y)
        kappa *= max(1.0, float(np.max(np.abs(out) + np.abs(y)) / np.max(np.abs(out - y))))
    return kappa


def _normalisation_kappa(layer, z, magnitude):
    """max (magnitude + |mean|) / sigma over the groups the layer normalises."""
    if isinstance(layer, nn.BatchNorm1d) and not layer.training:
        mean = np.abs(backend.to_numpy(layer.running_mean))
        sigma = np.sqrt(backend.to_numpy(layer.running_var) + layer.eps)
        return float(np.max((magnitude + mean) / sigma))
    if isinstance(layer, nn.BatchNorm1d):  # each feature over the batch
        z, magnitude = z.T[:, None, :], magnitude.T[:, None, :]
    else:  # each sample over its group of features
        groups = layer.num_groups if isinstance(layer, nn.GroupNorm) else 1
        z = z.reshape(z.shape[0], groups, -1)
        magnitude = magnitude.reshape(z.shape)
    sigma = np.sqrt(np.var(z, axis=2, keepdims=True) + layer.eps)
    return float(np.max((magnitude + np.mean(magnitude, axis=2, keepdims=True)) / sigma))


def gradient_bound(per_item, num_items, sizes, kappa=1.0, batch_norm_samples=0, *, u=U64,
                   terms=None):
    """Name -> elementwise bound on |g_acc - g_full| (derived in the module docstring):

        2 gamma_{N+1} S + 2 gamma_{m_item} kappa S_norm
        S      = (1/items) sum_i |a_i|       elementwise
        S_norm = (1/items) sum_i max |a_i|   max over every element of every parameter

    N is ``terms`` (default: the samples), the most terms an element of the gradient is
    summed from (``summed_terms``).
    """
    s_norm = sum(max(float(np.max(np.abs(g))) for g in a.values()) for a in per_item)
    per_item_term = 2 * gamma(per_item_roundings(sizes, batch_norm_samples), u) * kappa * s_norm
    summation = 2 * gamma((len(per_item) if terms is None else terms) + 1, u)
    return {name: (summation * sum(np.abs(a[name]) for a in per_item) + per_item_term)
            / num_items for name in per_item[0]}


def bound_ratio(error, bound):
    """max error / bound over the elements (inf where the bound is 0 but the error is not)."""
    error, bound = np.asarray(error), np.asarray(bound)
    if np.any((bound == 0) & (error != 0)):
        return math.inf
    return float(np.max(error / np.where(bound > 0, bound, 1.0), initial=0.0))


def flat(arrays):
    """The arrays (of any namespace) as one flat NumPy float64 vector."""
    return np.concatenate([np.ravel(backend.to_numpy(a)).astype(np.float64) for a in arrays])
