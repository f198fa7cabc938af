"""The numbers behind the BatchNorm explorer: for each global batch, micro-batch size and
BatchNorm momentum, the gradient's error against full batch with BatchNorm, its exact mode,
GroupNorm and LayerNorm, and the running statistics' drift after a few updates."""



from minigrad import nn, optim
from minigrad.accumulate import accumulated_gradients, split_sizes, step
from minigrad.analysis import bounds, metrics
from minigrad.engine import backend, validate
from minigrad.studies.batchnorm import divergence as batchnorm
from minigrad.studies.explorers import control, key, positive_ints


# ----- BatchNorm: gradient and running statistics against micro-batch size -----------------
def batchnorm_setup(n, updates=3, seed=0):
    """The BatchNorm explorer's ``factory(norm, momentum)`` of MLPs [8, 32, 32, 4] (the
    BatchNorm momentum set on every BatchNorm1d), cross-entropy, and ``updates`` batches of
    ``n`` samples (the gradient is measured on the first)."""
    n = validate.positive_int("n", n)
    generator = backend.rng(seed + n)
    batches = [(generator.normal(size=(n, 8)), generator.integers(0, 4, size=n))
               for _ in range(validate.positive_int("updates", updates))]

    def factory(norm, momentum=0.1):
        def make():
            model = nn.MLP([8, 32, 32, 4], norm=norm, seed=0)
            for _, module in model.named_modules():
                if isinstance(module, nn.BatchNorm1d):
                    module.momentum = momentum
            return model
        return make

    return {"factory": factory, "loss": nn.CrossEntropyLoss(), "batches": batches}


def _sgd(params):
    return optim.SGD(params, lr=0.1, momentum=0.9)


def running_stat_gap(model_factory, loss_fn, batches, micro_batch_size, strategy="micro"):
    """max_rel of each running statistic (``"running_mean"``, ``"running_var"``), worst
    layer, after one SGD update (lr 0.1, momentum 0.9) per ``(x, y)`` of ``batches``: over
    micro-batches run by ``strategy`` against full batch. With ``strategy="micro"`` it is
    ``batchnorm.running_stat_drift`` at its last update; this one also runs the exact mode."""
    states = []
    for split in ({}, {"micro_batch_size": micro_batch_size, "strategy": strategy}):
        model = model_factory()
        optimizer = _sgd(model.parameters())
        for x, y in batches:
            step(model, loss_fn, optimizer, x, y, **split)
        states.append(model.state_dict())
    full, acc = states
    return {stat: max(metrics.compare_arrays(acc[name], full[name])["max_rel"]
                      for name in full if name.endswith(stat))
            for stat in ("running_mean", "running_var")}


def batchnorm_explorer(batch_sizes=(32, 64, 128), micro_batch_sizes=(2, 4, 8, 16, 32),
                       momenta=(0.01, 0.1, 0.3, 0.9), updates=3, seed=0):
    """Per global batch N, micro-batch size m (at most N) and BatchNorm momentum
    (``batchnorm_setup``): the gradient's ``rel_error`` and ``cosine`` against full batch
    (``batchnorm.gradient_divergence``) with BatchNorm, BatchNorm in the exact mode
    (``strategy="exact_batchnorm"``), GroupNorm and LayerNorm; for both BatchNorm runs the
    running statistics' max_rel after ``updates`` SGD updates (``batchnorm.running_stat_drift``;
    ``running_stat_gap`` for the exact mode, which it does not run)."""
    micro_batch_sizes = positive_ints("micro_batch_sizes", micro_batch_sizes)
    if min(micro_batch_sizes) < 2:
        raise ValueError(f"micro_batch_sizes must be >= 2 (the unbiased variance of one "
                         f"sample is 0 / 0), got {micro_batch_sizes}")
    momenta = [validate.real("momenta", v, high=1.0, strict_low=True) for v in momenta]
    controls = [control("batch", "global batch N", positive_ints("batch_sizes", batch_sizes)),
                control("micro", "micro-batch size m", micro_batch_sizes),
                control("momentum", "BatchNorm momentum", momenta)]
    cases = {}
    for i, n in enumerate(batch_sizes):
        setup = batchnorm_setup(n, updates, seed)
        factory, loss, batches = setup["factory"], setup["loss"], setup["batches"]
        x, y = batches[0]
        sizes = [min(m, n) for m in micro_batch_sizes]
        grads = {norm: batchnorm.gradient_divergence(factory(norm), loss, x, y, sizes)
                 for norm in ("batch", "group", "layer")}
        full = bounds.flat(accumulated_gradients(factory("batch")(), loss, x, y).values())
        for j, m in enumerate(sizes):
            exact = accumulated_gradients(factory("batch")(), loss, x, y, micro_batch_size=m,
                                          strategy="exact_batchnorm")
            rows = {norm: grads[norm][m]["all"] for norm in grads}
            rows["exact"] = metrics.vector_gap(bounds.flat(exact.values()), full)
            for k, momentum in enumerate(momenta):
                case = {norm: dict(row) for norm, row in rows.items()}
                drift = batchnorm.running_stat_drift(factory("batch", momentum), _sgd, loss,
                                                     batches, m)
                for stat in ("running_mean", "running_var"):
                    case["batch"][stat] = max(d[stat]["max_rel"][-1] for d in drift.values())
                case["exact"].update(running_stat_gap(factory("batch", momentum), loss,
                                                      batches, m, strategy="exact_batchnorm"))
                cases[key(i, j, k)] = {"sizes": split_sizes(n, micro_batch_size=m),
                                        "rows": case}
    return {"controls": controls, "updates": updates, "cases": cases}
