"""The numbers behind the step-accounting explorer: for each optimizer, mistake (one thing
of the update done per micro-batch, ``pitfalls.MISTAKES``) and number of micro-batches, the
parameter gap to full batch per update beside its rounding bound."""



from minigrad import nn, optim
from minigrad.accumulate import split_sizes
from minigrad.engine import backend, validate
from minigrad.studies.explorers import control, key
from minigrad.studies.step_accounting import pitfalls

# ----- step accounting: one thing of the update done per micro-batch ------------------------
STEP_OPTIMIZERS = {
    "sgd": ("SGD, momentum", lambda ps: optim.SGD(ps, lr=0.1, momentum=0.9, weight_decay=0.01)),
    "adam": ("Adam", lambda ps: optim.Adam(ps, lr=0.01, weight_decay=0.01)),
    "adamw": ("AdamW", lambda ps: optim.AdamW(ps, lr=0.01, weight_decay=0.1)),
}
"""The step-accounting explorer's optimizers: name -> (label, factory from parameters), each
with weight decay, so that applying it per micro-batch changes something."""
MISTAKE_LABELS = {"adam_count": "Adam's step count", "schedule": "the learning-rate schedule",
                  "weight_decay": "weight decay", "clipping": "gradient clipping",
                  "zero_grad": "zeroing the gradients", "step_each": "the optimizer's step"}
"""What each of ``pitfalls.MISTAKES`` does per micro-batch, in words."""


def step_accounting_setup(batch_size=32, updates=8, seed=0):
    """The step-accounting explorer's MLP [6, 16, 3] factory, cross-entropy, ``updates``
    batches of ``batch_size`` samples, and ``schedule(optimizer)``: a ``Scheduler`` halving
    the rate every 2 updates (``optim.step_decay``)."""
    batch_size = validate.positive_int("batch_size", batch_size)
    generator = backend.rng(seed)
    batches = [(generator.normal(size=(batch_size, 6)),
                generator.integers(0, 3, size=batch_size))
               for _ in range(validate.positive_int("updates", updates))]
    return {"make": lambda: nn.MLP([6, 16, 3], seed=0), "loss": nn.CrossEntropyLoss(),
            "batches": batches,
            "schedule": lambda opt: optim.Scheduler(opt, optim.step_decay(opt.lr, 2, 0.5))}


def step_accounting_explorer(optimizers=tuple(STEP_OPTIMIZERS), mistakes=pitfalls.MISTAKES[1:],
                             num_micro_batches=(2, 4, 8, 16), batch_size=32, updates=8,
                             max_grad_norm=0.05, seed=0):
    """Per optimizer (``STEP_OPTIMIZERS``), mistake (``pitfalls.MISTAKES``) and number of
    micro-batches k: ``pitfalls.compare`` on ``step_accounting_setup``, clipping at
    ``max_grad_norm``. Per update: the rounding bound and, for the library's accumulation and
    for the mistake, the largest parameter gap to full batch and gap / bound. A mistake the
    optimizer cannot make (Adam's count with SGD) carries the library's refusal instead."""
    optimizers = [validate.choice("optimizers", o, tuple(STEP_OPTIMIZERS)) for o in optimizers]
    mistakes = [validate.choice("mistakes", m, pitfalls.MISTAKES[1:]) for m in mistakes]
    num_micro_batches = [validate.integer("num_micro_batches", k, low=1, high=batch_size)
                         for k in num_micro_batches]
    controls = [control("optimizer", "optimizer", optimizers,
                         [STEP_OPTIMIZERS[o][0] for o in optimizers]),
                control("mistake", "done per micro-batch", mistakes,
                         [MISTAKE_LABELS[m] for m in mistakes]),
                control("micro", "micro-batches k", num_micro_batches)]
    setup = step_accounting_setup(batch_size, updates, seed)
    make, loss, batches, schedule = (setup[k] for k in ("make", "loss", "batches", "schedule"))
    cases = {}
    for i, name in enumerate(optimizers):
        make_optimizer = STEP_OPTIMIZERS[name][1]
        refused = {}
        for mistake in mistakes:
            model = make()
            opt = make_optimizer(model.parameters())
            try:  # pitfalls.update checks everything before it changes anything
                pitfalls.update(model, loss, opt, *batches[0], [batch_size], mistake=mistake,
                                max_grad_norm=max_grad_norm, scheduler=schedule(opt))
            except ValueError as err:
                refused[mistake] = str(err)
        made = [m for m in mistakes if m not in refused]
        for j, k in enumerate(num_micro_batches):
            result = pitfalls.compare(make, make_optimizer, loss, batches,
                                      split_sizes(batch_size, num_micro_batches=k),
                                      mistakes=made, max_grad_norm=max_grad_norm,
                                      make_scheduler=schedule)
            for m, mistake in enumerate(mistakes):
                case = {"bound": result["bound"], "accumulated": result["gap"]["accumulated"],
                        "accumulated_ratio": result["ratio"]["accumulated"]}
                if mistake in refused:
                    case["refused"] = refused[mistake]
                else:
                    case["mistake"] = result["gap"][mistake]
                    case["mistake_ratio"] = result["ratio"][mistake]
                cases[key(i, m, j)] = case
    return {"controls": controls, "cases": cases}
