"""``minigrad.interop.torch.check_accumulation``: it flags the loops that are not the full
batch, each with the cause a run without it confirms (the textbook loop on an uneven split,
BatchNorm, fresh dropout randomness, clipping, zeroing, a rescaling), compares the update
exactly (step count, starting state, hyperparameters, scheduler, scaler), passes the loops
that are, and never changes what it is given. Precision, the bound and GPUs:
``test_torch_precision.py``.
"""

import math
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
    assert bad.equivalent is False
    assert len(bad.causes) == 1 and "textbook" in bad.causes[0]
    assert "identical items" in bad.causes[0]  # the counterfactual that confirmed it


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
    assert report.equivalent is False
    assert report.causes == [c for c in report.causes if "12 x the full-batch" in c] != []


def test_batchnorm_is_flagged_and_named_group_and_layer_norm_pass():
    x, y = data()
    report = check_accumulation(mlp(torch.nn.BatchNorm1d(8)), LOSS, x, y, item_weighted)
    assert report.equivalent is False
    assert "batch-coupled" in report.causes[0] and "1 (BatchNorm1d)" in report.causes[0]
    # and its running statistics moved once per micro-batch, not once
    assert report.causes[1:] == [c for c in report.causes if "1.running_mean" in c] != []
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
    assert report.equivalent is False
    assert len(report.causes) == 1 and "randomness differs" in report.causes[0]
    assert "textbook" not in report.verdict


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
        opt.zero_grad()

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
    bad = check_accumulation(mlp(), LOSS, x, y, clip_each, max_norm=max_norm)
    assert bad.equivalent is False and bad.causes == [
        "the gradient was clipped 3 times in the window: per micro-batch (each partial sum "
        "clipped on its own), not once after the window"]
    unsaid = check_accumulation(mlp(), LOSS, x, y, clip_once)  # no max_norm given
    assert unsaid.equivalent is False and "got no max_norm" in unsaid.causes[0]


def test_zeroing_inside_the_window_is_flagged():
    x, y = data()

    def zero_each(model, x, y):
        for xj, yj in zip(x.split(SIZES), y.split(SIZES)):
            model.zero_grad()
            torch.nn.functional.cross_entropy(model(xj), yj, reduction="sum").div(
                len(y)).backward()

    report = check_accumulation(mlp(), LOSS, x, y, zero_each)
    assert report.equivalent is False
    assert len(report.causes) == 1 and "zero_grad" in report.causes[0]


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


# --- the update, compared exactly -------------------------------------------------------------

def window(*, decay_grads=0.0, decay_weights=0.0, clear=False, schedule_each=False,
           step_each=False, after=None):
    """The item-weighted window and one update, with one mistake switched on."""
    def step(model, x, y, opt, sched):
        for xj, yj in zip(x.split(SIZES), y.split(SIZES)):
            torch.nn.functional.cross_entropy(model(xj), yj, reduction="sum").div(
                len(y)).backward()
            with torch.no_grad():
                for p in model.parameters():
                    p.grad.add_(p, alpha=decay_grads)        # decay added per micro-batch
                    p.mul_(1 - decay_weights)                # decoupled decay per micro-batch
            if schedule_each:
                sched.step()
            if step_each:
                opt.step()
        if clear:
            opt.state.clear()
        if not step_each:
            opt.step()
        if after:
            after(model)
        if not schedule_each:
            sched.step()
        opt.zero_grad()
    return step


def primed(model, adam=True):
    """An optimizer that has stepped once (state to clear) and a StepLR whose rate moves
    only every 10 steps (a scheduler stepped 3 times per window keeps its rate)."""
    opt = (torch.optim.Adam(model.parameters(), lr=1e-2) if adam
           else torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9))
    x, y = data(seed=5)
    torch.nn.functional.cross_entropy(model(x), y).backward()
    opt.step()
    opt.zero_grad()
    return opt, torch.optim.lr_scheduler.StepLR(opt, step_size=10, gamma=0.5)


@pytest.mark.filterwarnings("ignore:Detected call of `lr_scheduler.step\\(\\)`")
@pytest.mark.parametrize("adam", [True, False])
@pytest.mark.parametrize("mistake, options, words", [
    ("none", {}, None),
    ("scheduler k times, rate unchanged", dict(schedule_each=True), "scheduler's count"),
    ("decay added to the gradients", dict(decay_grads=1e-2), "x the parameters"),
    ("decay applied to the weights", dict(decay_weights=1e-3), "changed inside the window"),
    ("state cleared", dict(clear=True), "optimizer's state"),
    ("a step per micro-batch", dict(step_each=True), "3 times in one window"),
    ("weights changed after the step",
     dict(after=lambda m: [p.data.mul_(0.999) for p in m.parameters()]), "not one"),
])
def test_the_update_is_compared_not_only_the_first_gradient(adam, mistake, options, words):
    x, y = data()
    model = mlp()
    opt, sched = primed(model, adam)
    report = check_accumulation(model, LOSS, x, y, window(**options), optimizer=opt,
                                scheduler=sched)
    if words is None:
        assert report.equivalent is True and report.causes == []
        assert report.resolution < report.threshold
    else:
        assert report.equivalent is False, mistake
        assert len(report.causes) == 1 and words in report.causes[0], report.causes


def scaled_update(update=True):
    # (update() per micro-batch, before any step, is refused by PyTorch itself: "No inf checks
    # were recorded prior to update")
    def step(model, x, y, opt, sched, scaler):
        for xj, yj in zip(x.split(SIZES), y.split(SIZES)):
            loss = torch.nn.functional.cross_entropy(model(xj), yj, reduction="sum") / len(y)
            scaler.scale(loss).backward()
        scaler.unscale_(opt)
        torch.nn.utils.clip_grad_norm_(model.parameters(), 0.05)
        scaler.step(opt)
        if update:
            scaler.update()
        sched.step()
        opt.zero_grad()
    return step


def test_a_grad_scaler_is_compared_after_the_window():
    x, y = data()
    model = mlp()
    opt, sched = primed(model)
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0**10, growth_interval=1)
    good = check_accumulation(model, LOSS, x, y, scaled_update(), optimizer=opt,
                              scheduler=sched, scaler=scaler, max_norm=0.05)
    assert good.equivalent is True and good.optimizer_steps == 1
    bad = check_accumulation(model, LOSS, x, y, scaled_update(update=False),
                             optimizer=opt, scheduler=sched, scaler=scaler, max_norm=0.05)
    assert bad.equivalent is False and "GradScaler" in bad.causes[0]
    assert scaler.get_scale() == 2.0**10  # the caller's scaler never moved


def test_a_step_without_backward_says_so_and_no_cause_on_an_equivalent_report():
    x, y = data()
    model = mlp()
    opt, _ = primed(model)
    report = check_accumulation(model, LOSS, x, y, lambda m, x, y, o: o.step(), optimizer=opt)
    assert report.equivalent is False and "never called backward" in report.causes[0]
    assert "0 x the full-batch" not in report.verdict
    good = check_accumulation(mlp(), LOSS, x, y, item_weighted)
    assert good.causes == [] and good.verdict.startswith("equivalent")


def test_a_shuffled_micro_batch_order_is_still_the_full_batch():
    x, y = data()

    def shuffled(model, x, y):
        order = torch.randperm(len(y))
        item_weighted(model, x[order], y[order])

    assert check_accumulation(mlp(), LOSS, x, y, shuffled).equivalent is True


class CallDropout(torch.nn.Dropout):
    """Dropout whose mask depends on the call, not the row, as CUDA's does (its Philox offset
    advances by a fixed amount per kernel call): deterministic from the seed, but micro-batch
    masks never equal the full batch's rows."""

    def forward(self, x):
        if not self.training:
            return x
        g = torch.Generator().manual_seed(int(torch.randint(0, 2**31, ())))
        return x * (torch.rand(x.shape, generator=g, dtype=x.dtype) >= self.p) / (1 - self.p)


def test_call_dependent_dropout_is_randomness_not_the_textbook_loop():
    x, y = data()
    report = check_accumulation(mlp(CallDropout(0.3)), LOSS, x, y, item_weighted)
    assert report.equivalent is False
    assert len(report.causes) == 1 and "randomness differs" in report.causes[0]
    assert "1 (CallDropout)" in report.causes[0]
    both = check_accumulation(mlp(CallDropout(0.3)), LOSS, x, y, textbook)
    assert both.equivalent is False and "textbook" in " ".join(both.causes)


def test_manual_weight_decay_and_reseeded_dropout_get_their_own_causes():
    x, y = data()

    def reseeded(model, x, y):
        for j, (xj, yj) in enumerate(zip(x.split(SIZES), y.split(SIZES))):
            torch.manual_seed(100 + j)
            torch.nn.functional.cross_entropy(model(xj), yj, reduction="sum").div(
                len(y)).backward()

    report = check_accumulation(mlp(torch.nn.Dropout(0.3)), LOSS, x, y, reseeded)
    assert report.equivalent is False and "randomness differs" in report.causes[0]

    def decayed(model, x, y):
        item_weighted(model, x, y)
        for p in model.parameters():
            p.grad.add_(p.detach(), alpha=5e-3)  # by hand, and the optimizer adds it too

    report = check_accumulation(mlp(), LOSS, x, y, decayed)
    assert report.equivalent is False and "0.005 x the parameters" in report.causes[0]


# --- errors, and nothing changed ----------------------------------------------------------

def test_errors_are_named_before_anything_runs():
    x, y = data()
    frozen = mlp().requires_grad_(False)
    with pytest.raises(ValueError, match="every parameter is frozen"):
        check_accumulation(frozen, LOSS, x, y, item_weighted)
    with pytest.raises(ValueError, match=r"reduction='mean'\), got reduction='sum'"):
        check_accumulation(mlp(), torch.nn.CrossEntropyLoss(reduction="sum"), x, y,
                           item_weighted)
    with pytest.raises(TypeError, match=r"x must have the model's dtype \['torch.float64'\], "
                                        "got x of dtype torch.float32"):
        check_accumulation(mlp(), LOSS, x.float(), y, item_weighted)
    with pytest.raises(ValueError, match="every target equal to ignore_index=-100"):
        check_accumulation(mlp(), LOSS, x, torch.full_like(y, -100), item_weighted)
    with pytest.raises(TypeError, match=r"must accept the call train_step\(model, x, y, "
                                        r"optimizer\).*signature \(model, x, y\)"):
        model = mlp()
        check_accumulation(model, LOSS, x, y, item_weighted,
                           optimizer=torch.optim.SGD(model.parameters(), lr=0.1))
    with pytest.raises(TypeError, match="scaler must be None, or a torch.amp.GradScaler"):
        check_accumulation(mlp(), LOSS, x, y, item_weighted, scaler="x2")


def test_an_error_in_train_step_is_reraised_with_its_context_and_nothing_changes():
    from minigrad.interop.torch import TrainStepError

    x, y = data()
    x_before, y_before = x.clone(), y.clone()
    model = mlp()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    rng = torch.get_rng_state()

    def mutating(model, x, y):
        x.mul_(2)     # the check hands copies: the caller's x and y stay as they were
        y.zero_()
        raise KeyError("no such column")

    with pytest.raises(TrainStepError, match=r"train_step raised KeyError: 'no such column' "
                                             r"\(called as train_step\(model, x, y\)"):
        check_accumulation(model, LOSS, x, y, mutating)
    assert torch.equal(x, x_before) and torch.equal(y, y_before)
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())
    assert torch.equal(torch.get_rng_state(), rng)

    def interrupted(model, x, y):
        torch.rand(3)
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        check_accumulation(model, LOSS, x, y, interrupted)
    assert torch.equal(torch.get_rng_state(), rng)
    assert all(p.grad is None for p in model.parameters())


def test_the_callers_tensors_reach_train_step_as_copies():
    x, y = data()
    x_before = x.clone()

    def scaling(model, x, y):
        x.mul_(1.0)  # in place on the copy
        item_weighted(model, x, y)

    assert check_accumulation(mlp(), LOSS, x, y, scaling).equivalent is True
    assert torch.equal(x, x_before)


class DictModel(torch.nn.Module):
    """A model that returns a dict, as Hugging Face models return a ModelOutput."""

    def __init__(self):
        super().__init__()
        self.net = mlp()

    def forward(self, x):
        return {"logits": self.net(x), "hidden": x.sum(-1)}


def test_a_dict_output_a_plateau_scheduler_and_a_scheduler_never_stepped():
    x, y = data()

    def loss_fn(out, y):
        return torch.nn.functional.cross_entropy(out["logits"], y)

    def step(model, x, y, opt, sched, plateau=True):
        for xj, yj in zip(x.split(SIZES), y.split(SIZES)):
            out = model(xj)["logits"]
            torch.nn.functional.cross_entropy(out, yj, reduction="sum").div(len(y)).backward()
        with torch.no_grad():
            loss = float(loss_fn(model(x), y))
        opt.step()
        if plateau:
            sched.step(loss)
        opt.zero_grad()

    model = DictModel()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    sched = torch.optim.lr_scheduler.ReduceLROnPlateau(opt, patience=0)
    assert check_accumulation(model, loss_fn, x, y, step, optimizer=opt,
                              scheduler=sched).equivalent is True
    report = check_accumulation(model, loss_fn, x, y, lambda *a: step(*a, plateau=False),
                                optimizer=opt, scheduler=sched)
    assert report.equivalent is False and "did not step once" in report.causes[0]


# --- what a window leaves behind, and two mistakes at once ----------------------------------

def items_window(model, x, y):
    item_weighted(model, x, y)


@pytest.mark.filterwarnings("ignore:Detected call of `lr_scheduler.step\\(\\)`")
@pytest.mark.parametrize("name, step, words", [
    ("never zeroed", lambda m, x, y, o, s: (items_window(m, x, y), o.step(), s.step()),
     "never zeroed"),
    ("rate changed after the step",
     lambda m, x, y, o, s: (items_window(m, x, y), o.step(), s.step(), o.zero_grad(),
                            o.param_groups[0].__setitem__("lr", 0.0)),
     "param_groups after the window"),
    ("scheduler before the optimizer",
     lambda m, x, y, o, s: (items_window(m, x, y), s.step(), o.step(), o.zero_grad()),
     "ran 1 time(s) before optimizer.step(): the rate has not moved yet"),
    ("eval mode inside the window",
     lambda m, x, y, o, s: (m.eval(), items_window(m, x, y), o.step(), s.step(),
                            o.zero_grad()),
     "in eval mode"),
])
def test_what_the_window_leaves_for_the_next_one_is_compared(name, step, words):
    x, y = data()
    model = mlp(torch.nn.Dropout(0.2))
    opt, sched = primed(model)  # StepLR(step_size=10): the rate does not move in one window
    report = check_accumulation(model, LOSS, x, y, step, optimizer=opt, scheduler=sched)
    assert report.equivalent is False, name
    assert any(words in c for c in report.causes), report.causes


def test_an_extra_forward_in_train_mode_moves_batchnorm_statistics():
    x, y = data()
    model = mlp(torch.nn.BatchNorm1d(8)).eval()   # eval: BatchNorm is not batch-coupled
    opt = torch.optim.SGD(model.parameters(), lr=0.1)

    def logged(model, x, y, opt):
        item_weighted(model, x, y)
        model.train()
        model(x)                                   # "just for logging", in train mode
        model.eval()
        opt.step()
        opt.zero_grad()

    report = check_accumulation(model, LOSS, x, y, logged, optimizer=opt)
    assert report.equivalent is False and "1.running_mean" in report.causes[0]


def test_two_mistakes_in_one_loop_are_both_named():
    x, y = data()

    def zeroed_and_undivided(model, x, y):
        for xj, yj in zip(x.split(SIZES), y.split(SIZES)):
            model.zero_grad()
            torch.nn.functional.cross_entropy(model(xj), yj, reduction="sum").backward()

    report = check_accumulation(mlp(), LOSS, x, y, zeroed_and_undivided)
    assert report.equivalent is False and len(report.causes) == 2
    assert "12 x the full-batch" in report.causes[0]
    assert "zero_grad() cleared the gradients 2 time(s)" in report.causes[1]

    def clipped_textbook(model, x, y):
        for xj, yj in zip(x.split(SIZES), y.split(SIZES)):
            torch.nn.functional.cross_entropy(model(xj), yj).div(len(SIZES)).backward()
            torch.nn.utils.clip_grad_value_(model.parameters(), 0.01)

    report = check_accumulation(mlp(), LOSS, x, y, clipped_textbook)
    assert [c.split(":")[0] for c in report.causes] == [
        "the items are weighted differently from the full batch's mean, with the right total "
        "weight (on a batch of identical items the gap goes)",
        "the gradient was clipped 3 times in the window"]


class Positional(torch.nn.Module):
    """A dict output (a ModelOutput) and a parameter outside any known module."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.embed, self.out = torch.nn.Linear(4, 8), torch.nn.Linear(8, 3)
        self.pos = torch.nn.Parameter(torch.randn(8))

    def forward(self, x):
        return {"logits": self.out(torch.tanh(self.embed(x) + self.pos))}


def test_dict_outputs_with_uncovered_parameters_and_sparse_embeddings():
    x, y = data()

    def logits_loss(out, y):
        return torch.nn.functional.cross_entropy(out["logits"], y)

    def step(model, x, y):
        for xj, yj in zip(x.split(SIZES), y.split(SIZES)):
            logits_loss(model(xj), yj).mul(len(yj) / len(y)).backward()

    report = check_accumulation(Positional().double(), logits_loss, x, y, step)
    assert report.equivalent is True and math.isfinite(report.parameters["pos"].bound)
    torch.manual_seed(0)
    sparse = torch.nn.Sequential(torch.nn.Embedding(20, 8, sparse=True),
                                 torch.nn.Linear(8, 3)).double()
    ids = torch.randint(0, 20, (12,))
    opt = torch.optim.SGD(sparse.parameters(), lr=0.1)

    def sparse_step(model, x, y, opt):
        step(lambda t: {"logits": model(t)}, x, y)
        opt.step()
        opt.zero_grad()

    assert check_accumulation(sparse, LOSS, ids, y, sparse_step, optimizer=opt).equivalent


def test_a_loss_that_is_not_a_scalar_mean_and_a_boolean_max_norm_are_refused():
    x, y = data()
    with pytest.raises(ValueError, match=r"loss_fn\(model\(x\), y\) must be a scalar mean"):
        check_accumulation(mlp(), lambda out, y: torch.nn.functional.cross_entropy(
            out, y, reduction="none"), x, y, item_weighted)
    with pytest.raises(ValueError, match=r"reference loss_fn\(model\(x\), y\) raised AttributeErr"):
        check_accumulation(mlp(), lambda out, y: out.logits, x, y, item_weighted)
    with pytest.raises(ValueError, match="max_norm must be None or a positive number, got True"):
        check_accumulation(mlp(), LOSS, x, y, item_weighted, max_norm=True)
