"""The language model's shape (issue 36): one update of ``nn.CharMLP`` on names of the corpus.

LM: the first 256 names of ``studies.text.names_corpus(seed=0)`` (the Census first names in
one fixed random order), one name per row, padded to the longest (``text.padded_windows``).
Every position of a name is an item: its previous 8 tokens predict the next one (the name's
letters, then the boundary "."); a padding position's target is -100, which the loss
ignores, so the loss is the mean over the real tokens. The vocabulary is the corpus's
characters and the boundary, and the model ``nn.CharMLP(vocab, context=8, embedding_dim=16,
hidden=256, seed=0)``: embedding, concatenation, tanh hidden layer, logits.
"""

from dataclasses import dataclass

from minigrad.nn.windows import IGNORE_INDEX
from minigrad.studies import text


@dataclass(frozen=True)
class LanguageShape:
    """``batch`` names of the corpus, padded, through ``nn.CharMLP`` of ``context``,
    ``embedding_dim`` and ``hidden``; one update, no micro-batches."""

    name: str
    batch: int
    context: int
    embedding_dim: int
    hidden: int
    kind = "charlm"
    micro_batch = None
    gpu_only = False

    @property
    def micro_batches(self):
        return [(0, self.batch)]

    def describe(self):
        return (f"{self.batch} names, padded; CharMLP context {self.context}, embedding "
                f"{self.embedding_dim}, hidden {self.hidden}")

    def windows(self):
        """``(windows, vocab_size)``: the padded windows of the names (``nn.windows.Windows``:
        x (rows, L, C), y (rows, L)) and the corpus's vocabulary size."""
        vocab = text.vocabulary(text.names_corpus())
        names = text.names_corpus(seed=0)[:self.batch]
        return text.padded_windows(names, vocab, self.context), len(vocab)


def workload(problem):
    """What the step computes on, in numbers: rows, positions per row, positions in all
    (the rows of every matrix product), real tokens (the loss's items), vocabulary."""
    rows, length, _ = problem.x.shape
    return {"rows": rows, "length": length, "positions": rows * length,
            "tokens": int((problem.y != IGNORE_INDEX).sum()),
            "vocab": int(problem.weights[0].shape[0])}
