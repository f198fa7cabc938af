"""``minigrad.interop.torch.check_accumulation``: it flags the loops that are not the full
batch (the textbook loop on an uneven split, BatchNorm, fresh dropout randomness, a scheduler
stepped per micro-batch), passes the ones that are, and never changes what it is given.
"""

import subprocess
import sys

import pytest

torch = pytest.importorskip("torch", reason="the `torch` extra is not installed")
from minigrad.interop.torch import check_accumulation  # noqa: E402

SIZES = (5, 5, 2)  # an uneven split of 12 samples


def data(n=12, seed=0):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(n, 4, generator=g, dtype=torch.float64),
            torch.randint(0, 3, (n,), generator=g))


def mlp(*middle):
    torch.manual_seed(1)
    return torch.nn.Sequential(torch.nn.Linear(4, 8), *middle, torch.nn.Tanh(),
                               torch.nn.Linear(8, 3)).double()


def item_weighted(model, x, y):
    """Each micro-batch's summed loss over the window's item count: the item-weighted rule."""
    n = len(y)
    for xj, yj in zip(x.split(SIZES), y.split(SIZES)):
        torch.nn.functional.cross_entropy(model(xj), yj, reduction="sum").div(n).backward()


def textbook(model, x, y):
    """Each micro-batch's mean divided by the number of micro-batches: the textbook loop."""
    for xj, yj in zip(x.split(SIZES), y.split(SIZES)):
        torch.nn.functional.cross_entropy(model(xj), yj).div(len(SIZES)).backward()


LOSS = torch.nn.CrossEntropyLoss()


def test_the_item_weighted_loop_passes_and_the_textbook_loop_is_flagged():
    x, y = data()
    good = check_accumulation(mlp(), LOSS, x, y, item_weighted)
    assert good.equivalent and not good.causes
    assert all(p.ratio <= 1 for p in good.parameters.values())
    bad = check_accumulation(mlp(), LOSS, x, y, textbook)
    assert not bad.equivalent
    assert any("textbook" in c for c in bad.causes)


def test_ignored_targets_break_the_textbook_loop_even_on_an_even_split():
    x, y = data()
    y[[0, 1, 2]] = -100

    def even_textbook(model, x, y):
        for xj, yj in zip(x.split(6), y.split(6)):
            torch.nn.functional.cross_entropy(model(xj), yj).div(2).backward()

    def even_items(model, x, y):
        n = int((y != -100).sum())
        for xj, yj in zip(x.split(6), y.split(6)):
            torch.nn.functional.cross_entropy(model(xj), yj, reduction="sum").div(n).backward()

    assert not check_accumulation(mlp(), LOSS, x, y, even_textbook).equivalent
    assert check_accumulation(mlp(), LOSS, x, y, even_items).equivalent


def test_a_rescaled_gradient_is_named_a_normalisation():
    x, y = data()

    def undivided(model, x, y):
        for xj, yj in zip(x.split(SIZES), y.split(SIZES)):
            torch.nn.functional.cross_entropy(model(xj), yj, reduction="sum").backward()

    report = check_accumulation(mlp(), LOSS, x, y, undivided)
    assert not report.equivalent
    assert any("12 x the full-batch" in c for c in report.causes)


def test_batchnorm_is_flagged_and_named_group_and_layer_norm_pass():
    x, y = data()
    report = check_accumulation(mlp(torch.nn.BatchNorm1d(8)), LOSS, x, y, item_weighted)
    assert not report.equivalent
    assert any("batch-coupled" in c and "1" in c for c in report.causes)
    for norm in (torch.nn.GroupNorm(2, 8), torch.nn.LayerNorm(8)):
        assert check_accumulation(mlp(norm.double()), LOSS, x, y, item_weighted).equivalent


def test_dropout_passes_with_the_seed_reset_and_is_flagged_with_fresh_randomness():
    x, y = data()
    model = mlp(torch.nn.Dropout(0.5))
    # The checker starts both runs from torch.manual_seed(seed); CPU dropout draws the masks
    # of consecutive micro-batches in the order of the full batch's rows.
    assert check_accumulation(model, LOSS, x, y, item_weighted).equivalent

    def fresh(model, x, y):
        torch.seed()  # a new, non-deterministic stream: masks differ from run to run
        item_weighted(model, x, y)

    report = check_accumulation(model, LOSS, x, y, fresh)
    assert not report.equivalent
    assert any("randomness" in c for c in report.causes)


def optimizer_and_scheduler(model):
    opt = torch.optim.SGD(model.parameters(), lr=0.5)
    return opt, torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.5)


# torch warns about the mistake too: the scheduler steps before the optimizer has.
@pytest.mark.filterwarnings("ignore:Detected call of `lr_scheduler.step\\(\\)`")
def test_a_scheduler_stepped_per_micro_batch_is_flagged():
    x, y = data()

    def per_update(model, x, y, opt, sched):
        item_weighted(model, x, y)
        opt.step()
        sched.step()

    def per_micro_batch(model, x, y, opt, sched):
        for xj, yj in zip(x.split(SIZES), y.split(SIZES)):
            torch.nn.functional.cross_entropy(model(xj), yj, reduction="sum").div(
                len(y)).backward()
            sched.step()
        opt.step()

    model = mlp()
    opt, sched = optimizer_and_scheduler(model)
    good = check_accumulation(model, LOSS, x, y, per_update, optimizer=opt, scheduler=sched)
    assert good.equivalent and good.optimizer_steps == 1
    bad = check_accumulation(model, LOSS, x, y, per_micro_batch, optimizer=opt,
                             scheduler=sched)
    assert not bad.equivalent
    assert any("scheduler" in c for c in bad.causes)


def test_the_users_model_optimizer_and_rng_are_unchanged():
    x, y = data()
    model = mlp(torch.nn.Dropout(0.2))
    opt, sched = optimizer_and_scheduler(model)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    opt_before, sched_before = repr(opt.state_dict()), repr(sched.state_dict())
    rng = torch.get_rng_state()

    def step(model, x, y, opt, sched):
        item_weighted(model, x, y)
        opt.step()
        sched.step()

    check_accumulation(model, LOSS, x, y, step, optimizer=opt, scheduler=sched)
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())
    assert all(p.grad is None for p in model.parameters())
    assert repr(opt.state_dict()) == opt_before and repr(sched.state_dict()) == sched_before
    assert torch.equal(torch.get_rng_state(), rng)
    opt.step()  # the user's optimizer still steps the user's model only
    assert sched.last_epoch == 0


@pytest.mark.parametrize("kwargs, match", [
    (dict(model="net"), "model must be a torch.nn.Module, got 'net'"),
    (dict(loss_fn=3), "loss_fn must be a callable"),
    (dict(train_step=None), "train_step must be a callable"),
    (dict(x=[[1.0]]), r"x must be a torch.Tensor, got \[\[1.0\]\]"),
    (dict(optimizer="sgd"), "optimizer must be None or a torch.optim.Optimizer, got 'sgd'"),
    (dict(seed=1.5), "seed must be an int, got 1.5"),
])
def test_bad_arguments_name_the_argument_the_value_and_what_is_allowed(kwargs, match):
    x, y = data()
    args = dict(model=mlp(), loss_fn=LOSS, x=x, y=y, train_step=item_weighted) | kwargs
    with pytest.raises(TypeError, match=match):
        check_accumulation(**args)


def test_bad_values_are_value_errors():
    x, y = data()
    with pytest.raises(ValueError, match=r"x of shape \(12, 4\) and y of shape \(11,\)"):
        check_accumulation(mlp(), LOSS, x, y[:11], item_weighted)
    with pytest.raises(ValueError, match="max_norm must be None or a positive number, got -1"):
        check_accumulation(mlp(), LOSS, x, y, item_weighted, max_norm=-1)
    other = torch.optim.SGD(mlp().parameters(), lr=0.1)
    with pytest.raises(ValueError, match="optimizer must update parameters of model"):
        check_accumulation(mlp(), LOSS, x, y, item_weighted, optimizer=other)


def test_without_torch_the_import_error_names_the_extra():
    code = ("import sys; sys.modules['torch'] = None\n"
            "try:\n    import minigrad.interop.torch\n"
            "except ImportError as e:\n    print(e)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout
    assert "minigrad[torch]" in out


def test_clipping_the_window_passes_clipping_each_micro_batch_is_flagged():
    x, y = data()
    max_norm = 0.05  # below the gradient's norm: every clip scales

    def clip_once(model, x, y):
        item_weighted(model, x, y)
        torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)

    def clip_each(model, x, y):
        for xj, yj in zip(x.split(SIZES), y.split(SIZES)):
            torch.nn.functional.cross_entropy(model(xj), yj, reduction="sum").div(
                len(y)).backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)

    assert check_accumulation(mlp(), LOSS, x, y, clip_once, max_norm=max_norm).equivalent
    assert not check_accumulation(mlp(), LOSS, x, y, clip_each, max_norm=max_norm).equivalent


def test_zeroing_inside_the_window_is_flagged():
    x, y = data()

    def zero_each(model, x, y):
        for xj, yj in zip(x.split(SIZES), y.split(SIZES)):
            model.zero_grad()
            torch.nn.functional.cross_entropy(model(xj), yj, reduction="sum").div(
                len(y)).backward()

    assert not check_accumulation(mlp(), LOSS, x, y, zero_each).equivalent


def test_float32_models_are_judged_in_float32_units():
    x, y = data()
    model = mlp().float()
    assert check_accumulation(model, LOSS, x.float(), y, item_weighted).equivalent
    assert not check_accumulation(model, LOSS, x.float(), y, textbook).equivalent


def test_frozen_parameters_are_left_out():
    x, y = data()
    model = mlp()
    model[0].weight.requires_grad_(False)
    report = check_accumulation(model, LOSS, x, y, item_weighted)
    assert report.equivalent and "0.weight" not in report.parameters
