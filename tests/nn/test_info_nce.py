"""InfoNCE, the dual encoder and the paired digits: values and gradients against torch's
``cross_entropy(q @ p.T / T, arange(N))`` (CLIP's symmetric mean of both directions), within
a derived tolerance; the batch format; clear errors."""

import math

import numpy as np
import pytest
from helpers import constant, leaf, to_np

from minigrad import nn
from minigrad.analysis.bounds import gamma
from minigrad.engine import Tensor

torch = pytest.importorskip("torch", reason="torch is not installed (the oracle)")


def torch_info_nce(q, p, temperature, symmetric, reduction):
    q, p = (torch.tensor(a, requires_grad=True) for a in (q, p))
    logits = q @ p.T / temperature
    target = torch.arange(q.shape[0])
    f = torch.nn.functional.cross_entropy
    if symmetric:
        loss = f(logits, target, reduction=reduction) + f(logits.T, target, reduction=reduction)
        loss = loss / 2 if reduction == "mean" else loss
    else:
        loss = f(logits, target, reduction=reduction)
    loss.backward()
    return loss.item(), q.grad.numpy(), p.grad.numpy()


def tolerance(q, p, temperature, symmetric, reduction):
    """How far two float64 evaluations of InfoNCE may differ (value, dq, dp).

    Each computes the logits z = q p^T / T with an inner product of width d (error at most
    gamma_{d+1} Z, Z = max |q| |p|^T / T), so they differ by eps <= 2 gamma_{d+1} Z. A row's
    loss, lse(z_i) - z_ii, moves by at most 2 eps (lse is 1-Lipschitz in the max norm) and
    each evaluation rounds its log-sum-exp over M terms by gamma_{M+4} (Z + log M). Its
    gradient (s_i - e_i) p / T: the residual s_i - e_i moves by at most 4 eps (1 - s_ii)
    <= 2 eps |s_i - e_i|_1 and each evaluation rounds softmax and product by gamma_{M+d+4},
    so |d dq_i| <= (4 eps + 2 gamma_{M+d+4}) (|s_i - e_i| |p|)_i / T; the same by columns
    for dp. The mean divides all of it by the items, the symmetric form adds both directions.
    """
    n, m, d = q.shape[0], p.shape[0], q.shape[1]
    big = np.abs(q) @ np.abs(p).T / temperature
    z = float(np.max(big))
    eps = 2 * gamma(d + 1) * z
    logits = q @ p.T / temperature
    s = np.exp(logits - logits.max(axis=1, keepdims=True))
    s /= s.sum(axis=1, keepdims=True)
    r = np.abs(s - np.eye(n, m))
    rate = 4 * eps + 2 * gamma(m + d + 4)
    value = (2 * eps + 2 * gamma(m + 4) * (z + math.log(m))) * n
    dq, dp = rate * r @ np.abs(p) / temperature, rate * r.T @ np.abs(q) / temperature
    if symmetric:
        st = np.exp(logits.T - logits.T.max(axis=1, keepdims=True))
        rt = np.abs(st / st.sum(axis=1, keepdims=True) - np.eye(n))
        value *= 2
        dq, dp = dq + rate * rt.T @ np.abs(p) / temperature, dp + rate * rt @ np.abs(q) / \
            temperature
    items = n * (2 if symmetric else 1) if reduction == "mean" else 1
    return value / items, dq / items, dp / items


# extra: passages beyond the N positives (hard negatives); symmetric needs none
@pytest.mark.parametrize("symmetric, extra", [(False, 0), (False, 3), (True, 0)])
@pytest.mark.parametrize("temperature", [1.0, 0.07])
@pytest.mark.parametrize("reduction", ["mean", "sum"])
def test_info_nce_is_torchs_cross_entropy_on_the_diagonal(symmetric, extra, temperature,
                                                          reduction):
    rng = np.random.default_rng(7)
    q, p = rng.normal(size=(6, 4)), rng.normal(size=(6 + extra, 4))
    ours_q, ours_p = Tensor(q, requires_grad=True), Tensor(p, requires_grad=True)
    loss = nn.info_nce(ours_q, ours_p, temperature, symmetric, reduction)
    loss.backward()
    value, dq, dp = torch_info_nce(q, p, temperature, symmetric, reduction)
    tol_value, tol_q, tol_p = tolerance(q, p, temperature, symmetric, reduction)
    assert abs(loss.item() - value) <= tol_value
    assert np.all(np.abs(ours_q.grad - dq) <= tol_q)
    assert np.all(np.abs(ours_p.grad - dp) <= tol_p)
    assert np.max(np.abs(dq)) > 1e6 * np.max(tol_q)  # the gradients are far from zero


def test_the_loss_of_equal_logits_is_log_n_and_the_mean_counts_items(xp):
    zeros = constant(xp, np.zeros((4, 3)))
    loss = nn.InfoNCELoss(symmetric=True)
    out = (zeros, zeros)
    y = xp.asarray(np.arange(4))
    assert loss(out, y).item() == pytest.approx(math.log(4), rel=4e-16)
    assert loss.num_items(y) == 8 and nn.InfoNCELoss().num_items(y) == 4
    assert loss(out, y, reduction="sum").item() == pytest.approx(8 * math.log(4), rel=4e-16)


def test_the_dual_encoder_runs_each_view_through_its_tower(xp):
    towers = nn.MLP([3, 5, 2], seed=0, xp=xp), nn.MLP([3, 5, 2], seed=1, xp=xp)
    model = nn.DualEncoder(*towers)
    rng = np.random.default_rng(0)
    xq, xp_ = rng.normal(size=(4, 3)), rng.normal(size=(4, 3))
    q, p = model(nn.pairs(xp.asarray(xq), xp.asarray(xp_)))
    assert np.array_equal(to_np(q), to_np(towers[0](xp.asarray(xq))))
    assert np.array_equal(to_np(p), to_np(towers[1](xp.asarray(xp_))))
    assert [n for n, _ in model.named_parameters()][:2] == ["query_tower.0.weight",
                                                            "query_tower.0.bias"]


@pytest.mark.parametrize("call, error, text", [
    (lambda: nn.info_nce(np.ones((3, 2)), np.ones((2, 2))), ValueError,
     "info_nce needs q of shape (N, d) and p of shape (M, d) with M >= N, got q (3, 2) and "
     "p (2, 2)"),
    (lambda: nn.info_nce(np.ones((2, 2)), np.ones((3, 2)), symmetric=True), ValueError,
     "symmetric info_nce needs as many passages as queries, got 2 queries and 3 passages"),
    (lambda: nn.info_nce(np.ones((2, 2)), np.ones((2, 2)), temperature=0), ValueError,
     "temperature must be a finite number with temperature > 0, got 0"),
    (lambda: nn.info_nce(np.ones((2, 2)), np.ones((2, 2)), reduction="none"), ValueError,
     "reduction must be one of 'mean', 'sum', got 'none'"),
    (lambda: nn.InfoNCELoss()(Tensor(np.ones((2, 2))), np.arange(2)), TypeError,
     "a contrastive loss needs the model's output as a pair (queries, passages) of Tensors"),
    (lambda: nn.InfoNCELoss()((Tensor(np.ones((2, 2))),) * 2, np.arange(3)), ValueError,
     "InfoNCELoss needs one target per query (2), got (3,)"),
    (lambda: nn.DualEncoder(nn.MLP([2, 2]), "tower"), TypeError,
     "passage_tower must be an nn.Module, got str"),
    (lambda: nn.DualEncoder(nn.MLP([2, 2]), nn.MLP([2, 2]))(np.ones((3, 3))), ValueError,
     "DualEncoder needs x of shape (N, 2, ...): x[:, 0] the queries, x[:, 1] the passages; "
     "got (3, 3)"),
    (lambda: nn.pairs(np.ones((3, 2)), np.ones((3, 4))), ValueError,
     "queries and passages must have the same shape, got (3, 2) and (3, 4)"),
])
def test_errors_name_the_argument_the_value_and_what_is_allowed(call, error, text):
    with pytest.raises(error) as info:
        call()
    assert text in str(info.value)


def test_float32_stays_float32(xp):
    q = leaf(xp, np.ones((3, 2)), dtype="float32")
    loss = nn.info_nce(q, q * 0.5, temperature=0.5)
    loss.backward()
    assert loss.dtype == xp.float32 and q.grad.dtype == xp.float32


def test_paired_digits_are_the_left_and_right_halves_of_digits():
    pytest.importorskip("sklearn", reason="scikit-learn is not installed")
    from minigrad.studies.data import digits, paired_digits

    x, y, x_test, y_test = paired_digits(seed=3)
    flat, labels, _, _ = digits(seed=3)
    images = flat.reshape(-1, 8, 8)
    assert x.shape == (len(flat), 2, 32) and np.array_equal(y, labels)
    assert np.array_equal(x[:, 0].reshape(-1, 8, 4), images[:, :, :4])
    assert np.array_equal(x[:, 1].reshape(-1, 8, 4), images[:, :, 4:])
    assert x_test.shape[1:] == (2, 32) and len(x_test) == len(y_test)
