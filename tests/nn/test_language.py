"""CharMLP: its gradients against finite differences and HIPS autograd (``check_op``, the
parameters as the checked inputs), the logits' layouts (classes on axis 1, as
``cross_entropy`` takes them), its init, and bad arguments."""

import numpy as np
import pytest
from gradcheck import check_op, module_spec
from helpers import as_numpy

from minigrad import Tensor, nn

IDS = np.array([[[0, 0, 1], [0, 1, 6], [1, 6, 6], [6, 6, 2]],
                [[0, 0, 3], [0, 3, 3], [3, 3, 0], [3, 0, 5]]])  # (N, L, C): repeats add


def reference(x, table, w1, b1, w2, b2, ids):
    """The same model in autograd.numpy, times the checked scalar input ``x``."""
    e = table[ids]
    h = np.tanh(e.reshape(ids.shape[:-1] + (-1,)) @ w1.T + b1)
    return np.moveaxis(h @ w2.T + b2, -1, 1) * x


def test_char_mlp_gradients(xp):
    model = nn.CharMLP(7, context=3, embedding_dim=2, hidden=5, seed=0, xp=xp)
    spec = module_spec("char_mlp", model, reference, (1,), extra=(IDS,),
                       call=lambda m, x, ids: m(ids) * x)
    check_op(spec, xp)


def test_the_logits_layouts(xp):
    """(N, C) -> (N, V); (N, L, C) -> (N, V, L); (C,) -> (V,): the same numbers."""
    model = nn.CharMLP(7, context=3, embedding_dim=2, hidden=5, seed=1, xp=xp)
    ids = xp.asarray(IDS)
    seq = as_numpy(model(ids))
    assert seq.shape == (2, 7, 4)
    rows = as_numpy(model(xp.reshape(ids, (-1, 3))))
    assert rows.shape == (8, 7)
    np.testing.assert_allclose(np.moveaxis(seq, 1, -1).reshape(-1, 7), rows, rtol=0,
                               atol=1e-14)
    np.testing.assert_allclose(as_numpy(model(ids[1, 2, :])), rows[6], rtol=0, atol=1e-14)


def test_cross_entropy_takes_the_sequence_logits():
    """Targets (N, L) against the (N, V, L) logits: the mean over the kept targets, as on
    the rows flattened."""
    model = nn.CharMLP(7, context=3, embedding_dim=2, hidden=5, seed=2)
    y = np.array([[1, 6, 2, 0], [3, 0, 5, -100]])
    loss = nn.CrossEntropyLoss()
    flat = loss(model(IDS.reshape(-1, 3)), y.reshape(-1)).item()
    assert loss(model(IDS), y).item() == pytest.approx(flat, rel=1e-14)


def test_init_is_seeded():
    """Table N(0, 1), then the two Linear layers, all from one generator."""
    a, b = nn.CharMLP(27, 3, 4, 16, seed=5), nn.CharMLP(27, 3, 4, 16, seed=5)
    c = nn.CharMLP(27, 3, 4, 16, seed=6)
    shapes = [tuple(p.shape) for p in a.parameters()]
    assert shapes == [(27, 4), (16, 12), (16,), (27, 16), (27,)]
    assert all(np.array_equal(p.data, q.data) for p, q in zip(a.parameters(), b.parameters()))
    assert not np.array_equal(a.embedding.weight.data, c.embedding.weight.data)
    assert repr(a).splitlines()[:2] == ["CharMLP(vocab_size=27, context=3, embedding_dim=4, "
                                        "hidden=16", "  (embedding): Embedding(27, 4)"]


@pytest.mark.parametrize("call, error, message", [
    (lambda: nn.CharMLP(0, 3, 4, 16), ValueError, "vocab_size must be a positive int, got 0"),
    (lambda: nn.CharMLP(27, 2.0, 4, 16), TypeError, "context must be a positive int"),
    (lambda: nn.CharMLP(27, 3, 4, True), TypeError, "hidden must be a positive int"),
    (lambda: nn.CharMLP(27, 3, 4, 16)(np.zeros((5, 4), dtype=np.int64)), ValueError,
     r"CharMLP\(context=3\) got token ids of shape \(5, 4\); their last dimension must be 3"),
    (lambda: nn.CharMLP(27, 3, 4, 16)(Tensor(np.zeros((5, 3)))), TypeError, "indices must"),
])
def test_bad_arguments(call, error, message):
    with pytest.raises(error, match=f"^{message}"):
        call()
