"""``check_accumulation``'s bound and precision: the hooks' sums are the per-sample sums, a
``True`` is never given on a bound that could hide a normaliser off by one item, low-precision
models and float32 models whose bound would be vacuous are checked on float64 copies (and say
so), a model even float64 cannot decide gets no verdict, and the same on a GPU where one is
lent.
"""

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

torch = pytest.importorskip("torch", reason="the `torch` extra is not installed")
from minigrad.interop.torch import check_accumulation  # noqa: E402
from minigrad.interop.torch_bound import BoundRecorder, per_sample_sums  # noqa: E402

LOSS = torch.nn.CrossEntropyLoss()
LOW = [torch.bfloat16, torch.float16]


def data(n, seed, dtype=torch.float64, features=4, classes=3):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(n, features, generator=g).to(dtype),
            torch.randint(0, classes, (n,), generator=g))


def mlp(*middle, dtype=torch.float64, seed=1):
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(4, 8), *middle, torch.nn.Tanh(),
                               torch.nn.Linear(8, 3)).to(dtype)


def loop(sizes, divide):
    """A window over micro-batches of ``sizes``: each micro-batch's summed loss divided by
    ``divide(n, sizes, yj)`` (n the window's items)."""
    def step(model, x, y):
        n = int((y != -100).sum())
        for xj, yj in zip(x.split(sizes), y.split(sizes)):
            loss = torch.nn.functional.cross_entropy(model(xj), yj, reduction="sum")
            (loss / divide(n, sizes, yj)).backward()
    return step


ITEMS = lambda n, sizes, yj: n                                     # noqa: E731
TEXTBOOK = lambda n, sizes, yj: len(yj) * len(sizes)               # noqa: E731
OFF_BY_ONE = lambda n, sizes, yj: n + 1                            # noqa: E731
UNDIVIDED = lambda n, sizes, yj: 1                                 # noqa: E731

splits = st.lists(st.integers(1, 6), min_size=2, max_size=4)


@given(sizes=splits, seed=st.integers(0, 2**16), dtype=st.sampled_from(LOW + [torch.float32]))
def test_low_precision_loops_get_the_verdict_of_their_arithmetic(sizes, seed, dtype):
    x, y = data(sum(sizes), seed, dtype)
    model = mlp(dtype=dtype, seed=seed)
    good = check_accumulation(model, LOSS, x, y, loop(sizes, ITEMS))
    assert good.equivalent is True, good.verdict
    assert good.resolution < good.threshold
    for wrong in (OFF_BY_ONE, UNDIVIDED):
        assert check_accumulation(model, LOSS, x, y, loop(sizes, wrong)).equivalent is False
    if len(set(sizes)) > 1:  # the textbook loop is wrong exactly on uneven splits
        report = check_accumulation(model, LOSS, x, y, loop(sizes, TEXTBOOK))
        assert report.equivalent is False and "textbook" in report.causes[0]
    if dtype in LOW:
        assert good.dtype == "torch.float64" and "checked on float64 copies" in good.verdict


def test_a_low_precision_model_is_never_judged_by_its_own_rounding():
    # In bfloat16 the rounding bound is larger than the gradient: an undivided sum (12x the
    # gradient) and the textbook loop passed the old check. Now both fail, in float64.
    x, y = data(12, 0, torch.bfloat16)
    for divide, words in ((UNDIVIDED, "12 x the full-batch"), (TEXTBOOK, "textbook")):
        report = check_accumulation(mlp(dtype=torch.bfloat16), LOSS, x, y,
                                    loop([5, 5, 2], divide))
        assert report.equivalent is False and words in report.causes[0]
        assert "the model is torch.bfloat16" in report.verdict


class TinyLM(torch.nn.Module):
    """An embedding, L pre-norm residual blocks and a tied head over a vocabulary V: the
    shape of GPT-2 at toy width, where the float32 bound is not decisive."""

    def __init__(self, vocab=5000, width=16, depth=12):
        super().__init__()
        torch.manual_seed(0)
        self.wte = torch.nn.Embedding(vocab, width)
        self.blocks = torch.nn.ModuleList(torch.nn.Sequential(
            torch.nn.LayerNorm(width), torch.nn.Linear(width, 4 * width), torch.nn.GELU(),
            torch.nn.Linear(4 * width, width)) for _ in range(depth))
        self.ln = torch.nn.LayerNorm(width)
        self.head = torch.nn.Linear(width, vocab, bias=False)
        self.head.weight = self.wte.weight

    def forward(self, idx):
        h = self.wte(idx)
        for block in self.blocks:
            h = h + block(h)
        return self.head(self.ln(h))


class TokenLoss(torch.nn.Module):
    ignore_index, reduction = -100, "mean"

    def forward(self, out, y):
        return torch.nn.functional.cross_entropy(out.flatten(0, 1), y.flatten())


def token_loop(scale):
    def step(model, x, y):
        n = int((y != -100).sum())
        for xj, yj in zip(x.split([3, 5]), y.split([3, 5])):
            loss = torch.nn.functional.cross_entropy(model(xj).flatten(0, 1), yj.flatten(),
                                                     reduction="sum")
            (loss * scale / n).backward()
    return step


def test_a_model_whose_float32_bound_is_vacuous_is_decided_in_float64():
    g = torch.Generator().manual_seed(0)
    x, y = torch.randint(0, 5000, (8, 12), generator=g), torch.randint(0, 5000, (8, 12),
                                                                        generator=g)
    y[0, 6:] = -100
    right = check_accumulation(TinyLM(), TokenLoss(), x, y, token_loop(1))
    assert right.equivalent is True and right.dtype == "torch.float64"
    assert "in torch.float32" in right.verdict  # tried in float32 first, which did not decide
    wrong = check_accumulation(TinyLM(), TokenLoss(), x, y, token_loop(10))
    assert wrong.equivalent is False and "10 x the full-batch" in wrong.causes[0]


def test_no_verdict_when_nothing_could_have_failed():
    x, _ = data(12, 0)
    one_class = torch.nn.Linear(4, 1).double()  # cross-entropy over one class is 0
    report = check_accumulation(one_class, LOSS, x, torch.zeros(12, dtype=torch.long),
                                loop([5, 7], TEXTBOOK))
    assert report.equivalent is None and "gradient is zero" in report.verdict
    assert report.causes == []


def test_no_verdict_when_even_float64_cannot_bound_the_rounding():
    # LayerNorm over one feature: x - mean(x) cancels to exactly 0, so the rounding of its
    # input is amplified without limit (kappa is infinite) and no bound exists.
    x, y = data(12, 0)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 1), torch.nn.LayerNorm(1),
                                torch.nn.Linear(1, 3)).double()
    for divide in (ITEMS, TEXTBOOK):
        report = check_accumulation(model, LOSS, x, y, loop([5, 5, 2], divide))
        assert report.equivalent is None and report.resolution == math.inf
        assert "not below one item's share" in report.verdict
    low = check_accumulation(model.to(torch.bfloat16), LOSS, x.to(torch.bfloat16), y,
                             loop([5, 5, 2], ITEMS))
    assert low.equivalent is None and "float64 copies" in low.verdict


MODULES = {
    "linear": lambda: torch.nn.Sequential(torch.nn.Linear(4, 6), torch.nn.ReLU(),
                                          torch.nn.Linear(6, 3)),
    "layernorm": lambda: torch.nn.Sequential(torch.nn.Linear(4, 6), torch.nn.LayerNorm(6),
                                             torch.nn.Linear(6, 3)),
    "groupnorm": lambda: torch.nn.Sequential(torch.nn.Linear(4, 6), torch.nn.GroupNorm(2, 6),
                                             torch.nn.Linear(6, 3)),
    "rmsnorm": lambda: torch.nn.Sequential(torch.nn.Linear(4, 6), torch.nn.RMSNorm(6),
                                           torch.nn.Linear(6, 3)),
    "batchnorm-eval": lambda: torch.nn.Sequential(torch.nn.Linear(4, 6),
                                                  torch.nn.BatchNorm1d(6).eval(),
                                                  torch.nn.Linear(6, 3)),
}


@pytest.mark.parametrize("name", MODULES)
@given(seed=st.integers(0, 2**16), n=st.integers(1, 9))
def test_the_hooks_sums_are_the_per_sample_sums(name, seed, n):
    """S = sum_i |a_i| from one hooked pass equals S from one backward per sample (up to the
    rounding of the two ways of adding the same non-negative terms)."""
    torch.manual_seed(seed)
    model = MODULES[name]().double()
    x, y = data(n, seed)
    recorder = BoundRecorder(model, n, need_kappa=False)
    LOSS(model(x), y).backward()
    recorder.remove()
    params = dict(model.named_parameters())
    sums, s_norm = per_sample_sums(model, LOSS, x, y, params, n)
    for pname, p in params.items():
        hooked = recorder.sums[id(p)]
        assert torch.allclose(hooked, sums[pname], rtol=1e-12, atol=0), pname
        assert bool((p.grad.abs() <= hooked * (1 + 1e-12)).all())
    assert recorder.s_norm() >= s_norm * (1 - 1e-12)  # per layer max |delta| max |h| >= max|a|


def test_a_parameter_outside_the_known_modules_is_bounded_per_sample():
    x = torch.randn(10, 2, 6, dtype=torch.float64)
    y = torch.randint(0, 3, (10,))
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Conv1d(2, 4, 3), torch.nn.Flatten(),
                                torch.nn.Linear(16, 3)).double()

    def step(model, x, y):
        for xj, yj in zip(x.split([7, 3]), y.split([7, 3])):
            torch.nn.functional.cross_entropy(model(xj), yj, reduction="sum").div(10).backward()

    report = check_accumulation(model, LOSS, x, y, step)
    assert report.equivalent is True and "0.weight" in report.parameters
    assert math.isfinite(report.parameters["0.weight"].bound)


def test_the_report_gives_the_bound_against_the_gradient_per_parameter():
    x, y = data(12, 0)
    report = check_accumulation(mlp(), LOSS, x, y, loop([5, 5, 2], ITEMS))
    for p in report.parameters.values():
        assert p.grad_norm > 0 and 0 < p.bound_norm < p.grad_norm
    total = math.hypot(*(p.bound_norm for p in report.parameters.values())) / math.hypot(
        *(p.grad_norm for p in report.parameters.values()))
    assert report.resolution == pytest.approx(total, rel=1e-12)
    assert "| ‖b‖ / ‖g‖ |" in str(report)


def cuda():
    if not torch.cuda.is_available():
        pytest.skip("no CUDA GPU here: the checker's CUDA cases run where a GPU is lent")
    return torch.device("cuda")


def test_on_a_gpu_dropout_is_randomness_and_low_precision_is_checked_in_float64():
    device = cuda()
    x, y = data(24, 0)
    x, y = x.to(device), y.to(device)
    model = mlp(torch.nn.Dropout(0.3)).to(device)
    sizes = [10, 10, 4]
    report = check_accumulation(model, LOSS, x, y, loop(sizes, ITEMS))
    if report.equivalent is False:  # CUDA masks depend on the kernel call, not the row
        assert "randomness differs" in report.causes[0]
    else:
        assert report.equivalent is True
    low = mlp(dtype=torch.bfloat16).to(device)
    xb = x.to(torch.bfloat16)
    assert check_accumulation(low, LOSS, xb, y, loop(sizes, ITEMS)).equivalent is True
    bad = check_accumulation(low, LOSS, xb, y, loop(sizes, TEXTBOOK))
    assert bad.equivalent is False and "textbook" in bad.causes[0]


def test_a_step_that_cannot_run_in_float64_gets_no_verdict_and_its_own_errors_still_raise():
    from minigrad.interop.torch import TrainStepError

    x, y = data(6, 0, torch.bfloat16)
    model = mlp(dtype=torch.bfloat16)

    def cast(model, x, y):  # casts to bfloat16 by hand: fails against float64 weights
        torch.nn.functional.cross_entropy(model(x.to(torch.bfloat16)), y).backward()

    report = check_accumulation(model, LOSS, x, y, cast)
    assert report.equivalent is None
    assert "could not run on float64 copies" in report.verdict and "BFloat16" in report.verdict

    def buggy(model, x, y):
        raise KeyError("no such column")

    with pytest.raises(TrainStepError, match="KeyError: 'no such column'"):
        check_accumulation(model, LOSS, x, y, buggy)
