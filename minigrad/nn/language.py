"""CharMLP: the neural probabilistic language model of Bengio et al. (2003), on characters.

Built from minigrad's layers only (``Embedding``, ``Linear``, tanh), so it needs no backward
code of its own.
"""

from minigrad.engine import backend, validate
from minigrad.engine.tensor import Tensor
from minigrad.nn import functional as F
from minigrad.nn.layers import Embedding, Linear
from minigrad.nn.module import Module


class CharMLP(Module):
    """Next-token logits from the previous ``context`` tokens: look each token up in one
    shared table, concatenate the C embeddings, one tanh hidden layer, then the logits.

        e = E[x]  (..., C, D)     h = tanh(concat(e) W1^T + b1)     logits = h W2^T + b2

    ``x`` holds token ids: shape (N, C) gives logits (N, V); (N, L, C), L windows per row
    (a padded or packed sequence), gives (N, V, L), the classes on axis 1, which is the
    layout ``cross_entropy`` takes with targets of shape (N, L) (PyTorch's). The table is
    drawn first, then the hidden and the output layer, all from the NumPy generator
    ``seed``.

    >>> import numpy as np
    >>> model = CharMLP(27, context=3, embedding_dim=4, hidden=16, seed=0)
    >>> [name for name, _ in model.named_parameters()]
    ['embedding.weight', 'hidden.weight', 'hidden.bias', 'output.weight', 'output.bias']
    >>> model(np.zeros((5, 3), dtype=np.int64)).shape, model(np.zeros((2, 7, 3), dtype=int)).shape
    ((5, 27), (2, 27, 7))
    """

    def __init__(self, vocab_size, context, embedding_dim, hidden, *, seed=0, dtype="float64",
                 xp=None, device=None):
        super().__init__()
        vocab_size = validate.positive_int("vocab_size", vocab_size)
        self.context = validate.positive_int("context", context)
        embedding_dim = validate.positive_int("embedding_dim", embedding_dim)
        hidden = validate.positive_int("hidden", hidden)
        generator = backend.rng(seed)
        make = dict(dtype=dtype, xp=xp, device=device)
        self.embedding = Embedding(vocab_size, embedding_dim, seed=generator, **make)
        self.hidden = Linear(self.context * embedding_dim, hidden, generator=generator, **make)
        self.output = Linear(hidden, vocab_size, generator=generator, **make)

    def forward(self, x):
        ids = x.data if isinstance(x, Tensor) else x
        shape = tuple(getattr(ids, "shape", ()))
        if not shape or shape[-1] != self.context:
            raise ValueError(f"CharMLP(context={self.context}) got token ids of shape {shape}; "
                             f"their last dimension must be {self.context}")
        e = self.embedding(ids)
        h = F.tanh(self.hidden(e.reshape(*shape[:-1], -1)))
        logits = self.output(h)
        if logits.ndim <= 2:
            return logits
        return logits.transpose((0, logits.ndim - 1, *range(1, logits.ndim - 1)))

    def extra_repr(self):
        return (f"vocab_size={self.embedding.num_embeddings}, context={self.context}, "
                f"embedding_dim={self.embedding.embedding_dim}, "
                f"hidden={self.hidden.out_features}")
