"""The names corpus and its token windows: the Census lists as shipped, the boundary token,
padding that no loss counts, packed rows and their boundaries, the context reset against
its leak on a corpus small enough to check by hand, and every argument checked.
"""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from minigrad import Tensor, nn
from minigrad.studies import text

CORPUS = text.names_corpus()
VOCAB = text.vocabulary(CORPUS)


# ----- the corpus -------------------------------------------------------------------------------
def test_the_census_lists_lowercase_deduplicated_sorted():
    """4,275 female and 1,219 male names, 331 in both: 5,163 distinct, a-z only."""
    female, male = text.names_corpus("female"), text.names_corpus("male")
    assert (len(female), len(male), len(set(female) & set(male))) == (4275, 1219, 331)
    assert CORPUS == sorted(set(female) | set(male)) == text.names_corpus(("male", "female"))
    assert CORPUS[0] == "aaron" and "mary" in female and "james" in male
    assert set("".join(CORPUS)) == set("abcdefghijklmnopqrstuvwxyz")
    assert (min(map(len, CORPUS)), max(map(len, CORPUS))) == (2, 11)


def test_a_seed_shuffles_the_corpus_reproducibly():
    shuffled = text.names_corpus(seed=3)
    assert shuffled == text.names_corpus(seed=3) != text.names_corpus(seed=4)
    assert shuffled != CORPUS and sorted(shuffled) == CORPUS


@pytest.mark.parametrize("kwargs, error, message", [
    ({"lists": "boys"}, ValueError, "lists must be one of 'female', 'male', got 'boys'"),
    ({"lists": ()}, TypeError, "lists must be one of"),
    ({"lists": 3}, TypeError, "lists must be one of"),
    ({"seed": -1}, ValueError, "seed must be an integer >= 0, got -1"),
    ({"seed": 1.5}, TypeError, "seed must be an integer, got float 1.5"),
])
def test_names_corpus_checks_its_arguments(kwargs, error, message):
    with pytest.raises(error, match=f"^{message}"):
        text.names_corpus(**kwargs)


@pytest.mark.parametrize("missing", [ModuleNotFoundError("No module named 'names'"),
                                     TypeError("'names' is not a package")])
def test_without_the_names_package_it_says_what_to_install(monkeypatch, missing):
    """Not installed, or a ``names.py`` of one's own shadows it."""
    def files(package):
        raise missing

    monkeypatch.setattr(text.importlib.resources, "files", files)
    with pytest.raises(ImportError, match="^names_corpus\\(\\) needs the names package "
                                          "\\(0.3.0\\).*pip install names==0.3.0"):
        text.names_corpus()


# ----- the vocabulary -----------------------------------------------------------------------------
def test_the_boundary_token_is_id_0():
    assert VOCAB.tokens == (".", *"abcdefghijklmnopqrstuvwxyz") and len(VOCAB) == 27
    assert VOCAB.encode("emma") == [5, 13, 13, 1] and VOCAB.decode([5, 13, 13, 1, 0]) == "emma."


@pytest.mark.parametrize("call, error, message", [
    (lambda: text.vocabulary("emma"), TypeError, "words must be a non-empty list of strings"),
    (lambda: text.vocabulary([]), TypeError, "words must be a non-empty list of strings"),
    (lambda: text.vocabulary(["ab", ""]), ValueError,
     "words\\[1\\] must be a non-empty string without '.', got ''"),
    (lambda: text.vocabulary(["a.b"]), ValueError, "words\\[0\\] must be a non-empty string"),
    (lambda: text.vocabulary([3]), ValueError, "words\\[0\\] must be a non-empty string"),
    (lambda: VOCAB.encode("Emma"), ValueError,
     "'Emma' holds characters outside the vocabulary: \\['E'\\]"),
    (lambda: VOCAB.decode([27]), ValueError, "id must be an integer in \\[0, 26\\], got 27"),
    (lambda: text.Vocabulary(("a", ".")), ValueError, "tokens must be a tuple of distinct"),
])
def test_vocabulary_checks_its_arguments(call, error, message):
    with pytest.raises(error, match=f"^{message}"):
        call()


# ----- padded windows ---------------------------------------------------------------------------
def test_padded_windows_by_hand():
    """"emma" and "ava" with C = 3: five and four items, the context padded at the start
    with the boundary token; "ava"'s row ends with one padding position."""
    vocab = text.vocabulary(["emma", "ava"])
    w = text.padded_windows(["emma", "ava"], vocab, context=3)
    assert (w.x.shape, w.y.shape, w.x.dtype, w.y.dtype) == ((2, 5, 3), (2, 5), np.int64,
                                                            np.int64)
    assert [vocab.decode(c) for c in w.x[0]] == ["...", "..e", ".em", "emm", "mma"]
    assert vocab.decode(w.y[0]) == "emma."
    assert [vocab.decode(c) for c in w.x[1, :4]] == ["...", "..a", ".av", "ava"]
    assert w.y[1].tolist() == [*vocab.encode("ava"), 0, text.IGNORE_INDEX]
    assert w.sequence.tolist() == [[0] * 5, [1, 1, 1, 1, -1]]
    assert w.num_tokens == 9 and w.x[1, 4].tolist() == [0, 0, 0]


def test_padding_targets_are_ignored():
    """The padded layout's mean cross-entropy (any logits) is the mean over its real
    tokens alone: padding is in neither the sum nor the count."""
    w = text.padded_windows(CORPUS[:40], VOCAB, 3)
    logits = np.random.default_rng(0).normal(size=(40, len(VOCAB), w.y.shape[1]))
    tokens = w.tokens()
    rows = logits.transpose(0, 2, 1).reshape(-1, len(VOCAB))[w.y.reshape(-1) != -100]
    loss = nn.CrossEntropyLoss()
    assert loss.num_items(w.y) == w.num_tokens == tokens.y.shape[0] == sum(
        len(word) + 1 for word in CORPUS[:40])
    assert loss(Tensor(logits), w.y).item() == pytest.approx(
        loss(Tensor(rows), tokens.y).item(), rel=1e-14)


def test_flatten_and_tokens():
    w = text.padded_windows(CORPUS[:7], VOCAB, 4)
    flat, tokens = w.flatten(), w.tokens()
    assert flat.x.shape == (7 * w.y.shape[1], 4) and flat.y.shape == flat.sequence.shape
    assert tokens.x.shape == (w.num_tokens, 4) and np.all(tokens.y != text.IGNORE_INDEX)
    assert w.sequence_targets().shape == w.y.shape + (2,)
    assert np.array_equal(w.sequence_targets()[..., 0], w.y)


# ----- packed windows -----------------------------------------------------------------------------
def test_reset_and_leak_by_hand():
    """"emma." and "ava." in one row of 9: with the reset, "ava"'s contexts are its own;
    without it, its first C - 1 = 2 contexts hold the end of "emma"."""
    vocab = text.vocabulary(["emma", "ava"])
    reset = text.packed_windows(["emma", "ava"], vocab, 3, row_length=9)
    leak = text.packed_windows(["emma", "ava"], vocab, 3, row_length=9, reset=False)
    assert reset.x.shape == (1, 9, 3) and reset.sequence.tolist() == [[0] * 5 + [1] * 4]
    assert vocab.decode(reset.y[0]) == vocab.decode(leak.y[0]) == "emma.ava."
    assert [vocab.decode(c) for c in reset.x[0, 5:]] == ["...", "..a", ".av", "ava"]
    assert [vocab.decode(c) for c in leak.x[0, 5:]] == ["ma.", "a.a", ".av", "ava"]
    assert np.array_equal(reset.x[0, :5], leak.x[0, :5])  # the row's first name: no leak


def test_a_name_that_does_not_fit_starts_the_next_row():
    vocab = text.vocabulary(["emma", "ava", "bo"])
    w = text.packed_windows(["emma", "ava", "bo"], vocab, 2, row_length=8)
    assert w.sequence.tolist() == [[0] * 5 + [-1] * 3, [1] * 4 + [2] * 3 + [-1]]
    assert w.y[0, 5:].tolist() == [text.IGNORE_INDEX] * 3


@given(count=st.integers(1, 60), row_length=st.integers(12, 50), context=st.integers(1, 5),
       start=st.integers(0, len(CORPUS) - 60))
def test_packing_keeps_every_item_and_its_boundaries(count, row_length, context, start):
    """With the reset, the packed layout's items, in row order, ARE the padded layout's; each
    name lies whole in one row, in order, and padding only ends a row; a row is started only
    when the next name does not fit in the one before."""
    words = CORPUS[start:start + count]
    padded = text.padded_windows(words, VOCAB, context)
    packed = text.packed_windows(words, VOCAB, context, row_length)
    a, b = padded.tokens(), packed.tokens()
    assert np.array_equal(a.x, b.x) and np.array_equal(a.y, b.y)
    assert np.array_equal(a.sequence, b.sequence)
    assert packed.x.shape[1:] == (row_length, context)
    for row in packed.sequence:
        kept = row[row >= 0]
        assert np.all(row[len(kept):] == -1)  # padding only at the end
        assert np.all(np.diff(kept) >= 0)
    lengths = [len(word) + 1 for word in words]
    for r in range(1, packed.x.shape[0]):
        first = packed.sequence[r, 0]
        used = int(np.sum(packed.sequence[r - 1] >= 0))
        assert used + lengths[first] > row_length
    leak = text.packed_windows(words, VOCAB, context, row_length, reset=False)
    assert np.array_equal(leak.y, packed.y) and np.array_equal(leak.sequence, packed.sequence)
    # without the reset only the first C - 1 positions of a name can differ: from there on
    # its context lies in the name itself, or starts at the boundary token before it
    position = np.zeros_like(packed.sequence)  # how far into its name a position is
    for r, row in enumerate(packed.sequence):
        for t in range(1, row_length):
            position[r, t] = position[r, t - 1] + 1 if row[t] == row[t - 1] else 0
    same = np.all(leak.x == packed.x, axis=-1)
    assert np.all(same | (position < context - 1) | (packed.sequence < 0))


@pytest.mark.parametrize("call, error, message", [
    (lambda: text.padded_windows(["ab"], VOCAB, 0), ValueError,
     "context must be a positive int, got 0"),
    (lambda: text.padded_windows(["ab"], VOCAB, 2.0), TypeError,
     "context must be a positive int, got float 2.0"),
    (lambda: text.padded_windows(["ab"], ("ab",), 2), TypeError,
     "vocab must be a Vocabulary \\(text.vocabulary\\(words\\)\\), got tuple"),
    (lambda: text.padded_windows(["aB"], VOCAB, 2), ValueError,
     "'aB' holds characters outside the vocabulary"),
    (lambda: text.packed_windows(["christopher"], VOCAB, 3, 11), ValueError,
     "row_length must be >= 12 \\(the longest sequence\\), got 11"),
    (lambda: text.packed_windows(["ab"], VOCAB, 3, 0), ValueError,
     "row_length must be a positive int, got 0"),
    (lambda: text.packed_windows(["ab"], VOCAB, 3, 8, reset=1), TypeError,
     "reset must be True or False, got int 1"),
])
def test_windows_check_their_arguments(call, error, message):
    with pytest.raises(error, match=f"^{message}"):
        call()


# ----- the per-sequence loss's arguments ----------------------------------------------------------
def test_sequence_mean_loss_checks_its_arguments():
    with pytest.raises(ValueError, match="^reduction must be one of 'mean', 'sum', 'none'"):
        text.SequenceMeanLoss(reduction="avg")
    w = text.padded_windows(CORPUS[:2], VOCAB, 3)
    with pytest.raises(ValueError, match=r"^target must be \(\.\.\., 2\)"):
        text.SequenceMeanLoss()(Tensor(np.zeros((2, 27, w.y.shape[1]))), w.y)


def test_sequence_mean_loss_on_every_namespace(xp):
    """The mean over 6 names of each name's mean token cross-entropy, written out in NumPy."""
    w = text.padded_windows(CORPUS[100:106], VOCAB, 2)
    logits = np.random.default_rng(1).normal(size=(6, len(VOCAB), w.y.shape[1]))
    log_p = logits - np.log(np.sum(np.exp(logits), axis=1, keepdims=True))
    means = [np.mean([-log_p[i, w.y[i, t], t] for t in range(len(CORPUS[100 + i]) + 1)])
             for i in range(6)]
    loss, target = text.SequenceMeanLoss(), xp.asarray(w.sequence_targets())
    assert loss.num_items(target) == 6
    assert loss(Tensor(xp.asarray(logits)), target).item() == pytest.approx(np.mean(means),
                                                                           rel=1e-14)
